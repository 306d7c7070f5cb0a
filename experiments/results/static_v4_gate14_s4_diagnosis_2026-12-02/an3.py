# The tables of the diagnosis: per group (threads, rows per CTA, registers, CTAs/SM) its GPU medians per shape,
# static / GPU, GPU and static ranks, how many of its kernels are in either top 50, and its knob sets from the
# lineage (the nearest template-made ancestor's "KNOBS a=1 b=2 ..." edit; seeds: "seed"). Needs fold.py first.
import json
import pickle
from collections import Counter

import numpy as np

from evaluators.recorded import open_store

d = pickle.load(open("/tmp/diag4/fold.pkl", "rb"))
terms = json.load(open('/root/.cache/ptxforge/recorded/terms-rmsnorm-h200-fdf021acc4f646c5.json'))
with open_store("experiments/data/rmsnorm_gate14_map_elites_s4.sqlite.xz") as st:
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
g, s = -np.log(G / ref).mean(1), -np.log(S / ref).mean(1)
gr, sr = np.argsort(np.argsort(-g)), np.argsort(np.argsort(-s))
print("GPU top 50 spread %.2f %%" % (100 * (np.exp(np.sort(-g)[49] - np.sort(-g)[0]) - 1)))
grp = {}
for i, ident in enumerate(ids):
    r, t = by_ident[ident], terms[ident]
    k = (r.launch["block"][0], r.launch.get("knobs", {}).get("rows_per_cta"), t["resources"]["registers"],
         t["blocks_per_sm"])
    grp.setdefault(k, []).append(i)
for k, ii in sorted(grp.items(), key=lambda kv: min(gr[kv[1]])):
    ii = np.array(ii)
    if min(gr[ii]) >= 50 and min(sr[ii]) >= 50:
        continue
    gm, sm = np.median(G[ii], 0), np.median(S[ii], 0)
    print(k, len(ii), "GPU", np.round(gm, 1), "static/GPU", np.round(sm / gm, 3),
          "GPU ranks min/median", int(min(gr[ii])), int(np.median(gr[ii])),
          "static", int(min(sr[ii])), int(np.median(sr[ii])),
          "top 50 GPU only / static only / both", int(((gr[ii] < 50) & (sr[ii] >= 50)).sum()),
          int(((sr[ii] < 50) & (gr[ii] >= 50)).sum()), int(((gr[ii] < 50) & (sr[ii] < 50)).sum()))
    for ks, n in Counter(knobset(by_ident[ids[i]]) for i in ii).most_common(3):
        print("    ", n, ks)
