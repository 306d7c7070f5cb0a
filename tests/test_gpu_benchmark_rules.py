"""Roofline rule and the pool's objective (pure functions; the timing itself runs on the GPU)."""

from __future__ import annotations

import pytest

from evaluators.gpu.benchmark import ROOFLINE_SLACK, median_us, too_fast
from evaluators.gpu.pool import GPUPool
from evaluators.types import ShapeResult
from workloads.rmsnorm import RMSNorm


def test_too_fast_is_relative_to_measured_copy():
    assert not too_fast(4000.0, 4153.0)
    assert not too_fast(4153.0 * ROOFLINE_SLACK * 0.999, 4153.0)
    assert too_fast(4153.0 * ROOFLINE_SLACK * 1.001, 4153.0)
    assert not too_fast(1e9, 0.0), "no copy measurement, no verdict"
    assert median_us([5.0, 1.0, 3.0, 100.0, 2.0]) == 3.0


def test_objective_prefers_primary_then_naive():
    pool = GPUPool.__new__(GPUPool)  # only the objective rule is exercised: no workers are started
    pool.workload = RMSNorm("bf16")
    a = ShapeResult((1, 2), "bf16", 10.0, 100.0, 0.5, speedups={"torch": 2.0, "naive": 8.0})
    b = ShapeResult((1, 4), "bf16", 10.0, 100.0, 0.25, speedups={"torch": 0.5, "naive": 2.0})
    assert pool._objective([a, b]) == (pytest.approx(1.0), "torch")
    a.speedups.pop("torch")
    assert pool._objective([a, b]) == (pytest.approx(4.0), "naive")
    a.speedups.clear()
    assert pool._objective([a, b])[1] == "copy_roofline"
