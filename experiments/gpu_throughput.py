"""Evaluation throughput on one GPU: fully gated and benchmarked RMSNorm candidates per second.

Each candidate is a distinct template variant (knob sets drawn from the workload's knob space; nvcc runs
before the clock starts, as the template operator's cost is not the evaluator's), evaluated through
GPUPool.evaluate on the search-time shape subset: ptxas compile (no cache hits: every PTX differs), ABI and
static description, the full gate, the benchmark (baselines cached per worker, as during a search) and the
post-benchmark output check. Reported for 1 and 2 calling threads (with 2, one candidate's ptxas overlaps the
other's GPU time). Target: >= 3 candidates/s.

Usage (GPU machine): ``python experiments/gpu_throughput.py [--candidates 24]``; writes
experiments/results/gpu_throughput.md and $OUT/gpu_throughput.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluators.types import Status
from workloads.rmsnorm import RMSNorm


def candidates(wl: RMSNorm, n: int, seed: int) -> list:
    """``n`` distinct valid template variants (Kernels), random order from ``seed``."""
    combos = []
    for vals in itertools.product(*wl.knob_space.values()):
        k = dict(zip(wl.knob_space, vals))
        try:
            wl.check_knobs(k)
        except ValueError:
            continue
        combos.append(k)
    random.Random(seed).shuffle(combos)
    with ThreadPoolExecutor(os.cpu_count() or 4) as ex:  # nvcc runs are independent processes
        return list(ex.map(wl.instantiate, combos[:n]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    args = ap.parse_args()

    from evaluators.gpu.pool import GPUPool
    from evaluators.toolchain import clear_cache

    wl = RMSNorm("bf16")
    t0 = time.perf_counter()
    kernels = candidates(wl, 2 * args.candidates, args.seed)
    print(f"instantiated {len(kernels)} variants in {time.perf_counter() - t0:.1f} s (nvcc, not timed below)")
    rows = []
    # Baselines are timed once per worker and then cached, as in a search: torch eager is enough here, and
    # leaving torch.compile out saves its per-shape compilation at pool start-up (not a per-candidate cost).
    with GPUPool(wl, shapes="search", baselines="cached", baseline_names=("torch",), seed=1) as pool:
        pool.evaluate(wl.seeds()[1])  # baselines for the search shapes are timed once, as in a search
        for threads, batch in ((1, kernels[: args.candidates]), (2, kernels[args.candidates:])):
            clear_cache()
            t = time.perf_counter()
            with ThreadPoolExecutor(threads) as ex:
                results = list(ex.map(pool.evaluate, batch))
            wall = time.perf_counter() - t
            ok = sum(r.status == Status.OK for r in results)
            gate_s = sum(r.extra.get("seconds", {}).get("gate", 0) for r in results) / len(results)
            bench_s = sum(r.extra.get("seconds", {}).get("benchmark", 0) for r in results) / len(results)
            comp_s = sum(r.extra.get("compile_seconds", 0) for r in results) / len(results)
            audit_s = sum(r.extra.get("seconds", {}).get("audit", 0) for r in results) / len(results)
            rows.append((threads, len(batch), ok, wall, len(batch) / wall, comp_s, gate_s, bench_s, audit_s))
            fails = {r.status.value for r in results if r.status != Status.OK}
            print(f"threads={threads}: {len(batch) / wall:.2f} candidates/s ({ok}/{len(batch)} ok; other: {fails})",
                  flush=True)
            for k, r in zip(batch, results):
                if r.status != Status.OK:
                    print(f"  {r.status.value}: knobs {dict(k.launch.knobs)}: {r.reason[:600]}", flush=True)
        device = pool.info[0].get("device", "?")
    md = [f"# GPU evaluation throughput (RMSNorm bf16, search shapes {wl.search_shapes})", "",
          f"{device}, {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}. Candidates: distinct template "
          "variants; per candidate: ptxas, gate (all gate shapes), benchmark (20 repeats, L2 flush, cached "
          "baselines), output re-check. Target >= 3 candidates/s.", "",
          "| caller threads | candidates | ok | wall s | candidates/s | ptxas s | gate s | benchmark s (audit incl.) "
          "| audit s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in r) + " |")
    text = "\n".join(md) + "\n"
    print(text)
    for folder in filter(None, [Path(__file__).resolve().parent / "results", args.out]):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "gpu_throughput.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
