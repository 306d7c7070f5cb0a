"""Where one GPU evaluation of an RMSNorm candidate spends its time: gate steps, timing, output audit.

Runs in one process on the GPU (no worker pool, no baselines): the template seed at its default knobs is
compiled with ptxas and then, for every check of ``gate_plan`` (small shapes under every input distribution,
full-size ones under one), the steps of ``evaluators.gpu.gate.check_shape`` (the one-by-one path) are timed
with a device synchronisation around each (input generation, the input snapshot, the float64 reference,
poisoning, the launch, the guard/unchanged
checks, the comparison, the determinism check), next to the wall time of ``check_shape`` itself. Then, per
search shape, the wall time of the benchmark's timing loop for the candidate alone (warm-up 3, 20 repeats,
L2 flush + stream hold) and of the post-benchmark output audit (``audit_output``). Prints markdown tables
(ms, median of ``--repeats`` runs), then the batched path the gate uses for small checks
(``check_batch``) and the whole ``run_gate`` and writes them to $OUT/gate_cost.md when OUT is set.

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    args = ap.parse_args()

    import cupy as cp

    from evaluators.gpu.args import param_types
    from evaluators.gpu.benchmark import L2Flusher, time_interleaved
    from evaluators.gpu.gate import (
        SMALL_CHECK_ELEMENTS,
        allocate_poisoned,
        bitwise_equal,
        changed_inputs,
        check_batch,
        check_shape,
        compare,
        gate_plan,
        run_gate,
    )
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
    atol, rtol = wl.tolerance

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

    rows: dict[tuple, dict[str, list[float]]] = {}
    for rep in range(args.repeats):
        for shape, dist, seed in gate_plan(wl, rep):
            # Large shapes rotate their distribution per seed: later repeats join the first row of the shape.
            key = (shape, dist) if rep == 0 or (shape, dist) in rows else next(k for k in rows if k[0] == shape)
            st = rows.setdefault(key, defaultdict(list))
            timed(st, "check_shape", check_shape, wl, run, shape, dist, seed, cp)
            inputs = timed(st, "inputs", wl.make_inputs, shape, seed, dist, cp)
            before = timed(st, "snapshot", lambda i=inputs: {k: v.copy() for k, v in i.items()})
            ref = timed(st, "reference", wl.reference, inputs, cp)
            spec = wl.outputs(shape)[0]
            outs = []
            for pattern in (0, 1):
                buf = timed(st, "poison", allocate_poisoned, spec, pattern, cp)
                timed(st, "launch", run, inputs, {"y": buf.view}, shape)
                timed(st, "guards", buf.guards_intact, cp)
                timed(st, "unchanged", changed_inputs, before, inputs, cp)
                outs.append(buf)
            timed(st, "compare", compare, outs[0].view, ref["y"], spec.dtype, atol, rtol, cp, 0)
            timed(st, "determinism", bitwise_equal, outs[0].view, outs[1].view, cp)
    cols = ["check_shape", "inputs", "snapshot", "reference", "poison", "launch", "guards", "unchanged", "compare",
            "determinism"]

    def med(v: list[float]) -> float:
        return statistics.median(v) if v else 0.0

    # poison/launch/guards/unchanged run twice per check: report their sum per check.
    def per_check(st: dict[str, list[float]], c: str) -> float:
        twice = c in ("poison", "launch", "guards", "unchanged")
        v = st[c]
        if twice:
            v = [a + b for a, b in zip(v[::2], v[1::2])]
        return med(v)

    lines = ["| gate shape | dist | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    total = dict.fromkeys(cols, 0.0)
    for (shape, dist), st in rows.items():
        vals = [per_check(st, c) for c in cols]
        for c, v in zip(cols, vals):
            total[c] += v
        lines.append(f"| {shape[0]}x{shape[1]} | {dist} | " + " | ".join(f"{v:.2f}" for v in vals) + " |")
    lines.append("| **one gate (all checks)** | | " + " | ".join(f"**{total[c]:.1f}**" for c in cols) + " |")

    small = [p for p in gate_plan(wl, 0) if p[0][0] * p[0][1] <= SMALL_CHECK_ELEMENTS]
    gates: dict[str, list[float]] = defaultdict(list)
    for rep in range(args.repeats):
        plan = [(shape, d, s + rep) for shape, d, s in small]
        r = timed(gates, "batch", check_batch, wl, run, plan, cp)
        assert all(c.failed is None for c in r), [c.detail for c in r if c.failed]
        g = timed(gates, "gate", run_gate, wl, run, 100 + rep, None, cp)
        assert g.passed, g.reason
    lines.append("")
    lines.append(f"Batched: the {len(small)} small checks in one `check_batch`: {med(gates['batch']):.1f} ms; "
                 f"the whole `run_gate` (batch + the large check(s) one by one): {med(gates['gate']):.1f} ms.")

    flush = L2Flusher.for_device()
    bench = ["| search shape | timing loop ms (candidate only, 3 + 20 launches) | kernel µs (median) | audit ms |",
             "|---|---|---|---|"]
    for shape in wl.search_shapes:
        inputs = wl.make_inputs(shape, 7, "normal", cp)
        out = cp.empty(shape, dtype=cp.uint16)
        loop, audit, kern = [], [], []
        for _ in range(args.repeats):
            sync()
            t0 = time.perf_counter()
            fns = {"c": lambda i=inputs, o=out, s=shape: run.enqueue(i, {"y": o}, s)}
            times = time_interleaved(fns, flush, warmup=3, repeats=20)
            loop.append(1e3 * (time.perf_counter() - t0))
            kern.append(statistics.median(times["c"]))
            sync()
            t0 = time.perf_counter()
            bad = audit_output(wl, cp, run, inputs, shape)
            sync()
            audit.append(1e3 * (time.perf_counter() - t0))
            assert bad is None, bad
        bench.append(f"| {shape[0]}x{shape[1]} | {med(loop):.1f} | {med(kern):.1f} | {med(audit):.1f} |")
        cp.get_default_memory_pool().free_all_blocks()

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
