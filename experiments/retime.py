"""The noise ceiling: re-time recorded candidates on the GPU and measure how well the GPU agrees with itself.

    python experiments/retime.py experiments/data/rmsnorm_map_elites_s0.sqlite.xz --n 200 --out retime.json
    python experiments/retime.py STORE --n 20 --evaluator static        # dry run on a CPU (estimates)

Picks N ok candidates of the store: its ``--top`` best by recorded objective plus N - top others drawn with
``--seed``; evaluates each again through the normal evaluator (``evaluators.factory.make_evaluator``: the GPU
pool with its gate and benchmark, ``--capacity`` evaluations in flight, only the ``--baselines`` timed besides the
candidates), in a shuffled order, and compares the
new per-shape µs with the recorded ones: Spearman and Kendall of the geomean score over all N and within the
recorded top 50, top-50 overlap, per shape Spearman and the median relative difference. A CPU model's rank
agreement cannot be asked to exceed these numbers (issue: targets are met at the ceiling).

With ``--evaluator static`` the same pipeline runs on a CPU: the "re-timed" numbers are then static estimates,
so the table shows the static model against the record (a dry run of the script, not a noise measurement).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluators.factory import make_evaluator
from evaluators.fidelity import median_relative_error, rank_metrics
from evaluators.holdout import scores
from evaluators.recorded import load_recording
from workloads.registry import get_workload


def pick(measured: list, n: int, top: int, seed: int) -> list:
    """The ``top`` best by recorded objective, then ``n - top`` others at random (seeded), best first."""
    ranked = sorted(measured, key=lambda m: -float(m.objective))
    head, rest = ranked[:min(top, n)], ranked[min(top, n):]
    rng = np.random.default_rng(seed)
    k = max(0, min(n - len(head), len(rest)))
    extra = [rest[i] for i in sorted(rng.choice(len(rest), size=k, replace=False))] if k else []
    return head + extra


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", help="a recorded run store (.sqlite or .sqlite.xz)")
    ap.add_argument("--n", type=int, default=200, help="candidates to re-time (default 200)")
    ap.add_argument("--top", type=int, default=50, help="the recorded best always included (default 50)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--evaluator", default="gpu", choices=("gpu", "static"),
                    help="gpu (the measurement) or static (a CPU dry run)")
    ap.add_argument("--capacity", type=int, default=None, help="evaluations in flight (default the evaluator's)")
    ap.add_argument("--baselines", default="torch",
                    help="comma-separated baselines the GPU pool times (default torch: the recorded runs' objective "
                         "baseline; each more library costs start-up time, torch.compile tens of seconds)")
    ap.add_argument("--workload", default="rmsnorm")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--out", default=None, help="write the per-candidate times and metrics as JSON")
    args = ap.parse_args(argv)
    console = Console(width=max(Console().width, 160))
    t0 = time.perf_counter()
    rec = load_recording([args.store])
    chosen = pick(list(rec.kernels.values()), args.n, args.top, args.seed)
    if len(chosen) < 3:
        ap.error(f"{args.store}: only {len(chosen)} ok candidates")
    wl = get_workload(args.workload, dtype=args.dtype)
    names = [b for b in args.baselines.split(",") if b]
    ev = make_evaluator(args.evaluator, wl, banner=False, baseline_names=names, objective=names[0])
    t1 = time.perf_counter()
    order = np.random.default_rng(args.seed + 1).permutation(len(chosen))  # no drift aligned with rank
    kernels = [chosen[i].kernel() for i in order]
    try:
        with ThreadPoolExecutor(args.capacity or int(getattr(ev, "capacity", 1))) as pool:
            results = list(pool.map(ev.evaluate, kernels))
    finally:
        ev.close()
    t2 = time.perf_counter()
    back = [None] * len(chosen)
    for i, r in zip(order, results):
        back[i] = r
    ok = [i for i, r in enumerate(back) if r.ok and r.shapes]
    failed = {str(back[i].status): 0 for i in range(len(chosen)) if i not in ok}
    for i in range(len(chosen)):
        if i not in ok:
            failed[str(back[i].status)] += 1
    shapes = rec.shapes
    old = np.array([[chosen[i].times_us[s] for s in shapes] for i in ok])
    new = np.array([[{tuple(x.shape): x.time_us for x in back[i].shapes}[s] for s in shapes] for i in ok])
    ref = np.array(list(rec.reference_times().values()))
    m = rank_metrics(scores(old, ref), scores(new, ref), top=args.top)
    from scipy.stats import spearmanr

    per_shape = {"x".join(map(str, s)): {"spearman": float(spearmanr(old[:, j], new[:, j]).statistic),
                                         "median_rel_diff": median_relative_error(old[:, j], new[:, j])}
                 for j, s in enumerate(shapes)}
    kind = "GPU self-agreement (noise ceiling)" if args.evaluator == "gpu" else "DRY RUN: static estimates vs record"
    t = Table(title=f"{kind}: {len(ok)} of {len(chosen)} candidates of {Path(args.store).name} re-evaluated")
    for col in ("n", "Spearman", f"Spearman top{args.top}", "Kendall", f"Kendall top{args.top}",
                f"overlap top{args.top}", "overlap top10", "per shape: Spearman / median rel. diff"):
        t.add_column(col, justify="right")
    t.add_row(str(len(ok)), f"{m['spearman']:.3f}", f"{m['spearman_top']:.3f}", f"{m['kendall']:.3f}",
              f"{m['kendall_top']:.3f}", str(int(m["overlap_top"])), str(int(m["overlap_top10"])),
              "  ".join(f"{k}: {v['spearman']:.3f}/{100 * v['median_rel_diff']:.2f}%" for k, v in per_shape.items()))
    console.print(t)
    if failed:
        console.print(f"not ok on re-evaluation: {failed}")
    console.print(f"setup {t1 - t0:.0f} s, evaluation {t2 - t1:.0f} s ({len(chosen) / max(t2 - t1, 1e-9):.2f}/s), "
                  f"total {t2 - t0:.0f} s")
    if args.out:
        Path(args.out).write_text(json.dumps({
            "store": Path(args.store).name, "evaluator": args.evaluator, "n": len(chosen), "ok": len(ok),
            "metrics": m, "per_shape": per_shape, "failed": failed, "seconds": t2 - t0,
            "device": getattr(ev, "info", None) and str(ev.info[0])[:500],
            "candidates": [{"identity": chosen[i].identity, "recorded_us": old[k].tolist(), "retimed_us": new[k].tolist()}
                           for k, i in enumerate(ok)]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
