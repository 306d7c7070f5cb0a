import pickle, json, numpy as np, sys
sys.path.insert(0, '.')  # run from the repository root
from evaluators.fidelity import rank_metrics
from evaluators.holdout import scores
d=pickle.load(open('/tmp/diag/fold.pkl','rb'))
ids=d['ids']; G=d['gpu']; S=d['st']; ref=d['ref']; rows=d['rows']
sg=scores(G,ref)
dis=[j for j,i in enumerate(ids) if rows[i]['id'] in (276,278,111,114)]
def ov(S_): return int(rank_metrics(sg,scores(S_,ref),top=50)['overlap_top'])
def sp(S_): return round(rank_metrics(sg,scores(S_,ref),top=50)['spearman_top'],3)
S1=S.copy(); S1[dis]=G[dis]
print('v4 + the 4 catastrophic prefetch mutants priced at their GPU times:', ov(S1), sp(S1))
Sc=np.load('/tmp/diag/S_ceil_refit_on_fit_stores.npy'); Sc1=Sc.copy(); Sc1[dis]=G[dis]
print('busiest-thread floor (refit) alone:', ov(Sc), sp(Sc), '+ prefetch fix:', ov(Sc1), sp(Sc1))
# 512-only correction for N-like (threads/rows_per_cta >= 2x row/vec ... ) knob sets: scale v4 N-set 512 time by GPU/static median
