"""The correctness gate on the CPU: real RMSNorm launchers written in numpy, right and wrong in known ways."""

from __future__ import annotations

import numpy as np
import pytest

import evaluators.gpu.gate as gate
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
from workloads.dtypes import from_float
from workloads.rmsnorm import RMSNorm

SMALL = [(1, 192), (7, 760), (199, 1001)]


def rmsnorm_f32(x, w, eps=1e-6):
    """What a correct kernel computes: float32 sum of squares, rsqrt, scale, round to x's dtype."""
    xf = np.asarray(x, dtype=np.float32)
    r = 1.0 / np.sqrt((xf * xf).sum(axis=1, dtype=np.float32) / np.float32(xf.shape[1]) + np.float32(eps))
    return xf * r[:, None].astype(np.float32) * w


def eps_of(params):
    """The eps a launch was given (the gate draws it per check)."""
    return (params or {}).get("eps", 1e-6)


def correct(dtype):
    def launch(inputs, outputs, shape, params=None):
        outputs["y"][...] = from_float(rmsnorm_f32(inputs["x"], inputs["w"], eps_of(params)), dtype)
    return launch


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_correct_kernel_passes_every_check(dtype):
    wl = RMSNorm(dtype)
    res = run_gate(wl, correct(dtype), seed=5, shapes=SMALL)
    assert res.status == Status.OK, res.reason
    assert len(res.checks) == len(gate_plan(wl, 5, SMALL)) == 3 * gate.DISTRIBUTIONS_PER_SHAPE
    assert {c.distribution for c in res.checks} == set(wl.distributions)  # three shapes cover all five
    assert all(c.max_abs_err < wl.tolerance[0] for c in res.checks)


def test_partial_write_is_wrong_result_naming_shape():
    wl = RMSNorm("bf16")

    def half_rows(inputs, outputs, shape, params=None):
        full = from_float(rmsnorm_f32(inputs["x"], inputs["w"], eps_of(params)), "bf16")
        outputs["y"][: shape[0] // 2 + 1] = full[: shape[0] // 2 + 1]  # rows beyond the middle never written

    res = run_gate(wl, half_rows, seed=1, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT
    assert "unwritten" in res.reason and "partial write" in res.reason and "7x760" in res.reason
    assert "max |err| inf" in res.reason


def test_single_nan_is_wrong_result():
    wl = RMSNorm("bf16")

    def one_nan(inputs, outputs, shape, params=None):
        y = rmsnorm_f32(inputs["x"], inputs["w"], eps_of(params))
        y[-1, -1] = np.nan
        outputs["y"][...] = from_float(y, "bf16")

    res = run_gate(wl, one_nan, seed=2, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT
    assert "nan check failed" in res.reason and "1 of 192 elements of y are NaN" in res.reason


def test_small_error_beyond_tolerance_reports_max_error():
    wl = RMSNorm("fp32")

    def off(inputs, outputs, shape, params=None):
        outputs["y"][...] = (rmsnorm_f32(inputs["x"], inputs["w"], eps_of(params)) * np.float32(1.01)).astype(np.float32)

    res = run_gate(wl, off, seed=3, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT and "correctness check failed" in res.reason
    assert res.checks[-1].max_abs_err > 1e-3


def test_nondeterministic_pair_fails():
    wl = RMSNorm("bf16")
    rng = np.random.default_rng(0)

    def noisy(inputs, outputs, shape, params=None):
        y = rmsnorm_f32(inputs["x"], inputs["w"], eps_of(params))
        y *= np.float32(1) + np.float32(1e-3) * rng.standard_normal(y.shape).astype(np.float32)  # within tolerance
        outputs["y"][...] = from_float(y, "bf16")

    res = run_gate(wl, noisy, seed=4, shapes=SMALL)
    assert res.status == Status.NONDETERMINISTIC
    assert "determinism check failed" in res.reason and "two runs on the same inputs differ" in res.reason


def test_modified_input_fails():
    wl = RMSNorm("bf16")

    def clobber(inputs, outputs, shape, params=None):
        correct("bf16")(inputs, outputs, shape, params)
        inputs["x"][0, 0] = inputs["x"][0, 0] + 1  # a kernel that uses x as scratch

    res = run_gate(wl, clobber, seed=6, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT
    assert "inputs_unchanged check failed" in res.reason and "['x']" in res.reason


def test_out_of_bounds_store_hits_guard():
    wl = RMSNorm("bf16")

    def oob(inputs, outputs, shape, params=None):
        correct("bf16")(inputs, outputs, shape, params)
        base = outputs["y"].base  # the guarded allocation behind the view
        base.view(np.uint16)[GUARD_ELEMENTS + outputs["y"].size] = 0  # one element past the end

    res = run_gate(wl, oob, seed=7, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT and "bounds check failed" in res.reason


def test_right_only_at_one_shape_fails_at_another():
    wl = RMSNorm("bf16")

    def tuned_for_192(inputs, outputs, shape, params=None):
        x = np.asarray(inputs["x"], dtype=np.float32)[:, :192]
        r = 1.0 / np.sqrt((x * x).sum(axis=1) / 192 + eps_of(params))  # assumes N == 192
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


def _element_offset(view):
    """Index of ``view``'s first element inside the allocation behind it (``view.base``)."""
    base = view.base
    return (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // view.itemsize


def test_batch_names_the_one_failing_check_and_stops_there():
    wl = RMSNorm("bf16")
    plan = gate_plan(wl, seed=12, shapes=SMALL)

    def wrong_for_large_at_199(inputs, outputs, shape, params=None):
        y = rmsnorm_f32(inputs["x"], inputs["w"], eps_of(params))
        if shape == (199, 1001) and np.abs(np.asarray(inputs["x"], np.float32)).max() > 1e4:
            y[5, 7] += np.float32(1e3)  # one element, only under the "large" distribution at one shape
        outputs["y"][...] = from_float(y, "bf16")

    res = run_gate(wl, wrong_for_large_at_199, seed=12, shapes=SMALL)
    bad = next(i for i, (shape, d, _) in enumerate(plan) if shape == (199, 1001) and d == "large")
    assert res.status == Status.WRONG_RESULT and "correctness check failed" in res.reason
    assert "1 of 199199 elements of y out of tolerance" in res.reason and "199x1001 (large inputs" in res.reason
    assert "index (5, 7)" in res.reason
    assert len(res.checks) == bad + 1 and res.checks[-1].failed == "correctness"
    assert all(c.failed is None for c in res.checks[:-1])


@pytest.mark.parametrize("where", ["after", "before"])
def test_batch_bounds_failure_names_the_shape_that_overflowed(where):
    wl = RMSNorm("bf16")

    def overflow_at_7x760(inputs, outputs, shape, params=None):
        correct("bf16")(inputs, outputs, shape, params)
        if shape == (7, 760):
            y = outputs["y"]
            i = _element_offset(y) + (y.size if where == "after" else -1)
            y.base.view(np.uint16)[i] = 0

    res = run_gate(wl, overflow_at_7x760, seed=13, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT and "bounds check failed" in res.reason
    assert "7x760" in res.reason  # the one-by-one re-run after the batch failure attributes it exactly


def test_batch_and_one_by_one_judge_the_same_inputs_alike():
    from evaluators.gpu.gate import check_batch, check_shape

    wl = RMSNorm("fp16")
    plan = gate_plan(wl, seed=14, shapes=SMALL)
    batch = check_batch(wl, correct("fp16"), plan)
    single = [check_shape(wl, correct("fp16"), *p) for p in plan]
    assert [c.failed for c in batch] == [None] * len(plan) == [c.failed for c in single]
    assert [c.max_abs_err for c in batch] == pytest.approx([c.max_abs_err for c in single], rel=0, abs=0)
    # fp16 rounding everywhere except the all-zero input of (1, 192) under zero_rows; nothing unwritten (inf)
    assert [c.max_abs_err == 0 for c in batch] == [c.shape == (1, 192) and c.distribution in ("zero_rows", "nonfinite") for c in batch]
    assert max(c.max_abs_err for c in batch) < np.inf


def test_batch_determinism_failure_only_in_second_run():
    wl = RMSNorm("bf16")
    calls = {"n": 0}

    def drifts(inputs, outputs, shape, params=None):
        calls["n"] += 1
        y = rmsnorm_f32(inputs["x"], inputs["w"], eps_of(params))
        if shape == (199, 192) and calls["n"] > len(gate_plan(wl, 15, SMALL_192)):
            y[3, 3] = np.nextafter(y[3, 3], np.float32(np.inf)) * np.float32(1.01)  # still within tolerance
        outputs["y"][...] = from_float(y, "bf16")

    res = run_gate(wl, drifts, seed=15, shapes=SMALL_192)
    assert res.status == Status.NONDETERMINISTIC and "199x192" in res.reason
    assert "differ in 1 of 38208 elements" in res.reason


SMALL_192 = [(1, 192), (199, 192)]


def test_large_checks_run_one_by_one_after_the_batch(monkeypatch):
    import evaluators.gpu.gate as gate

    monkeypatch.setattr(gate, "SMALL_CHECK_ELEMENTS", 192 * 7)  # (1, 192) and (7, 192) batch, (199, 192) alone
    wl = RMSNorm("bf16")
    seen = []

    def record(inputs, outputs, shape, params=None):
        seen.append(shape)
        correct("bf16")(inputs, outputs, shape, params)

    res = gate.run_gate(wl, record, seed=16, shapes=[(1, 192), (199, 192), (7, 192)])
    d = gate.DISTRIBUTIONS_PER_SHAPE
    assert res.status == Status.OK and len(res.checks) == d * 2 + 1
    # batch: DISTRIBUTIONS_PER_SHAPE checks at each small shape, in plan order in each of runs 1-3, then run 4 with
    # two launches per check; then the large check's two runs
    assert seen[:2 * d] == [(1, 192)] * d + [(7, 192)] * d and seen[10 * d:] == [(199, 192)] * 2
    assert seen[6 * d:8 * d] == [(1, 192)] * (2 * d)  # run 4: each check twice in a row


def test_correctly_rounded_bf16_passes_where_atol_rtol_alone_would_not():
    """Seen on the H200: 1 of 268M elements rejected, got 16.125 for 16.0706 (the correctly rounded bf16 value;
    its error 0.054 is under half the bf16 spacing at 16, 0.0625, but over atol 0.03 + rtol 1e-3 * 16)."""
    from workloads.dtypes import half_ulp

    ref = np.array([[16.0706, 1.0, 0.0, -3.3]])
    assert half_ulp(ref, "bf16").tolist() == [[0.0625, 2.0**-8, 0.0, 2.0**-7]]
    assert half_ulp(np.array([1.0]), "fp32")[0] == 2.0**-24 and half_ulp(np.array([8.5]), "fp16")[0] == 2.0**-8
    out = from_float(ref.astype(np.float32), "bf16")
    assert float(out[0, 0]) == 16.125
    c = compare(out, ref, "bf16", 3e-2, 1e-3)
    assert c.ok and c.max_abs_err == pytest.approx(0.0544, abs=1e-6)
    off_by_one_ulp = out.copy()
    off_by_one_ulp[0, 0] = 16.25  # a whole bf16 spacing past the right value: still wrong
    assert compare(off_by_one_ulp, ref, "bf16", 3e-2, 1e-3).n_bad == 1


def test_batch_failure_verdict_is_the_first_check_in_plan_order():
    """A value error at the first check and an out-of-bounds store at a later one: the batch sees the store first
    (bounds before values), the one-by-one re-run reports the first check, as check_shape in plan order would."""
    wl = RMSNorm("bf16")

    def two_defects(inputs, outputs, shape, params=None):
        y = rmsnorm_f32(inputs["x"], inputs["w"], eps_of(params))
        if shape == (1, 192):
            y[0, 0] += np.float32(5)
        outputs["y"][...] = from_float(y, "bf16")
        if shape == (199, 1001):
            out = outputs["y"]
            out.base.view(np.uint16)[_element_offset(out) + out.size] = 0

    res = run_gate(wl, two_defects, seed=17, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT and "correctness check failed" in res.reason and "1x192" in res.reason
    assert len(res.checks) == 1


def test_store_into_padding_between_inputs_is_caught():
    wl = RMSNorm("bf16")

    def past_x(inputs, outputs, shape, params=None):
        correct("bf16")(inputs, outputs, shape, params)
        x = inputs["x"]
        if shape == (7, 760) and x.base is not None:  # in the batch: 10640 bytes of x, padded to 10752
            x.base[_element_offset(x) * x.itemsize + x.nbytes] = 1

    res = run_gate(wl, past_x, seed=18, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT and "bounds check failed" in res.reason
    assert "past an input buffer" in res.reason and "7x760" in res.reason and "re-run one at a time" in res.reason
