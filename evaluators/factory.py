"""make_evaluator: the GPU pool where a GPU is visible, the static (estimating) evaluator elsewhere."""

from __future__ import annotations

import sys
from typing import Any

from evaluators.types import Evaluator
from workloads.base import Workload

KINDS = ("auto", "gpu", "static", "replay")

STATIC_BANNER = ("No GPU visible: evaluating with the static evaluator. Every result (time, GB/s, speedup) is an "
                 "ESTIMATE from ptxas resources, occupancy and a roofline model, not a measurement.")

# Options only the GPU pool understands; dropped (not passed) when auto falls back to the static evaluator.
GPU_ONLY = {"devices", "shapes", "gate", "gate_shapes", "timeout_s", "startup_timeout_s", "warmup", "repeats",
            "baselines", "baseline_names", "naive_baseline", "check_output", "seed", "objective", "gate_schedule",
            "fault_check", "timed_checks", "sanitize_elites", "sanitizer_tools", "sanitizer_timeout_s",
            "sanitizer_timed_tools"}


def make_evaluator(kind: str, workload: Workload, *, banner: bool = True, **options: Any) -> Evaluator:
    """Build the evaluator ``kind`` for ``workload``.

    kind: ``"gpu"`` (GPUPool over every visible GPU; NoGPU if none), ``"static"`` (StaticEvaluator, results
    labelled estimates), ``"replay"`` (ReplayEvaluator over recorded runs; needs ``stores=[...]``) or ``"auto"`` (gpu when CuPy sees a GPU, else static, printing STATIC_BANNER to stderr
    when ``banner``). options: keyword arguments of the chosen evaluator (GPUPool's or StaticEvaluator's);
    GPU-only options are ignored by the static evaluator when ``auto`` falls back.
    Raises ValueError for an unknown kind.
    """
    if kind not in KINDS:
        raise ValueError(f"evaluator kind must be one of {KINDS}, got {kind!r}")
    if kind == "auto":
        from evaluators.gpu.devices import gpu_count

        kind = "gpu" if gpu_count() > 0 else "static"
        if kind == "static":
            options = {k: v for k, v in options.items() if k not in GPU_ONLY}
            if banner:
                print(f"[ptxforge] {STATIC_BANNER}", file=sys.stderr)
    if kind == "gpu":
        from evaluators.gpu.pool import GPUPool

        return GPUPool(workload, **options)
    if kind == "replay":
        from evaluators.replay import ReplayEvaluator

        return ReplayEvaluator(workload, **{k: v for k, v in options.items() if k not in GPU_ONLY})
    from evaluators.static import StaticEvaluator

    return StaticEvaluator(workload, **{k: v for k, v in options.items() if k not in GPU_ONLY})
