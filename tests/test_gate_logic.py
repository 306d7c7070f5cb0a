"""The correctness gate on the CPU: real RMSNorm launchers written in numpy, right and wrong in known ways."""

from __future__ import annotations

import numpy as np
import pytest

from evaluators.gpu.gate import (
    GUARD_ELEMENTS,
    allocate_poisoned,
    bitwise_equal,
    compare,
    gate_plan,
    poison_bits,
    run_gate,
)
from evaluators.types import Status
from evaluators.workloads.dtypes import from_float
from evaluators.workloads.rmsnorm import RMSNorm

SMALL = [(1, 192), (7, 760), (199, 1001)]


def rmsnorm_f32(x, w, eps=1e-6):
    """What a correct kernel computes: float32 sum of squares, rsqrt, scale, round to x's dtype."""
    xf = np.asarray(x, dtype=np.float32)
    r = 1.0 / np.sqrt((xf * xf).sum(axis=1, dtype=np.float32) / np.float32(xf.shape[1]) + np.float32(eps))
    return xf * r[:, None].astype(np.float32) * w


def correct(dtype):
    def launch(inputs, outputs, shape):
        outputs["y"][...] = from_float(rmsnorm_f32(inputs["x"], inputs["w"]), dtype)
    return launch


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_correct_kernel_passes_every_check(dtype):
    wl = RMSNorm(dtype)
    res = run_gate(wl, correct(dtype), seed=5, shapes=SMALL)
    assert res.status == Status.OK, res.reason
    assert len(res.checks) == 3 * len(wl.distributions)
    assert all(c.max_abs_err < wl.tolerance[0] for c in res.checks)


def test_partial_write_is_wrong_result_naming_shape():
    wl = RMSNorm("bf16")

    def half_rows(inputs, outputs, shape):
        full = from_float(rmsnorm_f32(inputs["x"], inputs["w"]), "bf16")
        outputs["y"][: shape[0] // 2 + 1] = full[: shape[0] // 2 + 1]  # rows beyond the middle never written

    res = run_gate(wl, half_rows, seed=1, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT
    assert "unwritten" in res.reason and "partial write" in res.reason and "7x760" in res.reason
    assert "max |err| inf" in res.reason


def test_single_nan_is_wrong_result():
    wl = RMSNorm("bf16")

    def one_nan(inputs, outputs, shape):
        y = rmsnorm_f32(inputs["x"], inputs["w"])
        y[-1, -1] = np.nan
        outputs["y"][...] = from_float(y, "bf16")

    res = run_gate(wl, one_nan, seed=2, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT
    assert "nan check failed" in res.reason and "1 of 192 elements of y are NaN" in res.reason


def test_small_error_beyond_tolerance_reports_max_error():
    wl = RMSNorm("fp32")

    def off(inputs, outputs, shape):
        outputs["y"][...] = (rmsnorm_f32(inputs["x"], inputs["w"]) * np.float32(1.01)).astype(np.float32)

    res = run_gate(wl, off, seed=3, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT and "correctness check failed" in res.reason
    assert res.checks[-1].max_abs_err > 1e-3


def test_nondeterministic_pair_fails():
    wl = RMSNorm("bf16")
    rng = np.random.default_rng(0)

    def noisy(inputs, outputs, shape):
        y = rmsnorm_f32(inputs["x"], inputs["w"])
        y *= np.float32(1) + np.float32(1e-3) * rng.standard_normal(y.shape).astype(np.float32)  # within tolerance
        outputs["y"][...] = from_float(y, "bf16")

    res = run_gate(wl, noisy, seed=4, shapes=SMALL)
    assert res.status == Status.NONDETERMINISTIC
    assert "determinism check failed" in res.reason and "two runs on the same inputs differ" in res.reason


def test_modified_input_fails():
    wl = RMSNorm("bf16")

    def clobber(inputs, outputs, shape):
        correct("bf16")(inputs, outputs, shape)
        inputs["x"][0, 0] = inputs["x"][0, 0] + 1  # a kernel that uses x as scratch

    res = run_gate(wl, clobber, seed=6, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT
    assert "inputs_unchanged check failed" in res.reason and "['x']" in res.reason


def test_out_of_bounds_store_hits_guard():
    wl = RMSNorm("bf16")

    def oob(inputs, outputs, shape):
        correct("bf16")(inputs, outputs, shape)
        base = outputs["y"].base  # the guarded allocation behind the view
        base.view(np.uint16)[GUARD_ELEMENTS + outputs["y"].size] = 0  # one element past the end

    res = run_gate(wl, oob, seed=7, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT and "bounds check failed" in res.reason


def test_right_only_at_one_shape_fails_at_another():
    wl = RMSNorm("bf16")

    def tuned_for_192(inputs, outputs, shape):
        x = np.asarray(inputs["x"], dtype=np.float32)[:, :192]
        r = 1.0 / np.sqrt((x * x).sum(axis=1) / 192 + 1e-6)  # assumes N == 192
        outputs["y"][...] = from_float(np.asarray(inputs["x"], np.float32) * r[:, None] * inputs["w"], "bf16")

    res = run_gate(wl, tuned_for_192, seed=8, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT and "7x760" in res.reason


def test_poison_patterns_are_nan_and_compare_counts():
    for dtype in ("bf16", "fp16", "fp32"):
        for p in (0, 1):
            buf = allocate_poisoned(RMSNorm(dtype).outputs((3, 5))[0], p)
            assert np.isnan(np.asarray(buf.view, dtype=np.float64)).all()
            assert buf.guards_intact(np)
    assert poison_bits("fp32", 1) == 0xFFFFFFFF and poison_bits("bf16", 0) == 0x7FA5
    ref = np.ones((2, 3))
    out = np.ones((2, 3), dtype=np.float32)
    out[1, 2] = 1.5
    c = compare(out, ref, "fp32", 1e-4, 1e-3)
    assert (c.n_bad, c.worst, c.got, c.want) == (1, (1, 2), 1.5, 1.0)
    assert c.max_abs_err == pytest.approx(0.5)
    assert bitwise_equal(out, out.copy()) and not bitwise_equal(out, ref.astype(np.float32))


def test_gate_plan_fresh_seeds_and_rotation():
    wl = RMSNorm("bf16")
    plan = gate_plan(wl, seed=10)
    seeds = [s for _, _, s in plan]
    assert len(set(seeds)) == len(seeds), "every check draws fresh inputs"
    big = [(shape, d) for shape, d, _ in plan if shape == (32768, 8192)]
    assert len(big) == 1
    assert gate_plan(wl, seed=11) != plan
    assert {d for _, d, _ in plan} == set(wl.distributions)
