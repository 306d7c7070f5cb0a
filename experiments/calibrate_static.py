"""Fit the static cost model's constants to recorded GPU runs and write the shipped calibration.

    python experiments/calibrate_static.py experiments/data/rmsnorm_*.sqlite.xz            # print the fit
    python experiments/calibrate_static.py experiments/data/rmsnorm_*.sqlite.xz --write    # and ship it

Method (``evaluators.calibration``): the constant-free terms of every recorded ok kernel at every search shape
(ptxas resources, occupancy, static traffic); bounded least squares on log time over all (kernel, shape) pairs,
each shape weighted equally, several starting points. ``--write`` stores the constants with their provenance in
``evaluators/static_calibration.json`` (and the recorded kernels' terms in ``experiments/data/terms-*.json.gz``);
the calibration id (``<date>-<n runs>runs-<hash>``) is part of the model
version every static result records. Run ``experiments/static_fidelity.py`` afterwards for held-out fidelity.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluators.calibration import SHIPPED_TERMS, fit_constants, recorded_terms, term_arrays, terms_version
from evaluators.cost_model import CALIBRATION_FILE, MODEL_NAME, CostConstants, predict_time_us
from evaluators.recorded import load_recording
from workloads.registry import get_workload


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stores", nargs="+", help="recorded run stores (.sqlite or .sqlite.xz)")
    ap.add_argument("--workload", default="rmsnorm")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--processes", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", action="store_true", help=f"write {CALIBRATION_FILE}")
    args = ap.parse_args(argv)
    console = Console()
    rec = load_recording(args.stores)
    wl = get_workload(args.workload, dtype=args.dtype)
    terms = recorded_terms(rec.kernels.values(), wl, gpu=args.gpu, processes=args.processes,
                           progress=lambda i, n: console.print(f"  static terms {i}/{n}") if i % 100 == 0 else None)
    arr, meas, sidx, used = term_arrays(list(rec.kernels.values()), terms, rec.shapes)
    prior = CostConstants()
    prior_pred = predict_time_us(arr, prior)
    consts, info = fit_constants(arr, meas, sidx, seed=args.seed)
    pred = predict_time_us(arr, consts)
    t = Table(title=f"static cost model fit on {len(used)} kernels x {len(rec.shapes)} shapes ({', '.join(rec.runs)})")
    for col in ("shape", "median rel. error (priors)", "median rel. error (fitted)", "p90 (fitted)"):
        t.add_column(col, justify="right")
    for j, s in enumerate(rec.shapes):
        sel = sidx == j
        rel0 = np.abs(prior_pred[sel] - meas[sel]) / meas[sel]
        rel = np.abs(pred[sel] - meas[sel]) / meas[sel]
        t.add_row("x".join(map(str, s)), f"{np.median(rel0):.1%}", f"{np.median(rel):.1%}",
                  f"{np.quantile(rel, 0.9):.1%}")
    console.print(t)
    console.print({k: round(v, 4) for k, v in consts.to_json().items()})
    console.print(info)
    if args.write:
        digest = hashlib.sha256(json.dumps(consts.to_json(), sort_keys=True).encode()).hexdigest()[:8]
        cid = f"{time.strftime('%Y%m%d')}-{len(rec.runs)}runs-{digest}"
        body = {"id": cid, "model": MODEL_NAME, "constants": consts.to_json(),
                "info": {**info, "stores": [Path(s).name for s in args.stores], "runs": rec.runs,
                         "kernels": len(used), "shapes": [list(s) for s in rec.shapes], "terms_version": terms_version(),
                         "gpu": args.gpu, "workload": f"{args.workload} {args.dtype}",
                         "method": "scipy.optimize.least_squares (trf) on log time, bounded, shapes weighted equally",
                         "date": time.strftime("%Y-%m-%d")}}
        CALIBRATION_FILE.write_text(json.dumps(body, indent=1) + "\n")
        console.print(f"wrote {CALIBRATION_FILE} ({MODEL_NAME}/{cid})")
        # Ship the terms next to the stores (replacing older ones), so a fresh checkout skips the ptxas pass.
        shipped = SHIPPED_TERMS / f"terms-{args.workload}-{args.gpu}-{terms_version()}.json.gz"
        for old in SHIPPED_TERMS.glob(f"terms-{args.workload}-{args.gpu}-*.json.gz"):
            if old != shipped:
                old.unlink()
        with gzip.open(shipped, "wt", compresslevel=9) as f:
            json.dump(terms, f)
        console.print(f"wrote {shipped}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
