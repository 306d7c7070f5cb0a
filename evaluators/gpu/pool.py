"""GPUPool: the GPU evaluator the engine calls (``evaluators.types.Evaluator``), one worker per visible GPU.

``evaluate(kernel)`` compiles the kernel with ptxas in the calling thread (``evaluators.toolchain.compile_ptx``),
checks its ``.param`` list against the workload ABI, works out occupancy, static traffic and features, then hands
the cubin to a free worker (blocking while all are busy) which gates and benchmarks it. Thread-safe; ``capacity``
is two per worker, so an engine that keeps that many evaluations in flight overlaps one candidate's ptxas and
static analysis with another's time on the GPU.

Objective: ``evaluators.objective``: by default the geometric mean over the benchmarked shapes of the speedup
over the fastest library measured at each shape (``objective={"baseline": "best"}``); ``{"baseline": "torch"}``
takes eager ``rms_norm`` instead. ``extra["objective_baseline"]`` names what it was taken against and
``extra["objective"]`` holds the reference per shape and the libraries missing there.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import secrets
import threading
import time
from collections.abc import Sequence
from typing import Any

from evaluators.front_half import FrontHalf, check_where
from evaluators.gpu.args import param_types
from evaluators.gpu.devices import physical_device, visible_devices
from evaluators.gpu.duty_cycle import DutyCycle
from evaluators.gpu.gate import GATE_VERSION
from evaluators.gpu.gate_schedule import GateSchedule
from evaluators.gpu.sanitizer import ELITE_TOOLS, Verdict, VerdictQueue, sanitize, timing_lock_path
from evaluators.gpu.supervisor import Supervisor, WorkerStartError
from evaluators.gpu.worker import REQUEST_DEFAULTS
from evaluators.objective import ObjectiveSpec, ReferenceMemory, evaluate_objective, workload_objective
from evaluators.pipeline import Rejected
from evaluators.toolchain import compile_ptx
from evaluators.types import CompileError, EvalResult, ShapeResult, Status
from population.kernel import Kernel
from targets.spec import GPUSpec, resolve_gpu
from workloads.base import Shape, Workload


class NoGPU(RuntimeError):
    """No GPU is visible to CuPy, so a GPUPool cannot start."""


def _shape_list(workload: Workload, shapes: str | Sequence[Shape]) -> list[Shape]:
    if isinstance(shapes, str):
        return workload.shape_list(shapes)
    return [tuple(int(v) for v in s) for s in shapes]


class GPUPool:
    """Evaluates kernels on every visible GPU (or ``devices``).

    Options: gpu (the ``targets.spec.GPUSpec`` of the devices, or its name; None: ``targets.spec.DEFAULT_GPU``:
    its ``arch`` is the ptxas target and its compute capability the occupancy calculator's); arch (overrides
    ``gpu.arch``, e.g. ``sm_90a``); shapes ("search" | "benchmark" | "heldout" | list of shapes: what is
    timed); gate (run the correctness gate, True); gate_shapes (None: the workload's); timeout_s (deadline per
    candidate in the worker, seconds); startup_timeout_s; warmup, repeats (benchmark launches); baselines
    ("cached" | "interleaved" | "none"); baseline_names (None: every library baseline the workload
    defines, ``workload.baseline_names``); naive_baseline (time the naive seed as a baseline);
    check_output ("all" | "one" | "none": re-check the benchmarked output at every shape, at one shape
    drawn per evaluation (default: a randomised audit at a fraction of the cost), or not); seed (None: fresh
    gate inputs from the OS per evaluation; an int: a reproducible sequence); objective
    (``evaluators.objective.ObjectiveSpec`` or its config mapping; default: the best library per shape);
    sanitize_elites (offer the engine compute-sanitizer verdicts: ``submit_verdict`` / ``withdraw_verdict`` /
    ``collect_verdicts``, run in a background thread whose launches never overlap a timed interval on the same
    GPU); sanitizer_tools
    (default ``sanitizer.ELITE_TOOLS``); sanitizer_timeout_s (per tool and batch); sanitizer_timed_tools (the
    tools of the replay's timed-shape phase, a subset of sanitizer_tools; None: all of them); sanitizer_duty (the
    share of wall time, in (0, 1], the verdicts may hold a GPU's timing lock while the engine is not waiting for
    them: ``duty_cycle.DutyCycle``, default 0.05; 1: no bound; ``collect_verdicts(wait=True)`` lifts it. At 0.1
    the verdicts held the lock 8.6 % of a 265 s search, H200 2026-12-02, R21); sanitizer_launch_s (the longest
    one instrumented launch may hold a GPU's timing lock while candidates are timed, seconds; None: no cap;
    default 10: honest launches at 32768 x 512 held it at most 3.2 s under racecheck, while some kernels' ran past
    60 s and stalled a candidate's benchmark 50 s, H200 2026-12-03, R50-R53; a kernel cut there gets its
    verdict in the drain, ``collect_verdicts(wait=True)``); gate_schedule
    (``gate_schedule.PROFILES``: "rotating" (default) spreads run 4 of the small gate checks and the large checks
    over evaluations by the pool's evaluation counter and a secret key (GATE.md, "Schedule"); "full" runs every
    check at every evaluation; "v1" runs gate v1's share, only to measure the loop against it); fault_check (run
    the fault check after the gate, True); timed_checks (False: time plain launches on one input set, no
    per-launch refill, rotation or checked launches, and with check_output "one" audit the whole output at one
    shape per evaluation, as gate v1 did: only to measure the loop against gate v1); front_half ("thread", the
    default: ``evaluators.pipeline.prepare`` in the calling thread; "process": in worker processes,
    ``evaluators.front_half``, so its pure-Python analyses hold no lock of this process).
    Raises NoGPU when no device is visible, WorkerStartError when a worker cannot start. Workers are spawned,
    so a script that builds a pool must do so under ``if __name__ == "__main__":``.
    """

    estimate = False

    def __init__(self, workload: Workload, *, devices: Sequence[int] | None = None,
                 gpu: GPUSpec | str | None = None, arch: str | None = None,
                 shapes: str | Sequence[Shape] = "search", gate: bool = True,
                 gate_shapes: Sequence[Shape] | None = None, timeout_s: float = 60.0,
                 startup_timeout_s: float = 900.0, warmup: int = REQUEST_DEFAULTS["warmup"],
                 repeats: int = REQUEST_DEFAULTS["repeats"], baselines: str = REQUEST_DEFAULTS["baselines"],
                 baseline_names: Sequence[str] | None = None,
                 naive_baseline: bool = True, check_output: str = REQUEST_DEFAULTS["check_output"],
                 seed: int | None = None, objective: Any = None, sanitize_elites: bool = True,
                 sanitizer_tools: Sequence[str] = ELITE_TOOLS, sanitizer_timeout_s: float = 120.0,
                 sanitizer_timed_tools: Sequence[str] | None = None, sanitizer_duty: float = 0.05,
                 sanitizer_launch_s: float | None = 10.0,
                 gate_schedule: str = "rotating", fault_check: bool = True, timed_checks: bool = True,
                 front_half: str = "thread"):
        if baselines not in ("cached", "interleaved", "none"):
            raise ValueError(f"baselines must be cached, interleaved or none, got {baselines!r}")
        if check_output not in ("all", "one", "none"):
            raise ValueError(f"check_output must be all, one or none, got {check_output!r}")
        unknown = set(sanitizer_timed_tools or ()) - set(sanitizer_tools)
        if unknown:  # before any worker starts
            raise ValueError(f"sanitizer_timed_tools {sorted(unknown)} are not in sanitizer_tools {tuple(sanitizer_tools)}")
        DutyCycle(sanitizer_duty)  # ValueError before any worker starts
        if sanitizer_launch_s is not None and not float(sanitizer_launch_s) > 0:
            raise ValueError(f"sanitizer_launch_s must be > 0 seconds or None, got {sanitizer_launch_s}")
        self.sanitizer_launch_s = None if sanitizer_launch_s is None else float(sanitizer_launch_s)
        check_where(front_half)
        self.gpu = resolve_gpu(gpu)
        self.workload, self.arch = workload, arch or self.gpu.arch
        self.objective = ObjectiveSpec.from_config(objective, default=workload_objective(workload))
        self._references = ReferenceMemory(self.objective)
        if baseline_names is None:
            baseline_names = tuple(workload.baseline_names)
        self.devices = list(devices) if devices is not None else visible_devices()
        if not self.devices:
            raise NoGPU("no GPU visible to CuPy; use the static evaluator (evaluator=static)")
        self.shapes = _shape_list(workload, shapes)
        self.gate, self.gate_shapes = gate, [tuple(s) for s in gate_shapes] if gate_shapes else None
        self.timeout_s, self.warmup, self.repeats = float(timeout_s), int(warmup), int(repeats)
        self.baselines, self.check_output = baselines, check_output
        self._seed_counter = itertools.count() if seed is not None else None
        self._seed = seed
        self._sanitize_calls = itertools.count()
        GateSchedule(gate_schedule)  # ValueError on an unknown profile
        self.gate_schedule, self.fault_check, self.timed_checks = gate_schedule, bool(fault_check), bool(timed_checks)
        # Evaluation counter and secret key of the gate schedule (gate_schedule.select): unknown to any kernel.
        self._round = itertools.count()
        self._schedule_key = secrets.randbits(30) if seed is None else (seed * 2_654_435_761) % (1 << 30)
        config: dict[str, Any] = {"baseline_names": tuple(baseline_names), "warm_shapes": self.shapes}
        if naive_baseline:
            naive = workload.seeds()[0]
            config.update(naive_cubin=compile_ptx(naive, self.arch).cubin, naive_param_types=param_types(naive),
                          naive_launch=naive.launch.to_json())
        self._sups = [Supervisor(d, workload.spec(), config, startup_timeout_s)
                      for d in self.devices]
        for s in self._sups:
            s.start()  # all workers warm up at once
        self.info = [s.wait_ready() for s in self._sups]
        self._free: queue.Queue[Supervisor] = queue.Queue()
        for s in self._sups:
            self._free.put(s)
        # Two evaluations in flight per GPU: one compiles (ptxas, in the caller's thread) while the other holds
        # the worker, so the GPU does not wait for the host between candidates.
        self.capacity = 2 * len(self._sups)
        self._lock = threading.Lock()
        self._closed = False
        self.sanitizer_tools, self.sanitizer_timeout_s = tuple(sanitizer_tools), float(sanitizer_timeout_s)
        self.sanitizer_timed_tools = None if sanitizer_timed_tools is None else tuple(sanitizer_timed_tools)
        self._verdicts: VerdictQueue | None = None
        # one per physical GPU, as the timing lock is; made here so that a drain covers every one
        self._duty = {str(physical_device(d)): DutyCycle(
            sanitizer_duty, drain_path=timing_lock_path(str(physical_device(d))).with_suffix(".drain"))
            for d in self.devices}
        if not sanitize_elites:
            self.submit_verdict = None  # type: ignore[assignment]  # the engine then confirms elites at once
            self.withdraw_verdict = None  # type: ignore[assignment]
        self._next_device = itertools.count()
        # one process per evaluation in flight (capacity), and one to spare
        self._front = FrontHalf(workload, self.gpu, self.arch, front_half, workers=self.capacity + 1)

    @property
    def copy_gbps(self) -> float:
        """Device-to-device copy bandwidth (GB/s) measured by the first worker."""
        return float(self.info[0]["copy_gbps"])

    def _gate_seed(self) -> int:
        if self._seed_counter is None:
            return secrets.randbits(62)
        with self._lock:
            return self._seed * 1_000_003 + next(self._seed_counter)

    def _schedule(self, profile: str | None) -> dict[str, Any]:
        """The next evaluation's ``GateSchedule`` (JSON): the pool's profile (or ``profile``), the next value of
        the evaluation counter and the pool's key."""
        with self._lock:
            k = next(self._round)
        return GateSchedule(profile or self.gate_schedule, k, self._schedule_key).to_json()

    def evaluate(self, kernel: Kernel, *, shapes: str | Sequence[Shape] | None = None,
                 baselines: str | None = None, gate: bool | None = None,
                 check_output: str | None = None, gate_schedule: str | None = None) -> EvalResult:
        """Compile, gate and benchmark ``kernel``; never raises for a bad kernel (the status says what failed).
        ``eval_seconds`` leaves out the time spent waiting for a free worker (``extra["queue_seconds"]``).

        shapes / baselines / gate / check_output / gate_schedule override the pool's settings for this call
        (final verification uses ``shapes="benchmark", baselines="interleaved"``). A call with check_output
        "all" (a verification) runs every gate check (schedule "full") unless ``gate_schedule`` says otherwise.
        """
        if self._closed:
            raise RuntimeError("GPUPool is closed")
        t0 = time.perf_counter()
        wl = self.workload
        bench = self.shapes if shapes is None else _shape_list(wl, shapes)

        waited = 0.0  # seconds queued behind another candidate for the worker: not this candidate's cost

        def done(status: Status, reason: str, **kw: Any) -> EvalResult:
            r = EvalResult(status=status, reason=reason, eval_seconds=time.perf_counter() - t0 - waited, **kw)
            r.extra.setdefault("gate_version", GATE_VERSION)
            return r

        try:
            p = self._front(kernel, bench or wl.search_shapes[:1])
        except Rejected as r:
            return r.result(estimate=False, eval_seconds=time.perf_counter() - t0,
                            extra={"gate_version": GATE_VERSION})
        compiled, types = p.compiled, p.param_types
        # the front half's wall time, ptxas included: with compile_seconds and the worker's seconds it splits
        # eval_seconds (R21, H200: 0.136 s of 0.568 per candidate were in neither)
        extra: dict[str, Any] = {"prepare_seconds": time.perf_counter() - t0,
                                 "compile_seconds": compiled.seconds, "compile_cached": compiled.cached,
                                 **{f"note_{k}": v for k, v in p.notes.items()}}
        common = p.fields
        check = check_output or self.check_output
        req = {"op": "evaluate", "cubin": compiled.cubin, "entry": kernel.entry, "param_types": types,
               "launch": kernel.launch.to_json(), "gate": self.gate if gate is None else gate,
               "gate_seed": self._gate_seed(), "gate_shapes": self.gate_shapes, "bench_shapes": bench,
               "warmup": self.warmup, "repeats": self.repeats,
               "baselines": self.baselines if baselines is None else baselines, "check_output": check,
               "gate_schedule": self._schedule(gate_schedule or ("full" if check == "all" else None)),
               "fault_check": self.fault_check,
               "timed_checks": self.timed_checks}
        t_wait = time.perf_counter()
        sup = self._free.get()
        waited = time.perf_counter() - t_wait
        extra["queue_seconds"] = waited
        try:
            reply = sup.request(req, self.timeout_s)
        except WorkerStartError as e:
            return done(Status.CRASH, f"GPU worker could not restart: {e}", extra=extra, **common)
        finally:
            self._free.put(sup)
        extra["gate_schedule"] = req["gate_schedule"]
        extra.update(device=reply.get("device"), copy_gbps=reply.get("copy_gbps"), gate_checks=reply.get("gate_checks"),
                     seconds=reply.get("seconds", {}), worker_restarts=sup.restarts,
                     baseline_notes=reply.get("notes", {}))
        shape_results = [ShapeResult(**{**d, "shape": tuple(d["shape"])}) for d in reply.get("shapes", [])]
        status = Status(reply["status"])
        objective = None
        if status == Status.OK and shape_results:
            # a contender missing from this evaluation is judged at its last time in this pool (ReferenceMemory)
            judged, remembered = self._references.fill(shape_results)
            ov = evaluate_objective(judged, self.objective)
            objective, extra["objective_baseline"], extra["objective"] = ov.value, ov.name, ov.to_json()
            if remembered:
                extra["objective"]["remembered"] = remembered
        return done(status, reply.get("reason", ""), objective=objective, shapes=shape_results, extra=extra,
                    **common)

    def verify(self, kernel: Kernel, shapes: str | Sequence[Shape] = "benchmark",
               dram_shape: Shape | None = None) -> EvalResult:
        """Final verification of an elite: gate, benchmark on ``shapes`` with the baselines re-timed round-robin,
        and DRAM bytes measured with ncu at ``dram_shape`` (default: the largest of ``shapes`` by bytes) into
        ``measured_dram_bytes`` (left None, with ``extra["ncu"]`` saying why, when ncu cannot measure)."""
        from evaluators.gpu.ncu import NcuError, measure_dram_bytes

        res = self.evaluate(kernel, shapes=shapes, baselines="interleaved", check_output="all", gate_schedule="full")
        if res.status != Status.OK:
            return res
        target = dram_shape or max((s.shape for s in res.shapes), key=self.workload.bytes_moved)
        try:
            m = measure_dram_bytes(kernel, self.workload, target, arch=self.arch)
            res.measured_dram_bytes = m.total_bytes
            res.extra["ncu"] = {"shape": list(target), "read_bytes": m.read_bytes, "write_bytes": m.write_bytes,
                                "time_us": m.time_us, "model_bytes": self.workload.bytes_moved(target)}
        except (NcuError, CompileError) as e:
            res.extra["ncu"] = f"not measured: {e}"
        return res

    # -------------------------------------------------------------------------------------- sanitizer verdicts
    def sanitize(self, kernels: Sequence[Kernel], launch_cap: bool = False) -> list[Verdict]:
        """compute-sanitizer verdicts (``sanitizer.sanitize``) for ``kernels`` on one of the pool's GPUs (round
        robin), now, replayed also at the smallest of the pool's timed shapes in the benchmark's layout
        (``sanitizer.replay_plan``), its launch conditions drawn from a seed of the OS's (of the pool's seed for a
        seeded pool: reproducible); its launches wait while a worker of that GPU times a candidate
        (``TimingLock``). ``launch_cap``: cut a launch that holds the lock past ``sanitizer_launch_s`` and defer
        its kernel (a SKIPPED verdict with ``deferred``): the background verdicts' setting, beside a search that
        times candidates meanwhile; a direct call waits for its own verdicts, so by default it runs uncut."""
        device = physical_device(self.devices[next(self._next_device) % len(self.devices)])
        # the replay's seed: drawn from the OS per call (sanitizer.sanitize), from the pool's seed when it has one
        seed = None if self._seed is None else (self._seed * 7919 + next(self._sanitize_calls)) % (1 << 31)
        return sanitize(kernels, self.workload, arch=self.arch, tools=self.sanitizer_tools,
                        timeout_s=self.sanitizer_timeout_s, device=device, timed_shapes=self.shapes, seed=seed,
                        timed_tools=self.sanitizer_timed_tools, duty=self._duty[str(device)],
                        launch_cap_s=self.sanitizer_launch_s if launch_cap else None)

    def submit_verdict(self, key: Any, kernel: Kernel) -> None:
        """Queue ``kernel`` for a background sanitizer verdict under ``key`` (see ``collect_verdicts``)."""
        if self._verdicts is None:
            # batches of 8: at the timed shape a kernel costs ~5 s per tool (R14), so a batch of 16 ran ~4 min, and
            # the elites displaced meanwhile could no longer be withdrawn (R17: 181 entered, 31 stayed, 330 s)
            self._verdicts = VerdictQueue(lambda ks: self.sanitize(ks, launch_cap=True), max_batch=8)
        self._verdicts.submit(key, kernel)

    def withdraw_verdict(self, key: Any) -> bool:
        """Drop the queued verdict for ``key`` unless its batch has started (``VerdictQueue.withdraw``); True when
        dropped."""
        return self._verdicts is not None and self._verdicts.withdraw(key)

    def collect_verdicts(self, wait: bool = False, timeout: float | None = None) -> list[tuple[Any, Verdict]]:
        """(key, Verdict) pairs finished since the last call; ``wait``: first wait for every queued one (or
        ``timeout`` seconds), meanwhile without the duty bound (``sanitizer_duty``): the caller times nothing."""
        if self._verdicts is None:
            return []
        if not wait:
            return self._verdicts.collect()
        with contextlib.ExitStack() as stack:
            for d in list(self._duty.values()):
                stack.enter_context(d.draining())
            return self._verdicts.collect(wait=True, timeout=timeout)

    def sanitizer_stats(self) -> dict[str, Any]:
        """The verdicts' use of the timing lock: per physical GPU, ``DutyCycle.stats()`` (share, lock seconds
        charged, seconds held back) and ``deferred``: the verdicts put off to the drain by ``sanitizer_launch_s``
        (the pool's count, over all its GPUs)."""
        deferred = 0 if self._verdicts is None else self._verdicts.deferrals
        return {dev: {**d.stats(), "deferred": deferred} for dev, d in self._duty.items()}

    def close(self) -> None:
        """Stop every worker (idempotent)."""
        self._closed = True
        if getattr(self, "_front", None) is not None:
            self._front.close()
        if self._verdicts is not None:
            self._verdicts.close()
        for s in self._sups:
            s.close()

    def __enter__(self) -> GPUPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
