"""Gate v2 against gate v1's share of the work on one and the same candidate sequence: the evaluator side of the
search loop, like for like.

The loop A/B (``LOOP_MODES="v2ahead v1ahead" bash scripts/gpu_tests.sh loop``) compares two searches whose
archives drift apart (the gates' timings differ, so the kernels proposed differ: GPU_NOTES R42 had a mean kernel
time 9 % higher under v2 and three kernels of 5.8 s of timed launches each). Here the first ``--n`` candidates of
a recorded run, rebuilt from their stored PTX and launch in the recorded order, go through two evaluators built
as ``python -m evolve experiment=rmsnorm_h200`` builds its own (the run's recorded evaluator options): ``v2`` (the
gate as configured) and ``v1`` (the overrides of the loop step's v1 mode: gate schedule ``v1``, no checked timed
launches, no fault check), ``capacity`` candidates in flight as the engine keeps them. Passes run in the order
v2, v1, v1, v2 (drift of the machine cancels in the mean), each over the whole sequence, after every kernel's
ptxas is cached (ptxas is the same work under both gates and is left out: with it the ratio would be nearer 1).
Elite sanitizer verdicts are not submitted: their share of the timing lock is bounded by ``sanitizer_duty``
(5 %) and shows in the loop's summary (``sanitizer_lock``).

Prints per pass: evaluations, wall seconds, eval/s, statuses, and the mean worker seconds of gate and benchmark
per candidate; then v2 / v1 (the mean of each gate's two passes). Issue criterion: the loop loses at most 15 %.

    python experiments/gate_sequence_ab.py experiments/data/rmsnorm_gate14_map_elites_s4.sqlite.xz --n 300
    python experiments/gate_sequence_ab.py STORE --evaluator static --n 20     # a dry run on a CPU (estimates)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluators.factory import make_evaluator
from evaluators.recorded import open_store
from workloads.registry import build_workload

# The loop step's v1 mode (scripts/gpu_tests.sh, "loop"): gate v1's share of the work.
V1_OPTIONS = {"gate_schedule": "v1", "timed_checks": False, "fault_check": False, "sanitize_elites": False}
ORDER = ("v2", "v1", "v1", "v2")


def run_pass(evaluator: Any, kernels: list[Any]) -> dict[str, Any]:
    """Evaluate ``kernels`` in order with ``evaluator.capacity`` (1 if absent) in flight; wall seconds from the
    first submission to the last result, statuses, mean worker seconds of gate and benchmark (0 where absent)."""
    capacity = max(1, int(getattr(evaluator, "capacity", 1)))
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=capacity) as ex:
        results = list(ex.map(evaluator.evaluate, kernels))
    wall = time.perf_counter() - t0
    secs = [r.extra.get("seconds", {}) for r in results]
    return {"n": len(results), "wall_s": wall, "eval_per_s": len(results) / wall,
            "statuses": dict(Counter(r.status.value for r in results)),
            "gate_s": statistics.fmean(s.get("gate", 0.0) for s in secs),
            "benchmark_s": statistics.fmean(s.get("benchmark", 0.0) for s in secs)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", help="a recorded run store (.sqlite or .sqlite.xz)")
    ap.add_argument("--n", type=int, default=300, help="candidates of the sequence (its first n, recorded order)")
    ap.add_argument("--evaluator", default="gpu", choices=("gpu", "static"),
                    help="gpu: the measurement; static: a dry run of the script on a CPU (estimates, no gate)")
    ap.add_argument("--seed", type=int, default=0, help="the pools' seed (their gate schedule key)")
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error(f"--n must be >= 1, got {args.n}")
    with open_store(args.store) as st:
        rows = st.candidates()[: args.n]
        config = st.get_meta("config") or {}
    if "workload" not in config:
        ap.error(f"{args.store}: no recorded run config (meta 'config' with a workload)")
    wl = build_workload(config["workload"])
    kernels = [r.kernel() for r in rows]
    base = dict((config.get("evaluator") or {}).get("options") or {})
    from evaluators.toolchain import compile_ptx
    from evaluators.types import CompileError

    t0 = time.perf_counter()
    refused = 0
    for k in kernels:  # every pass then finds its cubins cached
        try:
            compile_ptx(k)
        except CompileError:
            refused += 1  # the evaluators reject it the same way in every pass
    print(f"{Path(args.store).name}: {len(kernels)} candidates, ptxas cached in {time.perf_counter() - t0:.0f} s "
          f"({refused} refused); evaluator {args.evaluator}, passes {' '.join(ORDER)}; pid {os.getpid()}")
    passes: list[tuple[str, dict[str, Any]]] = []
    for gate in ORDER:
        opts = {**base, "seed": args.seed, **(V1_OPTIONS if gate == "v1" else {})}
        ev = make_evaluator(args.evaluator, wl, banner=False, **opts)
        try:
            res = run_pass(ev, kernels)
        finally:
            ev.close()
        passes.append((gate, res))
        print(f"  {gate}: {res['n']} in {res['wall_s']:.1f} s, {res['eval_per_s']:.2f} eval/s; gate "
              f"{res['gate_s']:.3f} s, benchmark {res['benchmark_s']:.3f} s a candidate (worker, mean); "
              f"statuses {res['statuses']}", flush=True)
    rate = {g: statistics.fmean(r["eval_per_s"] for gg, r in passes if gg == g) for g in ("v2", "v1")}
    what = ("the budget: at least 0.85" if args.evaluator == "gpu" else
            "DRY RUN: the same static evaluator in every pass, so this ratio is run-to-run noise only")
    print(f"v2 / v1 = {rate['v2'] / rate['v1']:.3f} (v2 {rate['v2']:.2f}, v1 {rate['v1']:.2f} eval/s, each the mean "
          f"of its two passes; {what})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
