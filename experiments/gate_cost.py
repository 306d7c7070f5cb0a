"""Where one GPU evaluation of an RMSNorm candidate spends its time under gate v2: gate checks, timing, checks.

Runs in one process on the GPU (no worker pool, no baselines): the template seed at its default knobs is
compiled with ptxas, then

1. every check of ``gate_plan`` is timed one by one (``check_shape``: small shapes under
   DISTRIBUTIONS_PER_SHAPE input distributions, four runs each; large ones under one, two runs);
2. the batch of small checks (``check_batch``) with run 4 on every check, on the third the schedule picks
   (``gate_schedule``), and with runs 1-2 only (gate v1's share); the whole ``run_gate`` under the ``full``,
   ``rotating`` (mean over ``--rounds`` consecutive evaluations: the large checks alternate) and ``v1``
   schedules; the fault check (``vmm.fault_check``) in the mappings the worker keeps (``vmm.FaultCheckSets``,
   made beforehand for every shape it draws) and with its mappings made and freed per check; the index check
   (``index_check``, at the workload's first ``index_shapes`` entry: 16385 x 131072) at its first use, which
   makes its mappings, and in the kept mappings (counted at 1 / ``gate_schedule.INDEX_PERIOD`` per candidate);
3. per search shape, with the input sets the worker makes (``timed_checks.set_count`` sets in read-only VMM
   mappings at unmapped pages, a correct answer kept for the "answer" refill): the timing loop (warm-up 3, 20
   repeats, L2 flush + stream hold) plain (one set, no refill), with the per-launch refill and input rotation
   only, and with everything gate v2 adds (refill, rotation, perturbed and checked launches); the kernel median
   of the plain and the full loop (must agree: the work is outside the timed interval); the verification of the
   checked launches (with the workload's fused row check, and through the float64 reference rows); the inputs
   check (``InputSets.mutated``); gate v1's full-output audit; the sets' build time and device memory.

Ends with the per-candidate gate + audit cost against gate v1's (budget 1.5x) and the timing loop's wall time
against gate v2's first version. Prints markdown tables (ms, median of ``--repeats`` runs) and writes them to
$OUT/gate_cost.md when OUT is set. ``measure`` takes the workload, launcher and array module, so a CPU stand-in
for CuPy can dry-run it (tests/test_standin_dryrun.py).

Usage (GPU machine): ``python experiments/gate_cost.py [--repeats 3] [--rounds 6]``
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluators.gpu.benchmark import TimedCall

# Gate v1 per-candidate cost on an H200 (README, measured 2026-11-30): the gate and the one-shape output audit, ms.
V1_GATE_MS, V1_AUDIT_MS = 35.0, 15.0
# Gate v2's first version on an H200 (experiments/results/gate_v2_h200_2026-12-01/gate_cost.md): the timing
# loop's wall time over the four search shapes, plain and with the per-launch refill and rotation, ms.
V2_FIRST_LOOP_MS = (109.7, 362.2)


class Unfused:
    """``workload`` without its fused row check (``Workload.count_bad_rows``): ``verify_checked`` then builds the
    float64 reference rows and compares them (the path of workloads without one), for the "reference rows"
    column."""

    def __init__(self, workload: Any):
        self._workload = workload

    def __getattr__(self, name: str) -> Any:
        return getattr(self._workload, name)

    def count_bad_rows(self, *args: Any, **kwargs: Any) -> bool:
        return False


class HostHooks:
    """Wraps a TimedCall to time its untimed ``prepare``/``after`` on the host: ``seconds`` their sum over the
    timed launches, ``done`` the perf_counter when the last launch's ``after`` returned (everything enqueued);
    ``call`` is the TimedCall to time."""

    def __init__(self, inner: TimedCall):
        self.inner = inner
        self.done = self.seconds = 0.0

    @property
    def call(self) -> TimedCall:
        return TimedCall(self.launch, self.prepare, self.after)

    def launch(self) -> None:
        self.inner.launch()

    def prepare(self, r: int) -> None:
        t = time.perf_counter()
        self.inner.prepare(r)
        self.seconds += (time.perf_counter() - t) if r >= 0 else 0.0

    def after(self, r: int) -> None:
        t = time.perf_counter()
        self.inner.after(r)
        self.done = time.perf_counter()
        self.seconds += self.done - t


def med(v: list[float]) -> float:
    return statistics.median(v) if v else 0.0


def measure(wl: Any, run: Any, cp: Any, repeats: int = 3, rounds: int = 6, bench_shapes: list | None = None,
            gate_shapes: list | None = None, flush: Any = None, one_by_one: bool = True) -> str:
    """Run the measurements of the module docstring for launcher ``run`` (``worker.make_launcher``) on
    workload ``wl`` with array module ``cp``; returns the markdown tables. ``bench_shapes`` default: the
    search shapes; ``gate_shapes``: the workload's; ``flush``: the L2 flusher (None: none)."""
    import numpy as np

    from evaluators.gpu.benchmark import time_interleaved
    from evaluators.gpu.gate import SMALL_CHECK_ELEMENTS, check_batch, check_shape, gate_plan, run_gate
    from evaluators.gpu.gate_schedule import INDEX_PERIOD, GateSchedule, select
    from evaluators.gpu.index_check import IndexCheckSets, index_check
    from evaluators.gpu.timed_checks import InputSets, set_count, timed_call, verify_checked
    from evaluators.gpu.vmm import FaultCheckSets, fault_check, fault_check_shape
    from evaluators.gpu.worker import audit_output
    from workloads.dtypes import storage_dtype

    sync = cp.cuda.get_current_stream().synchronize
    bench_shapes = [tuple(s) for s in (bench_shapes or wl.search_shapes)]

    def timed(store: dict[str, list[float]], name: str, f: Any, *a: Any, **kw: Any) -> Any:
        sync()
        t0 = time.perf_counter()
        r = f(*a, **kw)
        sync()
        store[name].append(1e3 * (time.perf_counter() - t0))
        return r

    def small(shape: tuple) -> bool:
        return int(np.prod(shape)) <= SMALL_CHECK_ELEMENTS

    # Warm CuPy's kernel cache so first-use compilation is not timed.
    plan0 = gate_plan(wl, 0, gate_shapes)
    check_shape(wl, run, plan0[0][0], plan0[0][1], 1, cp)
    lines: list[str] = []
    rows: dict[tuple, list[float]] = {}
    if one_by_one:
        for rep in range(repeats):
            for shape, dist, seed in gate_plan(wl, rep, gate_shapes):
                # Large shapes rotate their distribution per seed: later repeats join the first row of the shape.
                key = (shape, dist) if rep == 0 or (shape, dist) in rows else next(k for k in rows if k[0] == shape)
                st = rows.setdefault(key, [])
                sync()
                t0 = time.perf_counter()
                chk = check_shape(wl, run, shape, dist, seed, cp)
                sync()
                st.append(1e3 * (time.perf_counter() - t0))
                assert chk.failed is None, chk.detail
        lines += ["| gate shape | dist | runs | check_shape ms (one by one) |", "|---|---|---|---|"]
        for (shape, dist), st in rows.items():
            lines.append(f"| {'x'.join(map(str, shape))} | {dist} | {4 if small(shape) else 2} | {med(st):.2f} |")
        lines.append(f"| **sum** | | | **{sum(med(v) for v in rows.values()):.1f}** |")
        lines.append("")

    # The worker keeps the fault check's mappings (vmm.FaultCheckSets): made here once for every shape the fault
    # check draws, so the rows below time what an evaluation pays from the first few on.
    fault_sets = FaultCheckSets()
    index_sets, index_shapes = IndexCheckSets(), [tuple(s) for s in getattr(wl, "index_shapes", ())]
    for s in {fault_check_shape(wl, k): k for k in range(64)}.values():
        fault_check(wl, run, s, fault_sets)
    smalls = [p for p in gate_plan(wl, 0, gate_shapes) if small(p[0])]
    n_large = len(gate_plan(wl, 0, gate_shapes)) - len(smalls)
    g: dict[str, list[float]] = defaultdict(list)
    for shape in index_shapes[:1]:  # the first use maps the chunks (once per worker)
        bad, _ = timed(g, "index check, first use", index_check, wl, run, shape, 5, index_sets)
        assert bad is None, bad
    for rep in range(repeats):
        plan = [(shape, d, s + rep) for shape, d, s in smalls]
        for name, kw in [("batch, run 4 on every check", {}),
                         ("batch, run 4 on the scheduled third",
                          {"stale": select(len(plan), n_large, GateSchedule("rotating", rep, 0)).stale}),
                         ("batch, runs 1-2 (v1 share)", {"stale": (), "finite": False})]:
            r = timed(g, name, check_batch, wl, run, plan, cp, **kw)
            assert all(c.failed is None for c in r), [c.detail for c in r if c.failed]
        for profile in ("full", "v1"):
            res = timed(g, f"run_gate {profile}", run_gate, wl, run, 100 + rep, gate_shapes, cp, GateSchedule(profile))
            assert res.passed, res.reason
        for k in range(rounds):
            res = timed(g, "run_gate rotating", run_gate, wl, run, 100 + rep, gate_shapes, cp,
                        GateSchedule("rotating", k, 0))
            assert res.passed, res.reason
        bad, notes = timed(g, "fault check, mappings made and freed", fault_check, wl, run, 7 + rep)
        assert bad is None, bad
        bad, notes = timed(g, "fault check", fault_check, wl, run, 7 + rep, fault_sets)
        assert bad is None, bad
        for shape in index_shapes[:1]:  # the worker's kept mappings (made by the first use, below)
            bad, _ = timed(g, "index check", index_check, wl, run, shape, 7 + rep, index_sets)
            assert bad is None, bad
    sync()
    fault_sets.close()
    index_sets.close()
    rotating = statistics.mean(g["run_gate rotating"])  # every round weighs the same (large checks alternate)
    lines += ["| gate part | ms |", "|---|---|"]
    lines += [f"| {name} ({len(smalls)} small checks) | {med(v):.1f} |" for name, v in g.items() if name.startswith("batch")]
    lines += [f"| run_gate, full schedule | {med(g['run_gate full']):.1f} |",
              f"| run_gate, rotating schedule (mean of {rounds} consecutive rounds x {repeats}) | {rotating:.1f} |",
              f"| run_gate, v1 schedule (runs 1-2, every large check) | {med(g['run_gate v1']):.1f} |",
              f"| fault check (read-only mappings: {notes.get('read_only')}; the worker's kept mappings) | "
              f"{med(g['fault check']):.1f} |",
              f"| fault check, its mappings made and freed per check (as before they were kept) | "
              f"{med(g['fault check, mappings made and freed']):.1f} |"]
    if g.get("index check"):
        lines += [f"| index check at {'x'.join(map(str, index_shapes[0]))} (kept mappings; one rotating evaluation in "
                  f"{INDEX_PERIOD}) | {med(g['index check']):.1f} |",
                  f"| index check, first use (its mappings made) | {med(g['index check, first use']):.1f} |"]
    lines.append("")

    bench = ["| search shape | sets (MiB) | build ms | plain loop ms | refill + rotation ms | all of v2 ms | of it, draws "
             "ms (host) | enqueued ms (host) | prepare + after ms (host) | kernel µs plain | kernel µs v2 | verify ms | "
             "verify ms, reference rows | inputs check ms | v1 audit ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    checks_ms, hidden, loop_ms = 0.0, 0.0, defaultdict(float)
    for i, shape in enumerate(bench_shapes):
        probe = wl.make_inputs(shape, 0, "normal", cp)
        k = set_count(wl, sum(int(v.nbytes) for v in probe.values()))
        del probe
        t0 = time.perf_counter()
        sets = InputSets.make(wl, shape, [7 + 1000 * i + j for j in range(k)], cp, edge=True)
        sync()
        build = 1e3 * (time.perf_counter() - t0)
        out = {s.name: cp.empty(s.shape, dtype=storage_dtype(s.dtype, cp)) for s in wl.outputs(shape)}
        answer = {s.name: cp.empty(s.shape, dtype=storage_dtype(s.dtype, cp)) for s in wl.outputs(shape)}
        run(sets.sets[0], answer, shape)
        sets.answers = answer
        m: dict[str, list[float]] = defaultdict(list)
        for rep in range(repeats):
            fns = {"c": lambda s0=sets.sets[0], o=out, sh=shape: run.enqueue(s0, o, sh)}
            times = timed(m, "plain", time_interleaved, fns, flush, warmup=3, repeats=20)
            m["kernel plain"].append(med(times["c"]))
            call, _ = timed_call(wl, run.enqueue, sets, out, shape, np.random.default_rng([rep, 0]), 20, checks=0)
            timed(m, "refill", time_interleaved, {"c": call}, flush, warmup=3, repeats=20)
            sync()
            t0 = time.perf_counter()  # the draws before the loop (perturbations on the device) count too
            call, checked = timed_call(wl, run.enqueue, sets, out, shape, np.random.default_rng(rep), 20)
            m["draws"].append(1e3 * (time.perf_counter() - t0))  # host time of the draws (their kernels async)
            hooks = HostHooks(call)
            times = time_interleaved({"c": hooks.call}, flush, warmup=3, repeats=20)
            m["enqueued"].append(1e3 * (hooks.done - t0))  # the last launch's work enqueued: host time to here
            m["hooks"].append(1e3 * hooks.seconds)
            sync()
            m["full"].append(1e3 * (time.perf_counter() - t0))
            m["kernel full"].append(med(times["c"]))
            bad = timed(m, "verify", verify_checked, wl, sets, checked, shape)
            assert bad is None, bad
            bad = timed(m, "verify unfused", verify_checked, Unfused(wl), sets, checked, shape)
            assert bad is None, bad
            assert timed(m, "mutated", sets.mutated) == []
            bad = timed(m, "audit", audit_output, wl, cp, run, sets.sets[0], shape)
            assert bad is None, bad
        checks_ms += med(m["verify"]) + med(m["mutated"])
        hidden += med(m["draws"]) if i else 0.0
        for key in ("plain", "refill", "full"):
            loop_ms[key] += med(m[key])
        bench.append(f"| {'x'.join(map(str, shape))} | {sets.nbytes / 2**20:.0f} ({k} sets, read-only "
                     f"{sets.read_only}) | {build:.0f} | {med(m['plain']):.1f} | {med(m['refill']):.1f} | "
                     f"{med(m['full']):.1f} | {med(m['draws']):.1f} | {med(m['enqueued']):.1f} | "
                     f"{med(m['hooks']):.1f} | {med(m['kernel plain']):.1f} | {med(m['kernel full']):.1f} | "
                     f"{med(m['verify']):.1f} | {med(m['verify unfused']):.1f} | {med(m['mutated']):.1f} | "
                     f"{med(m['audit']):.1f} |")
        sync()
        sets.close()
        del sets, out, answer
        cp.get_default_memory_pool().free_all_blocks()
    fault_ms = med(g["fault check"])
    index_ms = med(g["index check"]) / INDEX_PERIOD if g.get("index check") else 0.0
    total = rotating + fault_ms + index_ms + checks_ms
    v1 = V1_GATE_MS + V1_AUDIT_MS
    bench += ["", f"Per candidate, gate + audit: {rotating:.1f} ms gate (rotating schedule) + {fault_ms:.1f} ms fault "
              f"check + {index_ms:.1f} ms index check (its time / {INDEX_PERIOD}) + {checks_ms:.1f} ms checked "
              f"launches and inputs check at {len(bench_shapes)} shapes = "
              f"**{total:.1f} ms**; gate v1 on an H200 (2026-11-30, README): {V1_GATE_MS:.0f} ms gate + "
              f"{V1_AUDIT_MS:.0f} ms audit = {v1:.0f} ms; ratio **{total / v1:.2f}x** (budget 1.5x).",
              f"Timing loop wall time over the {len(bench_shapes)} shapes: plain {loop_ms['plain']:.1f} ms, with the "
              f"refill and rotation {loop_ms['refill']:.1f} ms, with everything gate v2 adds {loop_ms['full']:.1f} ms "
              f"(gate v2's first version on an H200: {V2_FIRST_LOOP_MS[0]:.0f} plain, {V2_FIRST_LOOP_MS[1]:.0f} with "
              f"the refill and rotation). The worker makes each shape's draws but the first while the GPU runs the "
              f"previous shape's loop (`benchmark.enqueue_interleaved`): {hidden:.1f} ms of the draws column off the "
              f"critical path. Kernel medians plain and under v2 should agree within noise (the work is "
              f"outside the timed interval)."]
    return "\n".join(lines + bench) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=6, help="consecutive evaluations of the rotating schedule")
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    args = ap.parse_args()

    import cupy as cp

    from evaluators.gpu.args import param_types
    from evaluators.gpu.benchmark import L2Flusher
    from evaluators.gpu.worker import make_launcher
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
    body = measure(wl, run, cp, args.repeats, args.rounds, flush=L2Flusher.for_device())

    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    v = versions(("cupy", "numpy"))
    head = (f"# Cost of one GPU evaluation (RMSNorm bf16, template seed at default knobs)\n\n{name}, "
            f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}, "
            + ", ".join(f"{k} {x}" for k, x in v.items())
            + f". ms, median of {args.repeats}; each step between two device synchronisations. ptxas (no "
            f"cache): {ptxas_ms:.0f} ms.\n\n")
    text = head + body
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "gate_cost.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
