import pickle, json, numpy as np, collections
d=pickle.load(open('/tmp/diag/fold.pkl','rb')); r=pickle.load(open('/tmp/diag/ranks.pkl','rb'))
ids=d['ids']; G=d['gpu']; S=d['st']; globals().update(r)
n=len(ids)
def ks(i):
    L=d['rows'][ids[i]]['launch']; k=dict(L.get('knobs',{})); k['block']=L['block'][0]; return json.dumps(k,sort_keys=True)
inv={v:k for k,v in ksid.items()}
for x in 'LMNO': print(x, inv[x])
# per knob set: count in run, gpu rank range, static rank range
allks=collections.defaultdict(list)
for i in range(n): allks[ks(i)].append(i)
print('\nknobset  n_run  gpu_top50 st_top50  gpu rank min/med  static rank min/med  gpu score med  static score med')
for x in sorted(ksid.values()):
    L=allks[inv[x]]
    print(x, len(L), sum(grank[i]<50 for i in L), sum(srank[i]<50 for i in L), min(grank[i] for i in L), int(np.median([grank[i] for i in L])), min(srank[i] for i in L), int(np.median([srank[i] for i in L])), round(float(np.median(sg[L])),4), round(float(np.median(ss[L])),4))
# number of distinct static scores in top 50 static
print('distinct static scores in static top50', len(set(np.round(ss[so[:50]],6))), 'in GPU top50', len(set(np.round(ss[go[:50]],6))))
print('static 50th score', ss[so[49]], 'ties at boundary', sum(np.isclose(ss, ss[so[49]])))
print('gpu score range top50', sg[go[0]], sg[go[49]], 'spread %', 100*(np.exp(sg[go[0]]-sg[go[49]])-1))
