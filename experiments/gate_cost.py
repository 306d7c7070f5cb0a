"""Where one GPU evaluation of an RMSNorm candidate spends its time under gate v2: gate checks, timing, checks.

Runs in one process on the GPU (no worker pool, no baselines): the template seed at its default knobs is
compiled with ptxas and then every check of ``gate_plan`` (small shapes under DISTRIBUTIONS_PER_SHAPE input
distributions, four runs each; full-size ones under one, two runs) is timed one by one (``check_shape``), then the batched path the
gate uses for small checks (``check_batch``) and the whole ``run_gate``. Per search shape: the timing loop
(warm-up 3, 20 repeats, L2 flush + stream hold) plain and with gate v2's per-launch refill and input rotation
(``timed_checks.timed_call``), the kernel median of both (must agree: the refill is outside the timed
interval), the verification of the checked timed launches, the input fingerprints, and gate v1's full-output
audit for comparison. Ends with the per-candidate gate + audit cost against gate v1's (budget 1.5x). Prints
markdown tables (ms, median of ``--repeats`` runs) and writes them to $OUT/gate_cost.md when OUT is set.

Usage (GPU machine): ``python experiments/gate_cost.py [--repeats 3]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Gate v1 per-candidate cost on an H200 (README, measured 2026-11-30): the gate and the one-shape output audit, ms.
V1_GATE_MS, V1_AUDIT_MS = 35.0, 15.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    args = ap.parse_args()

    import cupy as cp
    import numpy as np

    from evaluators.gpu.args import param_types
    from evaluators.gpu.benchmark import L2Flusher, time_interleaved
    from evaluators.gpu.gate import SMALL_CHECK_ELEMENTS, check_batch, check_shape, gate_plan, run_gate
    from evaluators.gpu.timed_checks import InputSets, timed_call, verify_checked
    from evaluators.gpu.worker import audit_output, make_launcher
    from evaluators.provenance import versions
    from evaluators.toolchain import compile_ptx
    from workloads.rmsnorm import RMSNorm

    wl = RMSNorm("bf16")
    kernel = wl.seeds()[1]
    t = time.perf_counter()
    compiled = compile_ptx(kernel, "sm_90", cache_dir=None)
    ptxas_ms = 1e3 * (time.perf_counter() - t)
    mod = cp.cuda.Module()
    mod.load(compiled.cubin)
    fn = mod.get_function(kernel.entry)
    run = make_launcher(wl, cp, fn, param_types(kernel), kernel.launch.to_json())
    sync = cp.cuda.get_current_stream().synchronize

    def timed(store: dict[str, list[float]], name: str, f, *a, **kw):
        sync()
        t0 = time.perf_counter()
        r = f(*a, **kw)
        sync()
        store[name].append(1e3 * (time.perf_counter() - t0))
        return r

    # Warm CuPy's kernel cache so first-use compilation is not timed.
    run_plan = gate_plan(wl, 0)
    check_shape(wl, run, run_plan[0][0], run_plan[0][1], 1, cp)

    rows: dict[tuple, list[float]] = {}
    for rep in range(args.repeats):
        for shape, dist, seed in gate_plan(wl, rep):
            # Large shapes rotate their distribution per seed: later repeats join the first row of the shape.
            key = (shape, dist) if rep == 0 or (shape, dist) in rows else next(k for k in rows if k[0] == shape)
            st = rows.setdefault(key, [])
            sync()
            t0 = time.perf_counter()
            chk = check_shape(wl, run, shape, dist, seed, cp)
            sync()
            st.append(1e3 * (time.perf_counter() - t0))
            assert chk.failed is None, chk.detail

    def med(v: list[float]) -> float:
        return statistics.median(v) if v else 0.0

    lines = ["| gate shape | dist | runs | check_shape ms (one by one) |", "|---|---|---|---|"]
    for (shape, dist), st in rows.items():
        runs = 4 if shape[0] * shape[1] <= SMALL_CHECK_ELEMENTS else 2
        lines.append(f"| {shape[0]}x{shape[1]} | {dist} | {runs} | {med(st):.2f} |")
    lines.append(f"| **sum** | | | **{sum(med(v) for v in rows.values()):.1f}** |")

    small = [p for p in gate_plan(wl, 0) if p[0][0] * p[0][1] <= SMALL_CHECK_ELEMENTS]
    gates: dict[str, list[float]] = defaultdict(list)
    for rep in range(args.repeats):
        plan = [(shape, d, s + rep) for shape, d, s in small]
        r = timed(gates, "batch", check_batch, wl, run, plan, cp)
        assert all(c.failed is None for c in r), [c.detail for c in r if c.failed]
        g = timed(gates, "gate", run_gate, wl, run, 100 + rep, None, cp)
        assert g.passed, g.reason
    lines.append("")
    lines.append(f"Batched: the {len(small)} small checks (4 runs each) in one `check_batch`: "
                 f"{med(gates['batch']):.1f} ms; the whole `run_gate` (batch + the large check(s) one by one, "
                 f"2 runs): {med(gates['gate']):.1f} ms.")

    flush = L2Flusher.for_device()
    bench = ["| search shape | plain timing loop ms | loop with refill + rotation ms | kernel µs plain | kernel µs "
             "refilled | checked-launch verification ms | input fingerprints ms | v1 audit ms (full output) |",
             "|---|---|---|---|---|---|---|---|"]
    per_candidate_checks = 0.0
    for i, shape in enumerate(wl.search_shapes):
        sets = InputSets.make(wl, shape, [7 + 1000 * i + k for k in range(2)], cp)
        out = {"y": cp.empty(shape, dtype=cp.uint16)}
        plain, loop, kern0, kern1, verify, prints, audit = [], [], [], [], [], [], []
        for rep in range(args.repeats):
            sync()
            t0 = time.perf_counter()
            fns = {"c": lambda i=sets.sets[0], o=out, s=shape: run.enqueue(i, o, s)}
            times = time_interleaved(fns, flush, warmup=3, repeats=20)
            plain.append(1e3 * (time.perf_counter() - t0))
            kern0.append(statistics.median(times["c"]))
            call, checked = timed_call(wl, run.enqueue, sets, out, shape, np.random.default_rng(rep), 20)
            sync()
            t0 = time.perf_counter()
            times = time_interleaved({"c": call}, flush, warmup=3, repeats=20)
            loop.append(1e3 * (time.perf_counter() - t0))
            kern1.append(statistics.median(times["c"]))
            sync()
            t0 = time.perf_counter()
            bad = verify_checked(wl, sets, checked, shape)
            sync()
            verify.append(1e3 * (time.perf_counter() - t0))
            assert bad is None, bad
            t0 = time.perf_counter()
            assert sets.mutated() == []
            prints.append(1e3 * (time.perf_counter() - t0))
            sync()
            t0 = time.perf_counter()
            bad = audit_output(wl, cp, run, sets.sets[0], shape)
            sync()
            audit.append(1e3 * (time.perf_counter() - t0))
            assert bad is None, bad
        per_candidate_checks += med(verify) + med(prints)
        bench.append(f"| {shape[0]}x{shape[1]} | {med(plain):.1f} | {med(loop):.1f} | {med(kern0):.1f} | "
                     f"{med(kern1):.1f} | {med(verify):.1f} | {med(prints):.1f} | {med(audit):.1f} |")
        del sets, out
        cp.get_default_memory_pool().free_all_blocks()
    gate_ms = med(gates["gate"])
    total = gate_ms + per_candidate_checks
    bench.append("")
    bench.append(f"Per candidate, gate + audit: {gate_ms:.1f} ms gate + {per_candidate_checks:.1f} ms checked launches "
                 f"and fingerprints at {len(wl.search_shapes)} shapes = **{total:.1f} ms**; gate v1 on an H200 "
                 f"(2026-11-30, README): {V1_GATE_MS:.0f} ms gate + {V1_AUDIT_MS:.0f} ms audit = "
                 f"{V1_GATE_MS + V1_AUDIT_MS:.0f} ms; ratio **{total / (V1_GATE_MS + V1_AUDIT_MS):.2f}x** "
                 f"(budget 1.5x). The refill adds to the timing loop's wall time (columns 2-3), not to the kernel "
                 f"time (columns 4-5 should agree within noise).")

    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    v = versions(("cupy", "numpy"))
    head = (f"# Cost of one GPU evaluation (RMSNorm bf16, template seed at default knobs)\n\n{name}, "
            f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}, "
            + ", ".join(f"{k} {x}" for k, x in v.items())
            + f". ms, median of {args.repeats}; each step between two device synchronisations. ptxas (no "
            f"cache): {ptxas_ms:.0f} ms.\n\n")
    text = head + "\n".join(lines) + "\n\n" + "\n".join(bench) + "\n"
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "gate_cost.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
