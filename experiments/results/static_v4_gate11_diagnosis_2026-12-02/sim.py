import sys, json, pickle, numpy as np
sys.path.insert(0, '.')  # run from the repository root
import evaluators.cost_model as cm
import evaluators.calibration as cal
from evaluators.recorded import load_recording
from evaluators.fidelity import rank_metrics
from evaluators.holdout import scores
orig=cm.predict_parts
VARIANT=sys.argv[1] if len(sys.argv)>1 else 'ceil'
def patched(terms,c):
    t=dict(terms)
    lr=np.asarray(t['loop_rounds'],float); lb=np.asarray(t['loop_bodies'],float)
    if VARIANT in ('ceil','ceil_rounds'):
        # busiest thread: a body any thread runs costs >= 1 round trip: floor uses loop_bodies, not min(loop_rounds, loop_bodies)
        # emulate by raising loop_rounds used in the floor only
        per=np.where(lb>0, lr/np.maximum(lb,1), 0)
        ceil_per=np.where(lb>0, np.ceil(per-1e-9), 0)
        t['_floor_bodies']=lb
        if VARIANT=='ceil_rounds': t['loop_rounds']=ceil_per*lb
    return _pp(t,c)
def _pp(t,c):
    # copy of cm.predict_parts with the floor's bodies replaced
    T={k: np.asarray(t[k],dtype=float) for k in cm.TERM_NAMES}
    lat=c.latency_ns*1e-9; bw=T['copy_bps']*c.bw_scale; conc=np.minimum(T['ctas'],T['slots'])
    reread=np.maximum(0.0,T['partitioned_bytes']-T['compulsory']); ws=conc*T['sweep_bytes']; room=c.l2_fraction*T['l2_bytes']
    miss=np.where(ws<=room,0.0,1.0-room/np.maximum(ws,1.0))
    dram=T['compulsory']+reread*miss+T['spill_bytes']; l2=reread*(1.0-miss)+T['shared_bytes']
    serial=(c.cta_ns+c.barrier_ns*T['barriers']+c.cluster_barrier_ns*T['cluster_barriers']+c.dsmem_ns*T['dsmem'])*1e-9
    if '_floor_bodies' in t: bodies=np.where(T['loop_rounds']>0, np.asarray(t['_floor_bodies'],float), 0.0)
    else: bodies=np.minimum(T['loop_rounds'],T['loop_bodies'])
    rebody=np.where(reread>0,np.clip(bodies-1.0,0.0,1.0),0.0)
    floor=bodies-rebody*(1.0-miss)*(1.0-cm.L2_HIT_LATENCY_RATIO)
    loop_trips=np.maximum(T['loop_rounds']/c.loop_mlp,floor)
    mem=np.maximum((T['rounds']+loop_trips)*lat,1e-12); chain=mem+serial
    t_dram=dram/bw; t_l2=l2/(c.l2_gbps*1e9); active=np.minimum(T['sm_count'],T['ctas'])
    t_issue=T['requested']/(active*T['clock_hz']*np.minimum(32.0*T['width'],128.0))
    t_cta=np.ceil(T['ctas']/T['slots'])*chain; p=c.sharpness
    top=np.maximum(np.maximum(t_dram,t_l2),np.maximum(t_issue,t_cta))
    smooth=top*((t_dram/top)**p+(t_l2/top)**p+(t_issue/top)**p+(t_cta/top)**p)**(1/p)
    return {'t_dram':t_dram,'t_l2':t_l2,'t_issue':t_issue,'t_cta':t_cta,'t_chain':chain,'time_us':(smooth+chain)*1e6+c.launch_us}
def pt(terms,c):
    out=(patched if VARIANT!='v4' else _pp)(terms,c)['time_us']; return float(out) if np.ndim(out)==0 else out
cal.predict_time_us=pt
d=pickle.load(open("/tmp/diag/fold.pkl","rb"))
SCORE=sys.argv[2] if len(sys.argv)>2 else None
D='experiments/data/'
G1=len(sys.argv)>3 and sys.argv[3]=='g1'  # fit on the 2 gate-v1 stores only (else the 4 shipped stores)
fit=[D+x for x in ['rmsnorm_map_elites_s0.sqlite.xz','rmsnorm_random_s1.sqlite.xz']+([] if G1 else ['rmsnorm_gate5_map_elites_s0.sqlite.xz','rmsnorm_gate5_random_s1.sqlite.xz'])]
rec=load_recording(fit)
terms=json.load(open('/root/.cache/ptxforge/recorded/terms-rmsnorm-h200-fdf021acc4f646c5.json'))
ok={i for i,t in terms.items() if t.get('status')=='ok'}
train=[m for m in rec.kernels.values() if m.identity in ok]
arr,meas,sidx,_=cal.term_arrays(train,terms,rec.shapes)
shipped=cm.CostConstants.from_json(d['consts'])
consts,info=cal.fit_constants(arr,meas,sidx,seed=0)
ids=d['ids']; G=d['gpu']; ref=d['ref']; shapes=d['shapes']
if SCORE:
    sc=load_recording([D+SCORE]); ids=[m.identity for m in sc.kernels.values() if m.identity in ok and m.identity not in rec.kernels]
    G=np.array([[sc.kernels[i].times_us[s] for s in shapes] for i in ids]); print('scored',SCORE,len(ids))
class M: pass
tarr={k:[] for k in cm.TERM_NAMES}
for i in ids:
    for s in shapes:
        st=terms[i]['terms'][json.dumps(list(s))]
        for k in cm.TERM_NAMES: tarr[k].append(float(st[k]))
tarr={k:np.asarray(v) for k,v in tarr.items()}
res={}
for name,c in (('shipped_constants',shipped),('refit_on_fit_stores',consts)):
    S=np.asarray(pt(tarr,c)).reshape(len(ids),len(shapes))
    m=rank_metrics(scores(G,ref),scores(S,ref),top=50)
    med=[float(np.median(np.abs(S[:,j]-G[:,j])/G[:,j])) for j in range(len(shapes))]
    res[name]={k:round(v,3) for k,v in m.items()}; res[name]['median_err']=[round(x,3) for x in med]
    np.save(f'/tmp/diag/S_{VARIANT}_{name}{"_g1fit" if G1 else ""}.npy',S)
print(VARIANT, 'fit info', {k:round(v,4) for k,v in info.items()}, json.dumps({k:round(v,1) for k,v in consts.to_json().items()}))
for k,v in res.items(): print(' ',k,v)
