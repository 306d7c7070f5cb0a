import json, pickle, numpy as np
from collections import Counter
from evaluators.recorded import load_recording
d=pickle.load(open("/tmp/diag4/fold.pkl","rb"))
rec=load_recording(["experiments/data/rmsnorm_gate14_map_elites_s4.sqlite.gz"])
terms=json.load(open('/root/.cache/ptxforge/recorded/terms-rmsnorm-h200-fdf021acc4f646c5.json'))
ids=d["ids"]; G=d["gpu"]; S=d["static"]; ref=d["ref"]
sc=lambda T: -np.log(T/ref).mean(1)
g, s = sc(G), sc(S)
gr=np.argsort(np.argsort(-g)); sr=np.argsort(np.argsort(-s))
gt=set(np.where(gr<50)[0]); st=set(np.where(sr<50)[0])
def key(i):
    r=rec.kernels[ids[i]].row; t=terms[ids[i]]
    return (r.launch["block"][0], r.launch.get("knobs",{}).get("rows_per_cta"), t["resources"].get("registers"), t.get("blocks_per_sm"))
print("GPU top50 spread %.2f%%"%(100*(np.exp(np.sort(-g)[49]-np.sort(-g)[0])-1)))
for name, S_ in [("gpu_only", gt-st), ("static_only", st-gt), ("both", gt&st)]:
    print(name, len(S_), Counter(key(i) for i in S_).most_common(6))
grp={}
for i in range(len(ids)): grp.setdefault(key(i),[]).append(i)
for k in sorted({key(i) for i in gt|st}, key=lambda k: min(gr[grp[k]])):
    ii=grp[k]; gm=np.median(G[ii],0); sm=np.median(S[ii],0)
    print(k, len(ii), "gpu", np.round(gm,1), "static/gpu", np.round(sm/gm,3), "gpu ranks", int(min(gr[ii])), int(np.median(gr[ii])), "static", int(min(sr[ii])), int(np.median(sr[ii])))
