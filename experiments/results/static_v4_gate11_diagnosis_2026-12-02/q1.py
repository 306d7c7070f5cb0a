import pickle, json, numpy as np, collections, difflib, sys
d=pickle.load(open('/tmp/diag/fold.pkl','rb')); r=pickle.load(open('/tmp/diag/ranks.pkl','rb'))
ids=d['ids']; G=d['gpu']; S=d['st']; globals().update(r); shapes=d['shapes']; rows=d['rows']; allr=d['allrows']
n=len(ids)
def ksl(L):
    k=dict(L.get('knobs',{})); k['block']=L['block'][0]; return json.dumps(k,sort_keys=True)
K=[ksid.get(ksl(rows[ids[i]]['launch']),'?') for i in range(n)]
def short(L):
    k=L.get('knobs',{}); return f"t{k.get('threads')} r{k.get('rows_per_cta')} v{k.get('vec')} it{k.get('row_iters')} ch{k.get('max_chunks')} kr{k.get('keep_in_regs')} wr{k.get('w_regs')} h{k.get('cache_hint')} mb{k.get('min_blocks')}"
def pdiff(a,b):
    la=[l.strip() for l in a.splitlines() if l.strip() and not l.strip().startswith('//')]
    lb=[l.strip() for l in b.splitlines() if l.strip() and not l.strip().startswith('//')]
    dl=[l for l in difflib.unified_diff(la,lb,lineterm='',n=0) if (l.startswith('+') or l.startswith('-')) and not l.startswith('+++') and not l.startswith('---')]
    return dl
gA=[i for i in go[:50] if i not in set(so[:50])]
sA=[i for i in so[:50] if i not in set(go[:50])]
out={}
for name,grp in (('gpu_only',gA),('static_only',sA)):
    print('=====',name,len(grp))
    for i in sorted(grp,key=lambda i:grank[i]):
        rw=rows[ids[i]]; t=rw['terms']
        pid=rw['parent_ids'][0] if rw['parent_ids'] else None
        par=allr.get(pid)
        dl=pdiff(par['ptx'],rw['ptx']) if par else []
        launch_change = (ksl(par['launch'])!=ksl(rw['launch'])) if par else None
        pk=ksid.get(ksl(par['launch']),'new') if par else '-'
        print(f"id{rw['id']} {K[i]} grank{grank[i]} srank{srank[i]} op={rw['operator']} parent={pid}({pk}, {'launch changed' if launch_change else 'same launch'}) regs{t['resources']['registers']} bps{t['blocks_per_sm']} ptxdiff={len(dl)} lines")
        print('   gpu',np.round(G[i],1).tolist(),'static',np.round(S[i],1).tolist(), 'edit:',rw['edit'][:300].replace('\n',' | '))
        for l in dl[:8]: print('      ',l[:160])
