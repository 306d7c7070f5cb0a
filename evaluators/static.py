"""The CPU-only static evaluator: ptxas resources, occupancy, static traffic and a roofline cost *estimate*.

Used when no GPU is visible. Nothing here is measured on a GPU: every ``EvalResult`` it returns has
``estimate=True``, every ``ShapeResult`` too, and the reason starts with ``"estimate:"``.

The cost model, per shape (all times in µs; bandwidths in bytes/s; the GPU's numbers from
``targets.spec``):

1. Launch. ``grid, block, dynamic smem = workload.launch_dims(shape, kernel.launch)``; occupancy from ptxas'
   registers, static shared memory and barriers (``targets.occupancy``). Zero CTAs per SM -> the result is
   ``launch_error``. ``slots = blocks_per_sm * sm_count``; ``concurrent = min(CTAs, slots)``.
2. DRAM bytes. ``requested`` = the static traffic estimate (``evaluators.traffic``). Bytes requested beyond the
   workload's minimum (``workload.bytes_moved``: a second pass over a row, a weight vector every CTA reads) are
   re-reads; they hit in L2 when the re-read working set, ``concurrent * elements_per_cta_sweep * element
   bytes``, fits in half the L2 (the other half is assumed taken by streaming data), and otherwise miss in
   proportion ``1 - (L2 / 2) / working set``. Spilled bytes ((spill stores + spill loads) per thread, every
   thread once) are charged as DRAM bytes (an upper bound: some hit in L1).
   ``dram = bytes_moved + missed re-reads + spills``.
3. Latency hiding (Little's law; V. Volkov, "Understanding Latency Hiding on GPUs", 2016): to sustain the copy
   bandwidth the GPU needs ``copy bandwidth * DRAM latency`` bytes in flight. Each loop body (and the
   straight-line code) on the charged path has ``concurrent * threads * b`` bytes in flight, with ``b`` the
   global-load bytes a thread issues per iteration (at most its share of the body's bytes). The body streams at
   ``copy bandwidth * min(1, in flight / needed)``.
   ``t_mem = sum over bodies (body bytes * dram / requested) / that rate``.
4. Issue. An SM's L1 handles one warp-wide access per clock and at most 128 bytes per clock (Hopper L1:
   ~33 TB/s over 132 SMs at 1.98 GHz), so a body whose accesses are ``w`` bytes per thread moves at most
   ``min(32 w, 128)`` bytes per clock per SM: narrow (2-byte) accesses halve the ceiling.
   ``t_issue = sum over bodies (body bytes * CTAs) / (active SMs * clock * min(32 w, 128))``.
5. Waves. A grid of ``CTAs`` over ``slots`` runs in ``ceil(CTAs / slots)`` waves; the last is partly idle:
   ``wave efficiency = (CTAs / slots) / ceil(CTAs / slots)``.
6. ``time = max(t_mem, t_issue) / wave efficiency + 2 µs`` (a fixed launch-and-drain overhead, assumed).

Not modelled: arithmetic throughput (RMSNorm is memory-bound), shared-memory bank conflicts, barrier stalls,
instruction cache, clock boost. The objective is the geomean over ``workload.search_shapes`` of the
estimated speedup over the workload's *naive seed* (``workload.seeds()[0]``) under the same model, not over
the GPU evaluator's primary baseline; ``extra["objective_baseline"]`` says so.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from evaluators.features import element_bytes
from evaluators.pipeline import Prepared, Rejected, prepare
from evaluators.toolchain import CompileResult
from evaluators.traffic import TrafficEstimate
from evaluators.types import EvalResult, Occupancy, ResourceUsage, ShapeResult, Status, geomean
from population.kernel import Kernel
from targets.spec import GPUSpec, resolve_gpu

LAUNCH_OVERHEAD_US = 2.0
L2_REUSE_FRACTION = 0.5
L1_BYTES_PER_CLOCK = 128.0
BASELINE_NAME = "naive_seed"


@dataclass(frozen=True)
class ShapeEstimate:
    """The model's terms at one shape: time_us (the estimate), t_mem_us, t_issue_us, wave_efficiency,
    latency_efficiency (the byte-weighted min(1, in flight / needed) over bodies), requested_bytes,
    dram_bytes, ctas, concurrent_ctas."""

    shape: tuple[int, ...]
    time_us: float
    t_mem_us: float
    t_issue_us: float
    wave_efficiency: float
    latency_efficiency: float
    requested_bytes: float
    dram_bytes: float
    ctas: int
    concurrent_ctas: int


def estimate_shape(
    gpu: GPUSpec,
    traffic: TrafficEstimate,
    bytes_moved: int,
    sweep_bytes: float,
    blocks_per_sm: int,
    spill_bytes_per_thread: int,
    shape: tuple[int, ...] = (),
) -> ShapeEstimate:
    """Apply the module's cost model (steps 2-6) to one launch.

    traffic: the static estimate at this shape; bytes_moved: the workload's minimum DRAM bytes; sweep_bytes:
    bytes one CTA streams per pass (elements_per_cta_sweep * element bytes); blocks_per_sm: resident CTAs
    per SM (> 0); spill_bytes_per_thread: ptxas spill stores + loads. Raises ValueError if blocks_per_sm < 1.
    """
    if blocks_per_sm < 1:
        raise ValueError(f"blocks_per_sm must be >= 1 to estimate a time, got {blocks_per_sm}")
    ctas, threads = traffic.ctas, traffic.threads_per_cta
    slots = blocks_per_sm * gpu.sm_count
    concurrent = min(ctas, slots)
    requested = traffic.bytes
    reread = max(0.0, requested - bytes_moved)
    working_set = concurrent * sweep_bytes
    l2_room = gpu.l2_bytes * L2_REUSE_FRACTION
    miss = 0.0 if working_set <= l2_room else 1.0 - l2_room / working_set
    spills = float(spill_bytes_per_thread) * threads * ctas
    dram = bytes_moved + reread * miss + spills
    bw = gpu.copy_gbps * 1e9
    needed = gpu.bytes_in_flight_needed
    clock = gpu.boost_mhz * 1e6
    active_sms = min(gpu.sm_count, ctas)

    t_mem = t_issue = 0.0
    weighted_eff = 0.0
    scale = dram / requested if requested > 0 else 1.0
    for body in traffic.bodies:
        share = body.bytes_per_cta / threads
        per_thread = min(float(body.load_bytes_per_iteration), share) if body.load_bytes_per_iteration else 0.0
        eff = 1.0 if per_thread == 0.0 else min(1.0, concurrent * threads * per_thread / needed)
        t_mem += body.bytes_per_cta * ctas * scale / (bw * eff)
        weighted_eff += eff * body.bytes_per_cta
        w = body.mean_width_bytes or 4.0
        t_issue += body.bytes_per_cta * ctas / (active_sms * clock * min(32.0 * w, L1_BYTES_PER_CLOCK))
    if not traffic.bodies:  # no global access found: charge the minimum at full rate
        t_mem = dram / bw
    waves = ctas / slots
    wave_eff = waves / math.ceil(waves)
    time_s = max(t_mem, t_issue) / wave_eff
    lat_eff = weighted_eff / traffic.bytes_per_cta if traffic.bytes_per_cta > 0 else 1.0
    return ShapeEstimate(
        shape=tuple(shape), time_us=time_s * 1e6 + LAUNCH_OVERHEAD_US, t_mem_us=t_mem * 1e6,
        t_issue_us=t_issue * 1e6, wave_efficiency=wave_eff, latency_efficiency=lat_eff,
        requested_bytes=requested, dram_bytes=dram, ctas=ctas, concurrent_ctas=concurrent,
    )


@dataclass(frozen=True)
class _Analysis:
    """Everything the model needs for one kernel, shape by shape."""

    compiled: CompileResult
    resources: ResourceUsage
    occupancy: Occupancy
    traffic: dict[tuple[int, ...], TrafficEstimate]
    estimates: dict[tuple[int, ...], ShapeEstimate]
    prepared: Prepared


class StaticEvaluator:
    """``types.Evaluator`` without a GPU: compile with ptxas, then estimate (module docstring).

    workload: a ``Workload`` (``workloads``); gpu: a ``targets.spec.GPUSpec`` (the run's, built from
    ``conf/hardware``) or a GPU name (``"h200"``, ``"h100"``, ``"b200"``; None: ``targets.spec.DEFAULT_GPU``);
    arch: ptxas target (default the GPU's ``arch``); processes: how many ``evaluate`` calls may run
    at once (``capacity``; ptxas runs as a subprocess per call; default min(4, CPUs)); cache_dir: on-disk
    ptxas cache. Deterministic: the same kernel always gets the same result (``eval_seconds`` aside).
    Raises ValueError for an unknown GPU.
    """

    def __init__(self, workload, gpu: GPUSpec | str | None = None, arch: str | None = None, processes: int | None = None,
                 cache_dir: str | None = None) -> None:
        self.workload = workload
        self.gpu = resolve_gpu(gpu)
        self.arch = arch or self.gpu.arch
        self.capacity = max(1, processes if processes is not None else min(4, os.cpu_count() or 1))
        self.cache_dir = cache_dir
        self._baseline: dict[tuple[int, ...], float] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------------------ model

    def _analyse(self, kernel: Kernel, shapes: list[tuple[int, ...]]) -> _Analysis:
        """The shared front half (``evaluators.pipeline.prepare``), then the estimate per shape; raises
        ``pipeline.Rejected`` (the status the GPU pool would give too) or _NoEstimate."""
        wl = self.workload
        p = prepare(kernel, wl, self.gpu, shapes, arch=self.arch, cache_dir=self.cache_dir)
        if not all(s in p.traffic for s in shapes):
            raise _NoEstimate(f"the static traffic analysis failed: {p.notes.get('traffic', 'no estimate')}")
        ru, occ = p.resources, p.occupancy
        elt = element_bytes(wl)
        spill = ru.spill_stores_bytes + ru.spill_loads_bytes
        estimates = {
            s: estimate_shape(self.gpu, p.traffic[s], wl.bytes_moved(s),
                              wl.elements_per_cta_sweep(s, kernel.launch) * elt, occ.blocks_per_sm, spill, s)
            for s in shapes
        }
        return _Analysis(p.compiled, ru, occ, p.traffic, estimates, p)

    def baseline_times(self, shapes: list[tuple[int, ...]] | None = None) -> dict[tuple[int, ...], float]:
        """Estimated µs of the workload's naive seed at ``shapes`` (default: the search shapes); computed once per
        shape, thread-safe."""
        shapes = [tuple(s) for s in (self.workload.search_shapes if shapes is None else shapes)]
        with self._lock:
            todo = [s for s in shapes if s not in self._baseline]
            if todo:
                a = self._analyse(self.workload.seeds()[0], todo)
                self._baseline.update({s: a.estimates[s].time_us for s in todo})
            return {s: self._baseline[s] for s in shapes}

    # ------------------------------------------------------------------------------------------- evaluator

    def evaluate(self, kernel: Kernel, *, shapes: list[tuple[int, ...]] | None = None) -> EvalResult:
        """Estimate one kernel at ``shapes`` (default: the workload's search shapes; a multi-task run passes a
        task's). Status OK with an estimated objective, or COMPILE_ERROR (ptxas' message and line), LOAD_ERROR
        (no such entry), LAUNCH_ERROR (ABI mismatch, launch rule, zero occupancy). Never raises for a bad
        kernel."""
        start = time.perf_counter()
        shapes = [tuple(int(v) for v in s) for s in (self.workload.search_shapes if shapes is None else shapes)]
        try:
            a = self._analyse(kernel, shapes)
        except Rejected as r:
            return r.result(estimate=True, eval_seconds=time.perf_counter() - start, prefix="estimate: ")
        except _NoEstimate as e:
            return EvalResult(status=Status.SKIPPED, reason=f"estimate: {e}", estimate=True,
                              eval_seconds=time.perf_counter() - start)
        base = self.baseline_times(shapes)
        results = []
        for s in shapes:
            est = a.estimates[s]
            gbps = self.workload.gbps(s, est.time_us)
            results.append(ShapeResult(
                shape=s, dtype=self.workload.dtype, time_us=est.time_us, gbps=gbps,
                frac_copy=gbps / self.gpu.copy_gbps, speedups={BASELINE_NAME: base[s] / est.time_us},
                baseline_us={BASELINE_NAME: base[s]}, estimate=True))
        objective = geomean([r.speedups[BASELINE_NAME] for r in results])
        features = a.prepared.features
        return EvalResult(
            status=Status.OK,
            reason=f"estimate: static model on {self.gpu.name} (no GPU measurement)",
            objective=objective,
            shapes=results,
            resources=a.resources,
            occupancy=a.occupancy,
            traffic_bytes=a.traffic[shapes[0]].bytes,
            features=features,
            estimate=True,
            eval_seconds=time.perf_counter() - start,
            extra=self._extra(a, shapes),
        )

    def _extra(self, a: _Analysis, shapes: list[tuple[int, ...]]) -> dict[str, Any]:
        return {
            "objective_baseline": f"{BASELINE_NAME} (workload.seeds()[0]) under the same static model",
            "gpu": self.gpu.name,
            "arch": self.arch,
            "ptxas_seconds": a.compiled.seconds,
            "ptxas_cached": a.compiled.cached,
            "model": {
                str(list(s)): {
                    "t_mem_us": a.estimates[s].t_mem_us, "t_issue_us": a.estimates[s].t_issue_us,
                    "wave_efficiency": a.estimates[s].wave_efficiency,
                    "latency_efficiency": a.estimates[s].latency_efficiency,
                    "requested_bytes": a.estimates[s].requested_bytes, "dram_bytes": a.estimates[s].dram_bytes,
                }
                for s in shapes
            },
        }

    def close(self) -> None:
        """Nothing to release (ptxas runs per call); present for the Evaluator protocol."""


class _NoEstimate(Exception):
    """The static traffic analysis could not model the kernel, so there is nothing to estimate with."""
