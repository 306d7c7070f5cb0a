"""The CPU-only static evaluator: ptxas resources, occupancy, static traffic and a calibrated cost *estimate*.

Used when no GPU is visible. Nothing here is measured on a GPU: every ``EvalResult`` it returns has
``estimate=True``, every ``ShapeResult`` too, and the reason starts with ``"estimate:"``.

Per shape: the shared front half (``evaluators.pipeline.prepare``: ptxas, entry, ABI, launch rule, occupancy
from ptxas' registers, shared memory and barriers, zero CTAs per SM -> ``launch_error``); the static traffic
estimate (``evaluators.traffic``, with the shape's scalar parameters deciding uniform branches and
counted loops); then the cost model of ``evaluators.cost_model`` (DRAM bytes never below the workload's
compulsory bytes, L2 reuse of re-reads and of buffers shared by all CTAs, Little's-law latency hiding, per-CTA
serial time with barriers and cluster costs, wave quantisation, a smooth maximum of the limits) with constants
calibrated against recorded H200 measurements (``evaluators/static_calibration.json``,
``experiments/calibrate_static.py``). The model version (``static-v2/<calibration id>``) is recorded in every
result's ``extra["model_version"]``.

Not modelled: arithmetic throughput (RMSNorm is memory-bound), shared-memory bank conflicts, instruction cache,
cache-hint and instruction-schedule effects. The objective is the geomean over ``workload.search_shapes`` of the
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

from evaluators.cost_model import Calibration, CostConstants, load_calibration, predict_parts, shape_terms
from evaluators.features import element_bytes
from evaluators.pipeline import Prepared, Rejected, prepare
from evaluators.toolchain import CompileResult
from evaluators.traffic import TrafficEstimate
from evaluators.types import EvalResult, Occupancy, ResourceUsage, ShapeResult, Status, geomean
from population.kernel import Kernel
from targets.spec import GPUSpec, resolve_gpu

BASELINE_NAME = "naive_seed"


@dataclass(frozen=True)
class ShapeEstimate:
    """The model's terms at one shape: time_us (the estimate), t_dram_us, t_l2_us, t_issue_us, t_cta_us
    (``evaluators.cost_model`` step 3), duty (share of a CTA's time with loads in flight), requested_bytes,
    dram_bytes, ctas, concurrent_ctas, terms (the constant-free inputs, ``cost_model.TERM_NAMES``)."""

    shape: tuple[int, ...]
    time_us: float
    t_dram_us: float
    t_l2_us: float
    t_issue_us: float
    t_cta_us: float
    duty: float
    requested_bytes: float
    dram_bytes: float
    ctas: int
    concurrent_ctas: int
    terms: dict[str, float]


def estimate_shape(gpu: GPUSpec, traffic: TrafficEstimate, bytes_moved: int, sweep_bytes: float,
                   blocks_per_sm: int, spill_bytes_per_thread: int, shape: tuple[int, ...] = (), *,
                   cluster: int = 1, constants: CostConstants | None = None) -> ShapeEstimate:
    """Apply the cost model (``evaluators.cost_model``) to one launch.

    traffic: the static estimate at this shape; bytes_moved: the workload's minimum DRAM bytes; sweep_bytes:
    bytes one CTA streams per pass (elements_per_cta_sweep * element bytes); blocks_per_sm: resident CTAs
    per SM (> 0); spill_bytes_per_thread: ptxas spill stores + loads; cluster: CTAs per cluster; constants:
    the model constants (default: the calibrated ones). Raises ValueError if blocks_per_sm < 1.
    """
    c = constants or load_calibration().constants
    terms = shape_terms(gpu, traffic, bytes_moved, sweep_bytes, blocks_per_sm, spill_bytes_per_thread, cluster)
    parts = predict_parts(terms, c)
    return ShapeEstimate(
        shape=tuple(shape), time_us=float(parts["time_us"]), t_dram_us=float(parts["t_dram"]) * 1e6,
        t_l2_us=float(parts["t_l2"]) * 1e6, t_issue_us=float(parts["t_issue"]) * 1e6,
        t_cta_us=float(parts["t_cta"]) * 1e6, duty=float(parts["duty"]), requested_bytes=traffic.bytes,
        dram_bytes=float(parts["dram_bytes"]), ctas=traffic.ctas,
        concurrent_ctas=int(min(traffic.ctas, blocks_per_sm * gpu.sm_count)), terms=terms)


def cluster_size(kernel: Kernel) -> int:
    """CTAs per cluster of ``kernel``'s entry: the ``.reqnctapercluster`` directive's product, else the launch
    knob ``cluster``, else 1."""
    fn = kernel.module.function(kernel.entry)
    for d in getattr(fn, "directives", ()):
        if getattr(d, "name", None) == "reqnctapercluster" and getattr(d, "values", ()):
            return max(1, math.prod(int(v) for v in d.values))
    return max(1, int(kernel.launch.knob("cluster", 1)))


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
    ptxas cache; calibration: a calibration JSON path (default ``evaluators/static_calibration.json``, the
    priors when absent). Deterministic: the same kernel always gets the same result (``eval_seconds`` aside).
    Raises ValueError for an unknown GPU, FileNotFoundError for a missing calibration file.
    """

    estimate = True

    def __init__(self, workload, gpu: GPUSpec | str | None = None, arch: str | None = None, processes: int | None = None,
                 cache_dir: str | None = None, calibration: str | None = None) -> None:
        self.workload = workload
        self.gpu = resolve_gpu(gpu)
        self.arch = arch or self.gpu.arch
        self.capacity = max(1, processes if processes is not None else min(4, os.cpu_count() or 1))
        self.cache_dir = cache_dir
        self.calibration: Calibration = load_calibration(calibration)
        self.model_version = self.calibration.version
        self._baseline: dict[tuple[int, ...], float] = {}
        self._lock = threading.Lock()

    def banner(self) -> str:
        """One paragraph for the run banner: what the numbers are and how well the model ranked recorded GPU
        runs it was not fitted on (``evaluators.fidelity``)."""
        from evaluators.fidelity import fidelity_line

        return (f"Static evaluator ({self.model_version}) on {self.gpu.name}: every time, GB/s and speedup is an "
                f"ESTIMATE from ptxas resources, occupancy, static traffic and a calibrated cost model, not a "
                f"measurement. {fidelity_line('static', self.model_version, workload=self.workload.name)}")

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
        cluster = cluster_size(kernel)
        consts = self.calibration.constants
        estimates = {
            s: estimate_shape(self.gpu, p.traffic[s], wl.bytes_moved(s),
                              wl.elements_per_cta_sweep(s, kernel.launch) * elt, occ.blocks_per_sm, spill, s,
                              cluster=cluster, constants=consts)
            for s in shapes
        }
        return _Analysis(p.compiled, ru, occ, p.traffic, estimates, p)

    def analyse(self, kernel: Kernel, shapes: list[tuple[int, ...]] | None = None) -> _Analysis:
        """The model's analysis of ``kernel`` at ``shapes`` (default the search shapes): compile result,
        resources, occupancy, traffic and ``ShapeEstimate`` (with the constant-free terms) per shape, and the
        front half's ``Prepared`` (features). Raises ``pipeline.Rejected`` or ``_NoEstimate`` (see
        ``failure_result``)."""
        return self._analyse(kernel, [tuple(int(v) for v in s) for s in (shapes or self.workload.search_shapes)])

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
            reason=f"estimate: static model {self.model_version} on {self.gpu.name} (no GPU measurement)",
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
            "model_version": self.model_version,
            "gpu": self.gpu.name,
            "arch": self.arch,
            "ptxas_seconds": a.compiled.seconds,
            "ptxas_cached": a.compiled.cached,
            "model": {
                str(list(s)): {
                    "t_dram_us": a.estimates[s].t_dram_us, "t_l2_us": a.estimates[s].t_l2_us,
                    "t_issue_us": a.estimates[s].t_issue_us, "t_cta_us": a.estimates[s].t_cta_us,
                    "duty": a.estimates[s].duty,
                    "requested_bytes": a.estimates[s].requested_bytes, "dram_bytes": a.estimates[s].dram_bytes,
                }
                for s in shapes
            },
        }

    def close(self) -> None:
        """Nothing to release (ptxas runs per call); present for the Evaluator protocol."""


class _NoEstimate(Exception):
    """The static traffic analysis could not model the kernel, so there is nothing to estimate with."""


def failure_result(e: Exception, start: float, prefix: str = "estimate: ") -> EvalResult:
    """The EvalResult of an analysis that raised ``e`` (``pipeline.Rejected``: its status; ``_NoEstimate``:
    skipped); ``start``: perf_counter at the evaluation's start; prefix: starts the reason. Re-raises any other
    exception."""
    if isinstance(e, Rejected):
        return e.result(estimate=True, eval_seconds=time.perf_counter() - start, prefix=prefix)
    if isinstance(e, _NoEstimate):
        return EvalResult(status=Status.SKIPPED, reason=f"{prefix}{e}", estimate=True,
                          eval_seconds=time.perf_counter() - start)
    raise e
