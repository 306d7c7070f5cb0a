import pickle, json, numpy as np, collections
d=pickle.load(open('/tmp/diag/fold.pkl','rb')); r=pickle.load(open('/tmp/diag/ranks.pkl','rb'))
ids=d['ids']; G=d['gpu']; S=d['st']; globals().update(r); shapes=d['shapes']
n=len(ids)
def ks(i):
    L=d['rows'][ids[i]]['launch']; k=dict(L.get('knobs',{})); k['block']=L['block'][0]; return json.dumps(k,sort_keys=True)
K=np.array([ksid.get(ks(i),'?') for i in range(n)])
print('static score value counts in static top50:')
for v,c in collections.Counter(np.round(ss[so[:50]],5)).most_common(): 
    members=[i for i in so[:50] if round(ss[i],5)==v]
    print(v,c,collections.Counter(K[members]))
print('A static scores:', collections.Counter(np.round(ss[K=='A'],4)))
print('N static scores:', collections.Counter(np.round(ss[K=='N'],4)))
print('\nper-shape median times (us): GPU | static, by knob set')
print('shapes',shapes)
for x in 'ABCNOLMDEJ':
    m=K==x
    print(x, m.sum(), 'GPU', np.round(np.median(G[m],0),2), 'static', np.round(np.median(S[m],0),2), 'st/gpu', np.round(np.median(S[m],0)/np.median(G[m],0),3))
