"""The GPU worker: one long-lived process per GPU that loads cubins, gates and benchmarks them.

The supervisor starts it with the ``spawn`` context; the worker first makes itself a process-group leader
(``os.setpgrp``) so a deadline can kill it and anything it started in one ``killpg``, pins
``CUDA_VISIBLE_DEVICES`` before CUDA is initialised, measures the copy roofline once, and then answers
requests on its pipe. A CUDA error raised while synchronising a candidate (illegal address, trap, misaligned
access...) leaves the context unusable (errors are sticky): the worker answers ``crash`` and exits, and the
supervisor starts a fresh one. Cubins are loaded from bytes with ``cupy.cuda.Module().load`` (never from a
path, which CuPy caches, and never PTX text, which the driver would JIT).

Request (dict): ``op`` "evaluate"; ``cubin`` bytes; ``entry``; ``param_types`` (the entry's ``.param``
types); ``launch`` (LaunchConfig.to_json()); ``gate`` bool; ``gate_seed`` int; ``gate_shapes`` list or None
(workload's); ``bench_shapes`` list (empty: no benchmark); ``warmup``, ``repeats``; ``baselines``:
"cached" (reuse per-shape baseline medians measured once in this worker), "interleaved" (time them again,
round-robin with the candidate) or "none"; ``check_output``: "one" (default: at every benchmarked shape, one
timed launch drawn at random is checked at a random sample of rows, ``timed_checks``), "all" (that, plus a
full-output audit launch at every shape) or "none". Every timed launch, checked or not, gets its outputs
refilled and its input set drawn (``timed_checks``); after the candidate the inputs' fingerprints are compared
(status ``input_mutated``, inputs restored).
``gate_schedule``: ``gate_schedule.GateSchedule.to_json()`` (which runs of which gate checks run at this
evaluation; absent: all of them). After the gate passes, the fault check (``vmm.fault_check``, request key ``fault_check``, default on) runs one
small check with the inputs ending at an unmapped page, mapped read-only where the driver allows; then, for a
workload with ``index_shapes`` and when the schedule selects it, the index check (``index_check``, request key
``index_check``, default on): one launch past 2^31 elements.
Reply (dict): ``status`` (Status value), ``reason``, ``shapes`` (list of ShapeResult fields), ``copy_gbps``,
``gate_checks``, ``seconds`` {gate, benchmark (the checks included), audit}, ``notes``, ``gate_version``.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import time
import traceback
from collections import OrderedDict
from dataclasses import asdict
from typing import Any

from evaluators.types import ShapeResult, Status

# CUDA errors after which the context cannot be used again (cuda.h: 700 illegal address, 714 hardware stack
# error, 715 illegal instruction, 716 misaligned address, 717 invalid address space, 718 invalid pc, 719 launch
# failed (trap), 999 unknown), by code and by name as the driver (CUDA_ERROR_ILLEGAL_ADDRESS) and the runtime
# (cudaErrorIllegalAddress, what CuPy's CUDARuntimeError says) spell them: compared without underscores.
STICKY_ERRORS = {"700", "714", "715", "716", "717", "718", "719", "999", "ILLEGALADDRESS", "LAUNCHFAILED",
                 "LAUNCHFAILURE", "MISALIGNEDADDRESS", "ILLEGALINSTRUCTION", "HARDWARESTACKERROR", "INVALIDPC",
                 "INVALIDADDRESSSPACE", "ERRORUNKNOWN", "ILLEGAL MEMORY ACCESS"}


def benchmark_seed(config: dict[str, Any]) -> int:
    """The base seed of this worker's benchmark input sets (set i of a shape's b-th build: seed + 1000 b + i):
    ``config["bench_seed"]`` when given (tests, reproductions), else drawn from the OS per worker. A constant
    of the source made every benchmark input predictable: a kernel could regenerate an input from the seed
    instead of reading it (red-team round 10, ``SeedReplay``: KDA's initial state, 1.98x fewer bytes at
    decode)."""
    given = config.get("bench_seed")
    return int(given) if given is not None else secrets.randbits(31)


# Settings of an evaluate request that the caller may leave out: the same values GPUPool uses by default, so a
# request and a pool without them behave alike ("one": checked timed launches at every shape).
REQUEST_DEFAULTS: dict[str, Any] = {"gate": True, "baselines": "cached", "check_output": "one", "warmup": 3,
                                    "repeats": 20}
# Float64 reference blocks for the post-benchmark output check (elements).
CHECK_BLOCK_ELEMENTS = 1 << 26
# Benchmark input sets per shape: timed_checks.set_count; shapes' sets are dropped least recently used first past
# BENCH_BYTES_BUDGET bytes (an H200 has 141 GB).
BENCH_BYTES_BUDGET = 48 << 30


class KernelFault(Exception):
    """A candidate failed on the device; ``status`` says how, ``fatal`` whether the context is gone."""

    def __init__(self, status: Status, message: str, fatal: bool):
        super().__init__(message)
        self.status, self.fatal = status, fatal


def _mentions(text: str, codes: Any) -> bool:
    """Whether ``text`` names one of ``codes`` (compared upper-case without underscores): a name anywhere, a
    numeric code only as a whole number right after "error", "code", "CUresult" or "status" ("CUDA error 700"),
    so the 716 of "shape (4096, 7168)" or the 700 of a grid (700, 1, 1) in a KernelFault's message is not one."""
    t = text.upper().replace("_", "")
    return any(re.search(rf"(?:ERROR|CODE|CURESULT|STATUS)\W{{0,3}}{c}(?![0-9])", t) if c.isdigit() else c in t
               for c in codes)


def _is_sticky(err: BaseException) -> bool:
    return _mentions(str(err), STICKY_ERRORS)


# CUDA errors a read past a buffer ending at an unmapped page, or a store into a read-only mapping, raises
# (compared as STICKY_ERRORS are).
ADDRESS_FAULTS = ("700", "ILLEGALADDRESS", "ILLEGAL MEMORY ACCESS")


def edge_fault(f: KernelFault, where: str, always: bool = False) -> KernelFault:
    """``f`` as the verdict on a kernel that faulted at ``where`` with its inputs ending at unmapped pages,
    mapped read-only (the fault check, the timed launches): WRONG_RESULT, fatal as ``f`` (a sticky fault: the
    worker answers and restarts, one restart counted by the supervisor). Only address faults are converted
    unless ``always`` (the fault check judges any fault); others are returned unchanged."""
    if not always and not _mentions(str(f), ADDRESS_FAULTS):
        return f
    return KernelFault(Status.WRONG_RESULT, f"{where}: the kernel faulted with its inputs ending at an unmapped "
                       f"page, mapped read-only (a read past an input or a store into one; the worker restarts): "
                       f"{f}", fatal=f.fatal)


def make_launcher(workload: Any, cp: Any, fn: Any, types: list[str], launch_json: dict[str, Any]):
    """A gate launcher ``run(inputs, outputs, shape, params)`` that runs the workload's operation with the CuPy
    Function ``fn`` as its kernel (``Workload.plan``: a one-kernel workload launches ``fn`` on the operation's
    buffers; a pipeline runs its reference stages before and after it) with the workload's launch rule and
    synchronises, raising KernelFault (LAUNCH_ERROR when the launch is refused, CRASH when the kernel faults).
    ``run.enqueue`` does the same without synchronising, ``run.sync(where)`` synchronises, raising KernelFault
    (CRASH, fatal) naming ``where`` (the gate batch enqueues a stage's launches and synchronises once);
    ``run.plan(inputs, outputs, shape, params)`` gives the
    StagePlan and ``run.kernel(buffers, shape, params)`` enqueues ``fn`` alone on a plan's buffers (the
    benchmark times that, with the plan's stages outside the timed interval)."""
    from evaluators.gpu.args import build_args, launch_function
    from population.kernel import LaunchConfig

    launch = LaunchConfig.from_json(launch_json)
    wl = workload

    def kernel(buffers: dict[str, Any], shape: tuple[int, ...], params: dict[str, float] | None = None) -> None:
        grid, block, smem = wl.launch_dims(shape, launch)
        scalars = wl.scalars(shape, params) if params else wl.scalars(shape)
        args = build_args(wl.abi, types, buffers, scalars, wl.entry)
        try:
            launch_function(fn, grid, block, args, smem)
        except Exception as e:
            raise KernelFault(Status.LAUNCH_ERROR, f"launch {grid}x{block} smem {smem} at shape {shape} "
                              f"refused: {e}", fatal=_is_sticky(e)) from None

    def plan(inputs: dict[str, Any], outputs: dict[str, Any], shape: tuple[int, ...],
             params: dict[str, float] | None = None) -> Any:
        return wl.plan(inputs, outputs, shape, params, cp)

    def enqueue(inputs: dict[str, Any], outputs: dict[str, Any], shape: tuple[int, ...],
                params: dict[str, float] | None = None) -> None:
        p = plan(inputs, outputs, shape, params)
        p.run_before()
        kernel(p.buffers, shape, params)
        p.run_after()

    def run(inputs: dict[str, Any], outputs: dict[str, Any], shape: tuple[int, ...],
            params: dict[str, float] | None = None) -> None:
        enqueue(inputs, outputs, shape, params)
        try:
            cp.cuda.get_current_stream().synchronize()
        except Exception as e:
            raise KernelFault(Status.CRASH, f"kernel faulted at shape {shape}: {e}", fatal=True) from None

    def sync(where: str = "") -> None:
        try:
            cp.cuda.get_current_stream().synchronize()
        except Exception as e:
            raise KernelFault(Status.CRASH, f"kernel faulted {where}: {e}", fatal=True) from None

    run.enqueue = enqueue  # type: ignore[attr-defined]
    run.sync = sync  # type: ignore[attr-defined]
    run.plan = plan  # type: ignore[attr-defined]
    run.kernel = kernel  # type: ignore[attr-defined]
    return run


def audit_output(workload: Any, cp: Any, run: Any, inputs: dict[str, Any], shape: tuple[int, ...]) -> str | None:
    """Poison the outputs, ``run`` once more on ``inputs`` and compare with the float64 reference, block by
    block (CHECK_BLOCK_ELEMENTS): catches a kernel that stops working after the gate (counters in global
    memory, pointer caches). Returns None when right, else the reason (str; counts are of the first wrong
    block). Inout buffers (a recurrent state) are read at the value they had before this launch, which is what
    the reference starts from, and their final value is compared whole with ``reference_rows``' (an unchecked
    final state was a hole: a kernel could skip writing it at the benchmark shapes). KernelFault from ``run``
    propagates (the caller owns the process)."""
    from evaluators.gpu.gate import _inout_specs, allocate_poisoned, compare, within_tolerance

    wl = workload
    bufs = {s.name: allocate_poisoned(s, 1, cp) for s in wl.outputs(shape)}
    ref_inputs = {**inputs, **{n: inputs[n].copy() for n in wl.buffer_names("inout")}}
    run(inputs, {k: b.view for k, b in bufs.items()}, shape)
    atol, rtol = wl.tolerance
    inout = _inout_specs(wl, inputs)
    if inout:
        ref = wl.reference_rows(ref_inputs, cp.zeros(1, dtype=cp.int64), cp)
        for s in inout:
            if not within_tolerance(inputs[s.name], ref[s.name], s.dtype, atol, rtol, cp):
                c = compare(inputs[s.name], ref[s.name], s.dtype, atol, rtol, cp)
                return (f"benchmark output check: {c.n_bad} of {c.total} elements of the final value of inout "
                        f"buffer {s.name} wrong at shape {shape} after the timed launches (max |err| "
                        f"{c.max_abs_err:.4g})")
    for idx, ref in wl.reference_blocks(ref_inputs, CHECK_BLOCK_ELEMENTS, cp):
        for s in wl.outputs(shape):
            out = bufs[s.name].view[idx]
            if not within_tolerance(out, ref[s.name], s.dtype, atol, rtol, cp):
                c = compare(out, ref[s.name], s.dtype, atol, rtol, cp, pattern=1)
                part = f" (rows {idx[0].start}-{idx[0].stop - 1})" if idx and isinstance(idx[0], slice) else ""
                return (f"benchmark output check: {c.n_bad} of {c.total} elements of {s.name}{part} wrong at "
                        f"shape {shape} after the timed launches (max |err| {c.max_abs_err:.4g}; "
                        f"{c.n_poison} never written)")
    return None


class WorkerState:
    """Everything a worker keeps between requests: the workload, the copy roofline, the L2 flusher,
    benchmark inputs and baseline medians per shape, the naive seed's function (a baseline too), the fault
    check's mappings (``vmm.FaultCheckSets``)."""

    fault_sets: Any = None  # vmm.FaultCheckSets; None: the fault check makes and frees its mappings each time
    index_sets: Any = None  # index_check.IndexCheckSets; None: the index check makes and frees its mappings

    def __init__(self, workload_spec: dict[str, Any], config: dict[str, Any]):
        import cupy as cp

        from evaluators.gpu.baselines import BaselineSet
        from evaluators.gpu.benchmark import L2Flusher, copy_bandwidth_gbps
        from workloads.registry import build_workload

        self.cp = cp
        self.workload = build_workload(workload_spec)
        cp.cuda.Device(0).use()
        props = cp.cuda.runtime.getDeviceProperties(0)
        self.device_name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        self.copy_gbps = copy_bandwidth_gbps()
        self.flush = L2Flusher.for_device()
        self.baselines = BaselineSet(self.workload, names=tuple(config.get("baseline_names",
                                                                           self.workload.baseline_names)))
        self.bench_sets: OrderedDict[tuple[int, ...], Any] = OrderedDict()  # shape -> timed_checks.InputSets
        self.bench_outputs: dict[tuple[int, ...], dict[str, Any]] = {}
        self.set_builds = 0
        self.edge_sets = True  # benchmark inputs in VMM mappings at unmapped pages (False once the driver refuses)
        self.timing_lock: Any = contextlib.nullcontext()  # worker_main sets the GPU's TimingLock
        self.baseline_us: dict[tuple[int, ...], dict[str, float]] = {}
        self.baseline_fns: dict[tuple[int, ...], dict[str, list[Any]]] = {}
        self.notes: dict[str, str] = {}
        self.naive = None
        if config.get("naive_cubin"):
            self.naive = self._load(config["naive_cubin"], self.workload.entry)
            self.naive_types = config["naive_param_types"]
            self.naive_launch = config["naive_launch"]
        self.bench_seed = benchmark_seed(config)
        from evaluators.gpu.vmm import FaultCheckSets

        self.fault_sets = FaultCheckSets()
        from evaluators.gpu.index_check import IndexCheckSets

        self.index_sets = IndexCheckSets()
        from evaluators.gpu import launch_prep

        launch_prep.warm()  # the refill and perturbation kernels, compiled inside the startup deadline
        self._warm_row_check()
        for shape in config.get("warm_shapes", []):
            self._baselines_for(tuple(shape))
        if self.naive is not None:
            self._warm_gate()

    def _warm_row_check(self) -> None:
        """Run the workload's fused row check (``Workload.count_bad_rows``, if it has one) once on a gate shape
        so its kernel is compiled now, inside the startup deadline, not inside the first checked launch's."""
        cp, wl = self.cp, self.workload
        shape = tuple(wl.gate_shapes[0])
        inputs = wl.make_inputs(shape, 1, "normal", cp)
        rows = cp.zeros(1, dtype=cp.int64)
        got = {k: v[rows] for k, v in self._alloc_outputs(shape).items()}
        wl.count_bad_rows(inputs, rows, got, cp.zeros(1, dtype=cp.uint64), cp)

    def _warm_gate(self) -> None:
        """Do the first evaluation's one-time work on the naive seed now, inside the startup deadline: the gate
        with every check at every gate shape (the batched small checks and the one-by-one large ones, whose
        inputs and comparisons differ), then the fault check (its first mappings). On a fresh machine CuPy
        compiles each of its kernels at first use (NVRTC, an empty disk cache): 9-15 s that the first candidate
        otherwise carried when only the first gate shape was warmed (H200, GPU_NOTES R39 and R42: 9.1 and 14.4 s
        of gate time, 0.07-0.16 s for every later candidate). The index check is left to its first evaluation:
        a seed that keeps 32-bit indices faults there, and a fault ends this context."""
        from evaluators.gpu.gate import run_gate

        t0 = time.perf_counter()
        run = self.launcher(self.naive, self.naive_types, self.naive_launch)
        result = run_gate(self.workload, run, 1, None, self.cp)
        if not result.passed:
            self.notes["warm_gate"] = f"naive seed failed the warm-up gate: {result.reason}"
            return
        reply: dict[str, Any] = {"notes": {}}
        bad = self._fault_check(run, 1, reply)
        if bad:
            self.notes["warm_gate"] = f"naive seed failed the warm-up fault check: {bad}"
            return
        self.notes["warm_gate"] = f"gate and fault check warmed on the naive seed in {time.perf_counter() - t0:.1f} s"

    # ---------------------------------------------------------------------------------------------- loading
    def _load(self, cubin: bytes, entry: str) -> Any:
        mod = self.cp.cuda.Module()
        mod.load(cubin)
        return mod.get_function(entry)  # the Function holds a reference to its Module

    def launcher(self, fn: Any, types: list[str], launch_json: dict[str, Any]):
        """A gate launcher for ``fn`` on this worker's workload (see ``make_launcher``)."""
        return make_launcher(self.workload, self.cp, fn, types, launch_json)

    # -------------------------------------------------------------------------------------------- benchmark
    def _sets_for(self, shape: tuple[int, ...]) -> Any:
        """The InputSets of ``shape`` (built on first use: ``timed_checks.set_count`` sets, one per distribution
        for small shapes, each buffer in a VMM mapping ending at an unmapped granule, inputs read-only where the
        driver allows (``InputSets`` with ``edge``; NaN-padded allocations when the driver refuses VMM, with a
        note); the naive seed's output on set 0 kept as the "answer for other inputs" refill pattern); least
        recently used shapes are dropped past BENCH_BYTES_BUDGET."""
        from evaluators.gpu.timed_checks import InputSets, set_count
        from evaluators.gpu.vmm import VMMError

        if shape in self.bench_sets:
            self.bench_sets.move_to_end(shape)
            return self.bench_sets[shape]
        wl = self.workload
        probe = wl.make_inputs(shape, self.bench_seed, "normal", self.cp)
        nbytes = sum(int(v.nbytes) for v in probe.values())
        del probe
        k = set_count(wl, nbytes)
        base = self.bench_seed + 1000 * self.set_builds  # a shape rebuilt after eviction gets new inputs
        self.set_builds += 1
        seeds = [base + i for i in range(k)]
        try:
            sets = InputSets.make(wl, shape, seeds, self.cp, edge=self.edge_sets)
        except (VMMError, ImportError) as e:
            self.edge_sets = False
            self.notes["benchmark_inputs"] = f"benchmark inputs not at unmapped pages (VMM refused: {e})"
            sets = InputSets.make(wl, shape, seeds, self.cp)
        if sets.refused:
            self.notes["benchmark_inputs"] = f"benchmark inputs not read-only (driver refused: {sets.refused[0]})"
        if self.naive is not None:
            out = self._alloc_outputs(shape)
            self.launcher(self.naive, self.naive_types, self.naive_launch)(sets.sets[0], out, shape)
            sets.answers = out
        self.bench_sets[shape] = sets
        total = sum(v.nbytes for v in self.bench_sets.values())
        while total > BENCH_BYTES_BUDGET and len(self.bench_sets) > 1:
            old, dropped = self.bench_sets.popitem(last=False)
            total -= dropped.nbytes
            self.baseline_fns.pop(old, None)
            self.bench_outputs.pop(old, None)
            self.cp.cuda.get_current_stream().synchronize()
            dropped.close()
        return sets

    def _baselines_for(self, shape: tuple[int, ...]) -> dict[str, list[Any]]:
        """Baseline name -> one zero-argument callable per input set of ``shape``."""
        if shape not in self.baseline_fns:
            sets = self._sets_for(shape)
            fns: dict[str, list[Any]] = {}
            for inputs in sets.sets:
                for name, fn in self.baselines.build(inputs, shape).items():
                    fns.setdefault(name, []).append(fn)
            fns = {n: v for n, v in fns.items() if len(v) == len(sets.sets)}
            if self.naive is not None:
                out = self._alloc_outputs(shape)
                run = self.launcher(self.naive, self.naive_types, self.naive_launch)
                # Timed as candidates are: the naive kernel alone, on its plan's buffers (a pipeline's reference
                # stages ran once here, untimed; a one-kernel workload's plan is the set's own buffers).
                plans = [run.plan(inputs, out, shape) for inputs in sets.sets]
                for p in plans:
                    p.run_before()
                fns["naive"] = [lambda p=p: run.kernel(p.buffers, shape) for p in plans]
            self.baseline_fns[shape] = fns
        return self.baseline_fns[shape]

    def _alloc_outputs(self, shape: tuple[int, ...]) -> dict[str, Any]:
        from workloads.dtypes import storage_dtype

        return {s.name: self.cp.empty(s.shape, dtype=storage_dtype(s.dtype, self.cp))
                for s in self.workload.outputs(shape)}

    def _outputs_for(self, shape: tuple[int, ...]) -> dict[str, Any]:
        if shape not in self.bench_outputs:
            self.bench_outputs[shape] = self._alloc_outputs(shape)
        return self.bench_outputs[shape]

    def benchmark(self, fn: Any, types: list[str], launch_json: dict[str, Any], req: dict[str, Any],
                  seconds: dict[str, float] | None = None) -> tuple[list[ShapeResult], str | None, Status]:
        """Time ``fn`` at ``req["bench_shapes"]`` with every timed launch refilled and its input set drawn per
        launch (``timed_checks``), check one timed launch per shape (``check_output`` "one"/"all"; "all" adds a
        full-output audit launch), then the inputs' fingerprints. The checks' wall time is added to
        ``seconds["audit"]``. Returns (results, reason, status). A launch that faults on the inputs placed at
        unmapped, read-only pages raises KernelFault(WRONG_RESULT, fatal), as the fault check does
        (``edge_fault``). With ``req["timed_checks"]`` False (a cost reference only): plain launches on set 0, no
        refill, rotation or checked launches, and with ``check_output`` "one" a full-output audit at one shape
        drawn per evaluation (gate v1's audit)."""
        import numpy as np

        from evaluators.gpu.benchmark import elapsed_us, enqueue_interleaved, median_us, too_fast
        from evaluators.gpu.timed_checks import CHECKED_LAUNCHES, baseline_call, timed_call, verify_checked

        wl = self.workload
        run = self.launcher(fn, types, launch_json)
        results: list[ShapeResult] = []
        mode = req.get("baselines", REQUEST_DEFAULTS["baselines"])
        audit = req.get("check_output", REQUEST_DEFAULTS["check_output"])
        repeats = int(req.get("repeats", REQUEST_DEFAULTS["repeats"]))
        seed = int(req.get("gate_seed", 0))
        plain = not req.get("timed_checks", True)
        bench_shapes = [tuple(s) for s in req["bench_shapes"]]
        v1_audit = seed % len(bench_shapes) if bench_shapes else -1  # gate v1: one shape per evaluation
        warmup = int(req.get("warmup", REQUEST_DEFAULTS["warmup"]))

        def draw(i: int) -> tuple[Any, ...]:
            """Everything of shape i drawn before its timing loop (input sets, the timed launches' draws, the
            baselines' calls): host work that ``benchmark`` does while the GPU runs the previous shape's loop."""
            shape = bench_shapes[i]
            sets = self._sets_for(shape)
            outputs = self._outputs_for(shape)
            rng = np.random.default_rng([seed % (2**63), i, 1])
            if plain:
                cand, checked = (lambda s0=sets.sets[0], o=outputs, sh=shape: run.enqueue(s0, o, sh)), []
            else:
                cand, checked = timed_call(wl, run.enqueue, sets, outputs, shape, rng, repeats,
                                           CHECKED_LAUNCHES if audit != "none" else 0, stages=run)
            fns: dict[str, Any] = {"candidate": cand}
            base = self._baselines_for(shape) if mode != "none" else {}
            fresh = mode == "interleaved" or shape not in self.baseline_us
            if fresh:
                brng = np.random.default_rng([seed % (2**63), i, 2])
                fns.update({n: baseline_call(v, sets, outputs, shape, wl, brng) for n, v in base.items()})
            return sets, fns, checked, fresh

        ahead = draw(0) if bench_shapes else None
        for i, shape in enumerate(bench_shapes):
            sets, fns, checked, fresh = ahead
            try:
                with self.timing_lock:  # no sanitizer launch on this GPU while the intervals are open
                    marks = enqueue_interleaved(fns, self.flush, warmup=warmup, repeats=repeats)
                    # the next shape's draws (~7 ms of host work a shape on an H200's host, R36) while the GPU
                    # runs this loop; a fault of this shape's launches may surface in them: it surfaces again in
                    # elapsed_us (errors are sticky), so a draw's own error is only raised once this shape is clean
                    drawn: BaseException | None = None
                    try:
                        ahead = draw(i + 1) if i + 1 < len(bench_shapes) else None
                    except Exception as e:
                        drawn = e
                    times = elapsed_us(marks)
            except KernelFault as f:
                raise edge_fault(f, f"a timed launch at shape {shape}") if sets.edge else f from None
            except Exception as e:
                f = KernelFault(Status.CRASH, f"benchmark at shape {shape} failed: {e}", fatal=_is_sticky(e))
                raise edge_fault(f, f"a timed launch at shape {shape}") if sets.edge else f from None
            if drawn is not None:
                raise KernelFault(Status.CRASH, f"benchmark: the draws at shape {bench_shapes[i + 1]} failed: "
                                  f"{drawn}", fatal=_is_sticky(drawn)) from drawn
            t0 = time.perf_counter()
            changed = sets.mutated()
            if changed:
                sets.restore()  # before the baselines or the next candidate read them
                self.cp.cuda.get_current_stream().synchronize()
                return results, (f"benchmark inputs changed by the candidate at shape {shape}: input set(s) "
                                 f"{changed} differ from their fingerprint after the timed launches (restored; the "
                                 "baselines timed alongside were discarded)"), Status.INPUT_MUTATED
            if checked:
                bad = verify_checked(wl, sets, checked, shape)
                if bad:
                    return results, bad, Status.WRONG_RESULT
            if seconds is not None:
                seconds["audit"] = seconds.get("audit", 0.0) + time.perf_counter() - t0
            t = median_us(times.pop("candidate"))
            if fresh and mode != "none":
                self.baseline_us[shape] = {n: median_us(v) for n, v in times.items()}
            base_us = dict(self.baseline_us.get(shape, {})) if mode != "none" else {}
            gbps = wl.gbps(shape, t)
            results.append(ShapeResult(shape=shape, dtype=wl.dtype, time_us=t, gbps=gbps,
                                       frac_copy=gbps / self.copy_gbps, baseline_us=base_us,
                                       speedups={n: b / t for n, b in base_us.items()}))
            if too_fast(gbps, self.copy_gbps):
                return results, (f"{gbps:.0f} GB/s at shape {shape} exceeds the measured copy roofline "
                                 f"{self.copy_gbps:.0f} GB/s"), Status.TOO_FAST_TO_BE_TRUE
            if audit == "all" or (plain and audit == "one" and i == v1_audit):
                t0 = time.perf_counter()
                bad = audit_output(wl, self.cp, run, sets.sets[i % len(sets.sets)], shape)
                if seconds is not None:
                    seconds["audit"] = seconds.get("audit", 0.0) + time.perf_counter() - t0
                if bad:
                    return results, bad, Status.WRONG_RESULT
        return results, None, Status.OK

    def _fault_check(self, run: Any, seed: int, reply: dict[str, Any]) -> str | None:
        """``vmm.fault_check``: inputs ending at an unmapped page, read-only where the driver allows, in mappings
        kept across evaluations (``fault_sets``; None: made and freed per check). A fault
        becomes KernelFault(WRONG_RESULT, fatal: the context is gone); a driver that refuses the mappings leaves
        a note and no verdict."""
        from evaluators.gpu.vmm import VMMError, fault_check

        try:
            bad, notes = fault_check(self.workload, run, seed, self.fault_sets)
        except KernelFault as f:
            raise edge_fault(f, "the fault check", always=True) from None
        except (VMMError, ImportError) as e:
            self.notes["fault_check"] = f"fault check not run: {e}"
            reply["notes"]["fault_check"] = self.notes["fault_check"]
            return None
        except Exception as e:  # set-up trouble (not the kernel's): no verdict, unless the context is gone
            if _is_sticky(e):
                raise KernelFault(Status.CRASH, f"fault check: CUDA error: {e}", fatal=True) from None
            self.notes["fault_check"] = f"fault check not run: {type(e).__name__}: {e}"
            reply["notes"]["fault_check"] = self.notes["fault_check"]
            return None
        if notes.get("refused"):
            reply["notes"]["read_only_inputs"] = f"read-only mapping refused by the driver: {notes['refused'][0]}"
        return bad

    def _index_check(self, run: Any, seed: int, reply: dict[str, Any]) -> str | None:
        """``index_check.index_check`` at one of the workload's ``index_shapes`` (drawn by ``seed``), in mappings
        kept across evaluations (``index_sets``). A fault (a wrapped index in the unmapped guard) becomes
        KernelFault(WRONG_RESULT, fatal as the fault); a driver that refuses the mappings leaves a note and no
        verdict. A launch the driver refuses there stays what the launcher says (LAUNCH_ERROR)."""
        from evaluators.gpu.index_check import index_check
        from evaluators.gpu.vmm import VMMError

        shapes = [tuple(s) for s in self.workload.index_shapes]
        shape = shapes[seed % len(shapes)]
        try:
            bad, notes = index_check(self.workload, run, shape, seed, self.index_sets)
        except KernelFault as f:
            if not f.fatal:  # a launch the driver refused (not a fault): as the gate reports it
                raise
            raise KernelFault(Status.WRONG_RESULT, f"index check at shape {shape}: the kernel faulted with the address "
                              "space of 2^31 elements before each row buffer unmapped (an element index kept in 32 "
                              f"bits wraps there; the worker restarts): {f}", fatal=f.fatal) from None
        except (VMMError, ImportError) as e:
            self.notes["index_check"] = f"index check not run: {e}"
            reply["notes"]["index_check"] = self.notes["index_check"]
            return None
        except Exception as e:
            if _is_sticky(e):
                raise KernelFault(Status.CRASH, f"index check: CUDA error: {e}", fatal=True) from None
            self.notes["index_check"] = f"index check not run: {type(e).__name__}: {e}"
            reply["notes"]["index_check"] = self.notes["index_check"]
            return None
        reply["notes"]["index_check"] = f"shape {list(notes['shape'])}, rows {notes['checked_rows']}"
        return bad

    # ---------------------------------------------------------------------------------------------- request
    def evaluate(self, req: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Handle one ``evaluate`` request; returns (reply, fatal)."""
        from evaluators.gpu.gate import GATE_VERSION, run_gate
        from evaluators.gpu.gate_schedule import GateSchedule, select

        reply: dict[str, Any] = {"status": Status.OK.value, "reason": "", "shapes": [], "copy_gbps": self.copy_gbps,
                                 "gate_checks": 0, "seconds": {}, "notes": dict(self.baselines.notes),
                                 "device": self.device_name, "gate_version": GATE_VERSION}
        t_load = time.perf_counter()
        try:
            fn = self._load(req["cubin"], req["entry"])
            reply["seconds"]["load"] = time.perf_counter() - t_load
        except Exception as e:
            reply.update(status=Status.LOAD_ERROR.value, reason=f"cuModuleLoadData/getFunction: {e}")
            return reply, _is_sticky(e)
        try:
            if req.get("gate", REQUEST_DEFAULTS["gate"]):
                t0 = time.perf_counter()
                run = self.launcher(fn, req["param_types"], req["launch"])
                shapes = [tuple(s) for s in req["gate_shapes"]] if req.get("gate_shapes") else None
                schedule = GateSchedule.from_json(req.get("gate_schedule"))
                g = run_gate(self.workload, run, int(req.get("gate_seed", 0)), shapes, self.cp, schedule)
                reply["seconds"]["gate"] = time.perf_counter() - t0
                reply["gate_checks"] = len(g.checks)
                if not g.passed:
                    reply.update(status=g.status.value, reason=g.reason)
                    return reply, False
                if req.get("fault_check", True):
                    bad = self._fault_check(run, int(req.get("gate_seed", 0)), reply)
                    reply["seconds"]["gate"] = time.perf_counter() - t0
                    if bad:
                        reply.update(status=Status.WRONG_RESULT.value, reason=bad)
                        return reply, False
                if (req.get("index_check", True) and getattr(self.workload, "index_shapes", ())
                        and select(0, 0, schedule).index):
                    bad = self._index_check(run, int(req.get("gate_seed", 0)), reply)
                    reply["seconds"]["gate"] = time.perf_counter() - t0
                    if bad:
                        reply.update(status=Status.WRONG_RESULT.value, reason=bad)
                        return reply, False
            if req.get("bench_shapes"):
                t0, waited0 = time.perf_counter(), getattr(self.timing_lock, "waited_s", 0.0)
                try:
                    shapes, why, status = self.benchmark(fn, req["param_types"], req["launch"], req, reply["seconds"])
                finally:
                    # of the benchmark's seconds, those spent waiting for a sanitizer launch to end (TimingLock)
                    reply["seconds"]["lock_wait"] = getattr(self.timing_lock, "waited_s", 0.0) - waited0
                reply["seconds"]["benchmark"] = time.perf_counter() - t0
                reply["shapes"] = [asdict(s) for s in shapes]
                reply["notes"].update(self.baselines.notes)
                if "benchmark_inputs" in self.notes:
                    reply["notes"]["benchmark_inputs"] = self.notes["benchmark_inputs"]
                if why:
                    reply.update(status=status.value, reason=why)
        except KernelFault as f:
            reply.update(status=f.status.value, reason=str(f))
            return reply, f.fatal
        except ValueError as e:  # launch rule / ABI refused the kernel's launch config or params
            reply.update(status=Status.LAUNCH_ERROR.value, reason=str(e))
        return reply, False


def _send_ready(conn: Any, msg: dict[str, Any]) -> bool:
    """Send the start-up answer; False when the supervisor has gone meanwhile (it closed the pipe: a pool
    closed, or a run ended, while this replacement worker was still starting), so the worker just exits."""
    try:
        conn.send(msg)
        return True
    except (BrokenPipeError, EOFError, ConnectionResetError):
        return False


def worker_main(conn: Any, device: str, workload_spec: dict[str, Any], config: dict[str, Any]) -> None:
    """Process entry point (spawned by the supervisor): serve requests on ``conn`` until ``stop`` or EOF.

    device: the physical GPU id this worker pins with CUDA_VISIBLE_DEVICES (it then sees it as device 0);
    workload_spec: ``Workload.spec()`` of the workload to rebuild here (``workloads.registry.build_workload``).
    """
    try:
        os.setpgrp()  # own process group: the supervisor kills the group at a deadline
    except OSError:
        pass
    os.environ["CUDA_VISIBLE_DEVICES"] = str(device)
    try:
        state = WorkerState(workload_spec, config)
        from evaluators.gpu.sanitizer import TimingLock, timing_lock_path

        state.timing_lock = TimingLock(timing_lock_path(str(device)))
    except BaseException:
        _send_ready(conn, {"op": "ready", "ok": False, "error": traceback.format_exc(limit=8)})
        return
    if not _send_ready(conn, {"op": "ready", "ok": True, "device": state.device_name, "copy_gbps": state.copy_gbps,
                              "notes": {**state.notes, **state.baselines.notes}}):
        return
    while True:
        try:
            req = conn.recv()
        except (EOFError, OSError):
            return
        if req.get("op") == "stop":
            return
        if req.get("op") == "ping":
            conn.send({"op": "pong"})
            continue
        try:
            reply, fatal = state.evaluate(req)
        except Exception:
            reply, fatal = {"status": Status.CRASH.value, "reason": "worker error: " + traceback.format_exc(limit=6)}, True
        reply["fatal"] = fatal
        try:
            conn.send(reply)
        except OSError:  # the pool is gone (its process stopped mid-evaluation): nobody to answer
            return
        if fatal:
            conn.close()
            os._exit(3)  # sticky CUDA error: this context is finished; the supervisor respawns
