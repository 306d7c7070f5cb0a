# Each group's knob sets, from the lineage: the nearest ancestor (or the kernel itself) made by the template
# operator, whose edit text names every knob ("KNOBS a=1 b=2 ..."); seeds: "seed".
import json, pickle
from collections import Counter
import numpy as np
from evaluators.recorded import open_store
d = pickle.load(open("/tmp/diag4/fold.pkl", "rb"))
terms = json.load(open('/root/.cache/ptxforge/recorded/terms-rmsnorm-h200-fdf021acc4f646c5.json'))
with open_store("experiments/data/rmsnorm_gate14_map_elites_s4.sqlite.gz") as st:
    rows = {r.id: r for r in st.candidates()}
by_ident = {r.identity: r for r in rows.values()}
def knobset(r):
    while r is not None:
        if r.operator == "template" and r.edit_text.startswith("KNOBS"):
            return r.edit_text.splitlines()[0][6:]
        if r.operator == "seed" or not r.parent_ids:
            return "seed " + json.dumps(r.launch.get("knobs", {}))
        r = rows.get(r.parent_ids[0])
    return "?"
ids, G, S, ref = d["ids"], d["gpu"], d["static"], d["ref"]
sc = lambda T: -np.log(T / ref).mean(1)
gr = np.argsort(np.argsort(-sc(G))); sr = np.argsort(np.argsort(-sc(S)))
grp = {}
for i, ident in enumerate(ids):
    r = by_ident[ident]; t = terms[ident]
    k = (r.launch["block"][0], r.launch.get("knobs", {}).get("rows_per_cta"), t["resources"]["registers"], t["blocks_per_sm"])
    grp.setdefault(k, []).append(i)
for k, ii in sorted(grp.items(), key=lambda kv: min(gr[kv[1]])):
    if min(gr[ii]) >= 50 and min(sr[ii]) >= 50:
        continue
    c = Counter(knobset(by_ident[ids[i]]) for i in ii)
    print(k, len(ii), "static/gpu", np.round(np.median(S[ii], 0) / np.median(G[ii], 0), 3))
    for ks, n in c.most_common(3):
        print("    ", n, ks)
