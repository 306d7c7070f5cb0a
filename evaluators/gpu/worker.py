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
round-robin with the candidate) or "none"; ``check_output``: "all" (re-check the benchmarked output at every
shape), "one" (at one shape picked by ``gate_seed``, unknown to the kernel: a randomised audit) or "none".
Reply (dict): ``status`` (Status value), ``reason``, ``shapes`` (list of ShapeResult fields), ``copy_gbps``,
``gate_checks``, ``seconds`` {gate, benchmark (the audit included), audit}, ``notes``.
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import asdict
from typing import Any

from evaluators.types import ShapeResult, Status

# CUDA driver errors after which the context cannot be used again (cuda.h: 700 illegal address,
# 714 hardware stack error, 715 illegal instruction, 716 misaligned address, 717 invalid address space,
# 718 invalid pc, 719 launch failed (trap), 999 unknown).
STICKY_ERRORS = {"700", "714", "715", "716", "717", "718", "719", "999", "ILLEGAL_ADDRESS", "LAUNCH_FAILED",
                 "MISALIGNED_ADDRESS", "ILLEGAL_INSTRUCTION", "HARDWARE_STACK_ERROR", "INVALID_PC",
                 "INVALID_ADDRESS_SPACE", "UNKNOWN"}
# Settings of an evaluate request that the caller may leave out: the same values GPUPool uses by default, so a
# request and a pool without them behave alike (the audit at one shape is the randomised default).
REQUEST_DEFAULTS: dict[str, Any] = {"gate": True, "baselines": "cached", "check_output": "one", "warmup": 3,
                                    "repeats": 20}
# Float64 reference blocks for the post-benchmark output check (elements).
CHECK_BLOCK_ELEMENTS = 1 << 26


class KernelFault(Exception):
    """A candidate failed on the device; ``status`` says how, ``fatal`` whether the context is gone."""

    def __init__(self, status: Status, message: str, fatal: bool):
        super().__init__(message)
        self.status, self.fatal = status, fatal


def _is_sticky(err: BaseException) -> bool:
    text = str(err).upper()
    return any(code in text for code in STICKY_ERRORS)


def make_launcher(workload: Any, cp: Any, fn: Any, types: list[str], launch_json: dict[str, Any]):
    """A gate launcher ``run(inputs, outputs, shape)`` that launches the CuPy Function ``fn`` with the
    workload's launch rule and synchronises, raising KernelFault (LAUNCH_ERROR when the launch is refused,
    CRASH when the kernel faults); ``run.enqueue`` launches without synchronising (for timing)."""
    from evaluators.gpu.args import build_args
    from population.kernel import LaunchConfig

    launch = LaunchConfig.from_json(launch_json)
    wl = workload

    def enqueue(inputs: dict[str, Any], outputs: dict[str, Any], shape: tuple[int, ...],
                params: dict[str, float] | None = None) -> None:
        grid, block, smem = wl.launch_dims(shape, launch)
        scalars = wl.scalars(shape, params) if params else wl.scalars(shape)
        args = build_args(wl.abi, types, {**inputs, **outputs}, scalars, wl.entry)
        try:
            if smem > 48 * 1024:
                cp.cuda.driver.funcSetAttribute(fn.ptr, 8, smem)  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            fn(grid, block, args, shared_mem=smem)
        except Exception as e:
            raise KernelFault(Status.LAUNCH_ERROR, f"launch {grid}x{block} smem {smem} at shape {shape} "
                              f"refused: {e}", fatal=_is_sticky(e)) from None

    def run(inputs: dict[str, Any], outputs: dict[str, Any], shape: tuple[int, ...],
            params: dict[str, float] | None = None) -> None:
        enqueue(inputs, outputs, shape, params)
        try:
            cp.cuda.get_current_stream().synchronize()
        except Exception as e:
            raise KernelFault(Status.CRASH, f"kernel faulted at shape {shape}: {e}", fatal=True) from None

    run.enqueue = enqueue  # type: ignore[attr-defined]
    return run


def audit_output(workload: Any, cp: Any, run: Any, inputs: dict[str, Any], shape: tuple[int, ...]) -> str | None:
    """Poison the outputs, ``run`` once more on ``inputs`` and compare with the float64 reference, block by
    block (CHECK_BLOCK_ELEMENTS): catches a kernel that stops working after the gate (counters in global
    memory, pointer caches). Returns None when right, else the reason (str; counts are of the first wrong
    block). KernelFault from ``run`` propagates (the caller owns the process)."""
    from evaluators.gpu.gate import allocate_poisoned, compare, within_tolerance

    wl = workload
    bufs = {s.name: allocate_poisoned(s, 1, cp) for s in wl.outputs(shape)}
    run(inputs, {k: b.view for k, b in bufs.items()}, shape)
    atol, rtol = wl.tolerance
    for idx, ref in wl.reference_blocks(inputs, CHECK_BLOCK_ELEMENTS, cp):
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
    benchmark inputs and baseline medians per shape, the naive seed's function (a baseline too)."""

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
        self.bench_inputs: dict[tuple[int, ...], dict[str, Any]] = {}
        self.baseline_us: dict[tuple[int, ...], dict[str, float]] = {}
        self.baseline_fns: dict[tuple[int, ...], dict[str, Any]] = {}
        self.notes: dict[str, str] = {}
        self.naive = None
        if config.get("naive_cubin"):
            self.naive = self._load(config["naive_cubin"], self.workload.entry)
            self.naive_types = config["naive_param_types"]
            self.naive_launch = config["naive_launch"]
        self.bench_seed = int(config.get("bench_seed", 12345))
        for shape in config.get("warm_shapes", []):
            self._baselines_for(tuple(shape))
        if self.naive is not None:
            self._warm_gate()

    def _warm_gate(self) -> None:
        """Run the gate once on the naive seed so CuPy compiles its elementwise kernels now, inside the startup
        deadline, not inside the first candidate's."""
        from evaluators.gpu.gate import run_gate

        run = self.launcher(self.naive, self.naive_types, self.naive_launch)
        result = run_gate(self.workload, run, 1, [self.workload.gate_shapes[0]], self.cp)
        if not result.passed:
            self.notes["warm_gate"] = f"naive seed failed the warm-up gate: {result.reason}"

    # ---------------------------------------------------------------------------------------------- loading
    def _load(self, cubin: bytes, entry: str) -> Any:
        mod = self.cp.cuda.Module()
        mod.load(cubin)
        return mod.get_function(entry)  # the Function holds a reference to its Module

    def launcher(self, fn: Any, types: list[str], launch_json: dict[str, Any]):
        """A gate launcher for ``fn`` on this worker's workload (see ``make_launcher``)."""
        return make_launcher(self.workload, self.cp, fn, types, launch_json)

    # -------------------------------------------------------------------------------------------- benchmark
    def _inputs_for(self, shape: tuple[int, ...]) -> dict[str, Any]:
        if shape not in self.bench_inputs:
            self.bench_inputs[shape] = self.workload.make_inputs(shape, self.bench_seed + len(self.bench_inputs),
                                                                 "normal", self.cp)
        return self.bench_inputs[shape]

    def _baselines_for(self, shape: tuple[int, ...]) -> dict[str, Any]:
        if shape not in self.baseline_fns:
            fns = self.baselines.build(self._inputs_for(shape), shape)
            if self.naive is not None:
                out = self._alloc_outputs(shape)
                run = self.launcher(self.naive, self.naive_types, self.naive_launch)
                inputs = self._inputs_for(shape)
                fns["naive"] = lambda: run.enqueue(inputs, out, shape)
            self.baseline_fns[shape] = fns
        return self.baseline_fns[shape]

    def _alloc_outputs(self, shape: tuple[int, ...]) -> dict[str, Any]:
        from workloads.dtypes import storage_dtype

        return {s.name: self.cp.empty(s.shape, dtype=storage_dtype(s.dtype, self.cp))
                for s in self.workload.outputs(shape)}

    def benchmark(self, fn: Any, types: list[str], launch_json: dict[str, Any], req: dict[str, Any],
                  seconds: dict[str, float] | None = None) -> tuple[list[ShapeResult], str | None, Status]:
        """Time ``fn`` at ``req["bench_shapes"]`` (and audit the output as ``req["check_output"]`` says);
        the audit's wall time is added to ``seconds["audit"]``. Returns (results, reason, status)."""
        from evaluators.gpu.benchmark import median_us, time_interleaved, too_fast

        wl = self.workload
        run = self.launcher(fn, types, launch_json)
        results: list[ShapeResult] = []
        mode = req.get("baselines", REQUEST_DEFAULTS["baselines"])
        audit = req.get("check_output", REQUEST_DEFAULTS["check_output"])
        audited = int(req.get("gate_seed", 0)) % max(1, len(req["bench_shapes"]))
        for i, shape in enumerate(tuple(s) for s in req["bench_shapes"]):
            inputs = self._inputs_for(shape)
            outputs = self._alloc_outputs(shape)
            fns: dict[str, Any] = {"candidate": lambda i=inputs, o=outputs, s=shape: run.enqueue(i, o, s)}
            base = self._baselines_for(shape) if mode != "none" else {}
            fresh = mode == "interleaved" or shape not in self.baseline_us
            if fresh:
                fns.update(base)
            try:
                times = time_interleaved(fns, self.flush, warmup=int(req.get("warmup", REQUEST_DEFAULTS["warmup"])),
                                         repeats=int(req.get("repeats", REQUEST_DEFAULTS["repeats"])))
            except KernelFault:
                raise
            except Exception as e:
                raise KernelFault(Status.CRASH, f"benchmark at shape {shape} failed: {e}", fatal=True) from None
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
            if audit == "all" or (audit == "one" and i == audited):
                t0 = time.perf_counter()
                bad = audit_output(wl, self.cp, run, inputs, shape)
                if seconds is not None:
                    seconds["audit"] = seconds.get("audit", 0.0) + time.perf_counter() - t0
                if bad:
                    return results, bad, Status.WRONG_RESULT
        return results, None, Status.OK

    # ---------------------------------------------------------------------------------------------- request
    def evaluate(self, req: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Handle one ``evaluate`` request; returns (reply, fatal)."""
        from evaluators.gpu.gate import run_gate

        reply: dict[str, Any] = {"status": Status.OK.value, "reason": "", "shapes": [], "copy_gbps": self.copy_gbps,
                                 "gate_checks": 0, "seconds": {}, "notes": dict(self.baselines.notes),
                                 "device": self.device_name}
        try:
            fn = self._load(req["cubin"], req["entry"])
        except Exception as e:
            reply.update(status=Status.LOAD_ERROR.value, reason=f"cuModuleLoadData/getFunction: {e}")
            return reply, _is_sticky(e)
        try:
            if req.get("gate", REQUEST_DEFAULTS["gate"]):
                t0 = time.perf_counter()
                run = self.launcher(fn, req["param_types"], req["launch"])
                shapes = [tuple(s) for s in req["gate_shapes"]] if req.get("gate_shapes") else None
                g = run_gate(self.workload, run, int(req.get("gate_seed", 0)), shapes, self.cp)
                reply["seconds"]["gate"] = time.perf_counter() - t0
                reply["gate_checks"] = len(g.checks)
                if not g.passed:
                    reply.update(status=g.status.value, reason=g.reason)
                    return reply, False
            if req.get("bench_shapes"):
                t0 = time.perf_counter()
                shapes, why, status = self.benchmark(fn, req["param_types"], req["launch"], req, reply["seconds"])
                reply["seconds"]["benchmark"] = time.perf_counter() - t0
                reply["shapes"] = [asdict(s) for s in shapes]
                reply["notes"].update(self.baselines.notes)
                if why:
                    reply.update(status=status.value, reason=why)
        except KernelFault as f:
            reply.update(status=f.status.value, reason=str(f))
            return reply, f.fatal
        except ValueError as e:  # launch rule / ABI refused the kernel's launch config or params
            reply.update(status=Status.LAUNCH_ERROR.value, reason=str(e))
        return reply, False


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
    except BaseException:
        conn.send({"op": "ready", "ok": False, "error": traceback.format_exc(limit=8)})
        return
    conn.send({"op": "ready", "ok": True, "device": state.device_name, "copy_gbps": state.copy_gbps,
               "notes": {**state.notes, **state.baselines.notes}})
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
        conn.send(reply)
        if fatal:
            conn.close()
            os._exit(3)  # sticky CUDA error: this context is finished; the supervisor respawns
