import pickle, json, numpy as np, collections, sys, re
sys.path.insert(0, '.')  # run from the repository root
from evaluators.holdout import scores
d=pickle.load(open('/tmp/diag/fold.pkl','rb')); r=pickle.load(open('/tmp/diag/ranks.pkl','rb'))
ids=d['ids']; G=d['gpu']; S=d['st']; ref=d['ref']; globals().update(r); n=len(ids); rows=d['rows']; allr=d['allrows']
def ks(L):
    k=dict(L.get('knobs',{})); k['block']=L['block'][0]; return json.dumps(k,sort_keys=True)
K=np.array([ksid.get(ks(rows[i]['launch']),'?') for i in ids])
S2=np.load('/tmp/diag/S_ceil_refit_on_fit_stores.npy'); s2=scores(S2,ref); o2=np.argsort(-s2,kind='stable')
print('ceil top50 "?" knob sets:', collections.Counter(ks(rows[ids[i]]['launch']) for i in o2[:50] if K[i]=='?').most_common(3))
print('ceil favourite', rows[ids[o2[0]]]['id'], K[o2[0]], 'grank', grank[o2[0]])
# spread within the A-bps8 tie group
bps=np.array([rows[i]['terms']['blocks_per_sm'] for i in ids])
for x,b in (('A',8),('A',6),('N',8)):
    m=np.where((K==x)&(bps==b))[0]
    print(x,b,'n',len(m),'GPU score spread % (max-min)',round(100*(np.exp(sg[m].max()-sg[m].min())-1),1),'IQR %',round(100*(np.exp(np.percentile(sg[m],75)-np.percentile(sg[m],25))-1),2), 'static distinct', len(set(np.round(ss[m],6))))
# id -> index
idx={rows[i]['id']:j for j,i in enumerate(ids)}
# edits vs parent (same launch), GPU ratio per shape and static ratio
print('\nop       n   GPU child/parent per shape (median)   |  n with |GPU change|>3% at some shape | static change')
byop=collections.defaultdict(list)
for j,i in enumerate(ids):
    rw=rows[i]; 
    if not rw['parent_ids']: continue
    p=rw['parent_ids'][0]
    if p not in idx: continue
    pj=idx[p]
    if ks(rows[ids[pj]]['launch'])!=ks(rw['launch']): continue
    byop[rw['operator']].append((j,pj))
for op,L in sorted(byop.items()):
    rg=np.array([G[j]/G[pj] for j,pj in L]); rs=np.array([S[j]/S[pj] for j,pj in L])
    print(f"{op:9s} {len(L):3d} {np.round(np.median(rg,0),3)}  big:{int((np.abs(rg-1)>0.03).any(1).sum())}  static changed:{int((np.abs(rs-1)>1e-6).any(1).sum())}")
# the big hint/prefetch effects
print('\nlargest same-launch edit effects (GPU child/parent, any shape > 4%):')
big=[]
for op,L in byop.items():
    for j,pj in L:
        rg=G[j]/G[pj]
        if (np.abs(rg-1)>0.04).any(): big.append((op,rows[ids[j]]['id'],rows[ids[pj]]['id'],K[j],np.round(rg,3).tolist(),np.round(S[j]/S[pj],3).tolist(),rows[ids[j]]['edit'][:150].replace('\n',' | ')))
for b in sorted(big,key=lambda b:b[0]): print(b)
