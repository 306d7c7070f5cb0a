import pickle, json, numpy as np, collections, sys
sys.path.insert(0, '.')  # run from the repository root
from evaluators.cost_model import predict_parts, CostConstants, TERM_NAMES
d=pickle.load(open('/tmp/diag/fold.pkl','rb')); r=pickle.load(open('/tmp/diag/ranks.pkl','rb'))
ids=d['ids']; G=d['gpu']; S=d['st']; globals().update(r); shapes=d['shapes']
c=CostConstants.from_json(d['consts'])
n=len(ids)
def ks(i):
    L=d['rows'][ids[i]]['launch']; k=dict(L.get('knobs',{})); k['block']=L['block'][0]; return json.dumps(k,sort_keys=True)
K=np.array([ksid.get(ks(i),'?') for i in range(n)])
def show(i):
    t=d['rows'][ids[i]]['terms']
    print('kernel', d['rows'][ids[i]]['id'], K[i], 'grank',grank[i],'srank',srank[i], 'regs',t['resources']['registers'],'bps',t['blocks_per_sm'],'occ',round(t['occupancy'],3))
    for j,s in enumerate(shapes):
        tt=t['terms'][json.dumps(list(s))]
        p=predict_parts(tt,c)
        print('  ',s,'gpu',round(G[i,j],2),'st',round(S[i,j],2), {k:round(float(v)*1e6,2) if k.startswith('t_') else round(float(v),3) for k,v in p.items() if k in ('t_dram','t_l2','t_issue','t_cta','t_chain')}, {k:tt[k] for k in ('ctas','threads','slots','rounds','loop_rounds','loop_bodies','barriers','sweep_bytes','width','partitioned_bytes','compulsory')})
for x in 'ANB':
    m=np.where(K==x)[0]
    show(m[np.argmin(grank[m])])
# within A: the two static values
A=np.where(K=='A')[0]
for v in sorted(set(np.round(ss[A],4))):
    mm=[i for i in A if round(ss[i],4)==v]
    print('A static',v,len(mm),'gpu rank', sorted(grank[mm].tolist()))
    show(mm[0])
