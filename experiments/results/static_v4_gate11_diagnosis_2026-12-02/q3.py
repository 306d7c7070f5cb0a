import pickle, json, numpy as np, collections
d=pickle.load(open('/tmp/diag/fold.pkl','rb')); r=pickle.load(open('/tmp/diag/ranks.pkl','rb'))
ids=d['ids']; G=d['gpu']; S=d['st']; globals().update(r); rows=d['rows']; n=len(ids)
def ks(L):
    k=dict(L.get('knobs',{})); k['block']=L['block'][0]; return json.dumps(k,sort_keys=True)
K=np.array([ksid.get(ks(rows[i]['launch']),'?') for i in ids])
gt=set(go[:50].tolist()); st=set(so[:50].tolist())
print('| id | set | regs | CTAs/SM | GPU rank | static rank | operator | parent | edit | GPU us (4 shapes) | static us |')
for grp,name in ((sorted(gt-st,key=lambda i:grank[i]),'gpu_only'),(sorted(st-gt,key=lambda i:srank[i]),'static_only')):
    print('##',name,len(grp), collections.Counter(K[grp]), 'ops',collections.Counter(rows[ids[i]]['operator'] for i in grp))
    for i in grp:
        rw=rows[ids[i]]; e=rw['edit'].split('\n')[0][:70].replace('|','/')
        print(f"| {rw['id']} | {K[i]} | {rw['terms']['resources']['registers']} | {rw['terms']['blocks_per_sm']} | {grank[i]+1} | {srank[i]+1} | {rw['operator']} | {rw['parent_ids'][0] if rw['parent_ids'] else '-'} | `{e}` | {' / '.join(f'{x:.1f}' for x in G[i])} | {' / '.join(f'{x:.1f}' for x in S[i])} |")
# in both
both=sorted(gt&st,key=lambda i:grank[i])
print('## both', len(both), collections.Counter(K[both]))
