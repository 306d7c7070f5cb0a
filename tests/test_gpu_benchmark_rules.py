"""Roofline rule and the pool's objective (pure functions; the timing itself runs on the GPU)."""

from __future__ import annotations

import pytest

from evaluators.gpu.benchmark import ROOFLINE_SLACK, median_us, too_fast
from evaluators.types import ShapeResult


def test_too_fast_is_relative_to_measured_copy():
    assert not too_fast(4000.0, 4153.0)
    assert not too_fast(4153.0 * ROOFLINE_SLACK * 0.999, 4153.0)
    assert too_fast(4153.0 * ROOFLINE_SLACK * 1.001, 4153.0)
    assert not too_fast(1e9, 0.0), "no copy measurement, no verdict"
    assert median_us([5.0, 1.0, 3.0, 100.0, 2.0]) == 3.0


def test_objective_prefers_primary_then_naive():
    """With objective.baseline=torch the pool's objective is the speedup over eager torch, then over the naive seed
    where torch did not run, then the copy-roofline fraction (evaluators.objective)."""
    from evaluators.objective import ObjectiveSpec, evaluate_objective

    spec = ObjectiveSpec(baseline="torch")
    a = ShapeResult((1, 2), "bf16", 10.0, 100.0, 0.5, baseline_us={"torch": 20.0, "naive": 80.0})
    b = ShapeResult((1, 4), "bf16", 10.0, 100.0, 0.25, baseline_us={"torch": 5.0, "naive": 20.0})
    ov = evaluate_objective([a, b], spec)
    assert (ov.value, ov.reference) == (pytest.approx(1.0), {"1x2": "torch", "1x4": "torch"})
    a.baseline_us.pop("torch")
    ov = evaluate_objective([a, b], spec)
    assert ov.value == pytest.approx((8.0 * 0.5) ** 0.5) and ov.reference["1x2"] == "naive"
    a.baseline_us.clear()
    assert evaluate_objective([a, b], spec).name == "copy_roofline"
    assert ObjectiveSpec.from_config(None).baseline == "best"  # what a GPUPool built without one uses
