"""Helpers for CPU tests of timed launches: ``drive`` runs a ``benchmark.TimedCall`` in the order
``benchmark.time_interleaved`` runs it, without CUDA events; ``rms_honest`` is a correct bf16 RMSNorm launch
on numpy arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

from workloads.dtypes import from_float, to_float64


def drive(call: Any, repeats: int, warmup: int = 3, kernel: Any = None) -> None:
    """Warm-ups (``prepare(-1 - k)``, ``launch()``), then ``repeats`` timed launches (``prepare(r)``,
    ``launch()``, ``after(r)``): time_interleaved's order for one callable. kernel: when given, its ``timed``
    attribute is set to ``r`` before timed launch ``r`` (an emulated kernel that times itself)."""
    for k in range(warmup):
        call.prepare(-1 - k)
        call.launch()
    for r in range(repeats):
        if kernel is not None:
            kernel.timed = r
        call.prepare(r)
        call.launch()
        call.after(r)


def rms_honest(inputs: dict[str, Any], outputs: dict[str, Any], shape: tuple[int, ...],
               params: dict[str, float] | None = None) -> None:
    """RMSNorm of bf16 ``inputs["x"]`` (M, N) with float32 ``inputs["w"]`` (N,) into ``outputs["y"]`` (bf16
    storage), computed in float32 as a kernel does and rounded to nearest even; eps from ``params`` (1e-6)."""
    x = to_float64(inputs["x"], "bf16").astype(np.float32)
    eps = np.float32((params or {}).get("eps", 1e-6))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        r = np.float32(1.0) / np.sqrt((x * x).mean(axis=1, dtype=np.float32) + eps)
        outputs["y"][...] = from_float(x * r[:, None] * np.asarray(inputs["w"], dtype=np.float32), "bf16")
