import sys, json, pickle
sys.path.insert(0, '.')  # run from the repository root
import numpy as np
from evaluators.calibration import recorded_terms
from evaluators.holdout import fit_then_score, scores
from evaluators.recorded import load_recording
from workloads.registry import get_workload
D='experiments/data/'
fit=[D+x for x in ['rmsnorm_map_elites_s0.sqlite.xz','rmsnorm_random_s1.sqlite.xz','rmsnorm_gate5_map_elites_s0.sqlite.xz','rmsnorm_gate5_random_s1.sqlite.xz']]
rec=load_recording(fit); sc=load_recording([D+'rmsnorm_gate11_map_elites_s3.sqlite.xz'])
wl=get_workload('rmsnorm',dtype='bf16')
kern={k:m for r in [rec,sc] for k,m in r.kernels.items()}
terms=recorded_terms(kern.values(), wl, gpu='h200')
f=fit_then_score(rec,[sc],terms,surrogate=False)[0]
ref=np.array(list(rec.reference_times().values()))
out=dict(ids=f.identities, gpu=f.gpu_us, st=f.static_us, ref=ref, shapes=rec.shapes, consts=f.constants.to_json())
rows={}
for i in f.identities:
    m=sc.kernels[i]; r=m.row
    rows[i]=dict(id=r.id, operator=r.operator, edit=r.edit_text, parent_ids=r.parent_ids, parents=r.parents, launch=r.launch, ptx=r.ptx, features=r.features, objective=r.objective, terms=terms[i])
out['rows']=rows
# all rows of the store by id for parent lookup
import sqlite3
c=sqlite3.connect('/tmp/g11.sqlite')
out['allrows']={rid:dict(identity=idn,operator=op,edit=et,ptx=ptx,launch=json.loads(la),status=stt,objective=ob,parent_ids=json.loads(pi)) for rid,idn,op,et,ptx,la,stt,ob,pi in c.execute('select id,identity,operator,edit_text,ptx,launch,status,objective,parent_ids from candidates')}
pickle.dump(out,open('/tmp/diag/fold.pkl','wb'))
print(len(f.identities), list(terms[f.identities[0]].keys()), terms[f.identities[0]]['stats'], terms[f.identities[0]]['resources'])
print(json.dumps(terms[f.identities[0]]['terms'][json.dumps(list(rec.shapes[0]))]))
