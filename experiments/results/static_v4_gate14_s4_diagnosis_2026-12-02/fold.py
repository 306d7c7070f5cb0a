import json, pickle, numpy as np
from evaluators.recorded import load_recording
from evaluators.calibration import recorded_terms
from evaluators.holdout import fit_then_score
from workloads.registry import get_workload
D="experiments/data/"
fit=load_recording([D+x for x in ["rmsnorm_map_elites_s0.sqlite.xz","rmsnorm_random_s1.sqlite.xz","rmsnorm_gate5_map_elites_s0.sqlite.xz","rmsnorm_gate5_random_s1.sqlite.xz"]])
sc=load_recording([D+"rmsnorm_gate14_map_elites_s4.sqlite.xz"])
wl=get_workload("rmsnorm", dtype="bf16")
terms=recorded_terms(list(fit.kernels.values())+list(sc.kernels.values()), wl, processes=1)
f=fit_then_score(fit,[sc],terms,surrogate=False)[0]
ref=np.array(list(fit.baseline_times("torch").values()))
pickle.dump({"ids":f.identities,"gpu":f.gpu_us,"static":f.static_us,"shapes":fit.shapes,"ref":ref}, open("/tmp/diag4/fold.pkl","wb"))
print("ok", len(f.identities))
