"""On a GPU: the fused CuPy kernels compute what the numpy formulas compute."""

from __future__ import annotations

import numpy as np
import pytest

from evaluators.gpu.gate import bitwise_equal, compare, gate_plan, run_gate
from evaluators.types import Status
from workloads.dtypes import bits_dtype, from_float
from workloads.fused import count_differ
from workloads.rmsnorm import RMSNorm

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


def test_bf16_rounding_matches_ml_dtypes(cp):
    rng = np.random.default_rng(0)
    f = np.concatenate([rng.standard_normal(100_000).astype(np.float32) * 1e3,
                        np.array([0.0, -0.0, 1.0, 1.00390625, 1.01171875, 65504.0, 3e38, -3e38, 1e-40],
                                 dtype=np.float32)])
    want = from_float(f, "bf16").view(np.uint16)
    got = from_float(cp.asarray(f), "bf16", cp).get()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("dist", ["large", "tiny", "nonfinite"])
def test_reference_matches_numpy(cp, dtype, dist):
    """RMSNorm's reference kernel (workloads/rmsnorm_check.py), every row and sampled rows, against numpy."""
    wl = RMSNorm(dtype)
    host = wl.make_inputs((37, 1001), 3, dist)
    dev = {k: cp.asarray(v.view(bits_dtype(dtype)) if dtype == "bf16" and k == "x" else v) for k, v in host.items()}
    want = wl.reference(host, np, {"eps": 1e-3})["y"]
    got = wl.reference(dev, cp, {"eps": 1e-3})["y"].get()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)  # NaN where numpy has NaN
    rows = np.array([0, 1, 5, 36])
    part = wl.reference_rows(dev, cp.asarray(rows), cp, {"eps": 1e-3})["y"].get()
    np.testing.assert_allclose(part, want[rows], rtol=1e-12, atol=0)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("dist", ["normal", "tiny", "nonfinite", "zero_rows"])
def test_fused_row_check_counts_what_numpy_counts(cp, dtype, dist):
    """The checked timed launches' fused reference-and-compare (RMSNorm.count_bad_rows) against reference_rows +
    gate.compare on the host, with a correct output and one with wrong elements."""
    wl = RMSNorm(dtype)
    atol, rtol = wl.tolerance
    host = wl.make_inputs((300, 4099), 6, dist)
    dev = {k: cp.asarray(v.view(bits_dtype(dtype)) if dtype == "bf16" and k == "x" else v) for k, v in host.items()}
    rows = np.sort(np.random.default_rng(1).choice(300, 100, replace=False))
    for eps in (1e-6, 1e-3):
        ref = wl.reference_rows(host, rows, np, {"eps": eps})["y"]
        good = from_float(ref, dtype)
        bad = good.copy()
        bits = bad.view(bits_dtype(dtype))
        bits[3, :40] ^= bits_dtype(dtype).type(1 << (8 * bits_dtype(dtype).itemsize - 1))  # sign flips
        bits[7, 5] = np.iinfo(bits_dtype(dtype)).max  # a NaN
        for arr in (good, bad):
            want = compare(arr, ref, dtype, atol, rtol, np).n_bad
            counter = cp.zeros(1, dtype=cp.uint64)
            got = cp.asarray(arr.view(bits_dtype(dtype)) if dtype == "bf16" else arr)
            assert wl.count_bad_rows(dev, cp.asarray(rows), {"y": got}, counter, cp, {"eps": eps})
            assert int(counter[0]) == want
        assert want > 0


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_compare_fast_path_agrees_with_numpy(cp, dtype):
    wl = RMSNorm(dtype)
    atol, rtol = wl.tolerance
    host = wl.make_inputs((64, 512), 5)
    ref = wl.reference(host)["y"]
    good = from_float(ref.astype(np.float32), dtype)
    bad = good.copy()
    bits = bad.view(bits_dtype(dtype))
    bits[3, 4] = np.iinfo(bits_dtype(dtype)).max  # all ones: NaN (the second poison pattern)
    bad[5, 6] = from_float(np.array([ref[5, 6] + 10 * atol + 1], np.float32), dtype)[0]
    for arr in (good, bad):
        want = compare(arr, ref, dtype, atol, rtol, np, pattern=1)
        dev = cp.asarray(arr.view(bits_dtype(dtype)) if dtype == "bf16" else arr)
        got = compare(dev, cp.asarray(ref), dtype, atol, rtol, cp, pattern=1)
        assert (got.ok, got.n_bad, got.n_nan, got.n_poison) == (want.ok, want.n_bad, want.n_nan, want.n_poison)
        assert got.max_abs_err == pytest.approx(want.max_abs_err, rel=1e-12)
    for n in (1000, 8192 * 3, 8192 * 3 + 5):  # the tail alone, whole rows of the two-level reduction, both
        a = cp.arange(n, dtype=cp.uint16)
        b = a.copy()
        assert bitwise_equal(a, b, cp)
        b[n - 1] = 7
        assert not bitwise_equal(a, b, cp)
        b[n - 1] = a[n - 1]
        b[0] = 9
        assert not bitwise_equal(a, b, cp)
        assert count_differ(a, b) == 1 and count_differ(a, a) == 0


def test_device_inputs_follow_the_distributions(cp):
    wl = RMSNorm("bf16")
    x = wl.make_inputs((4096, 64), 9, "zero_rows", cp)["x"]
    zero = (x == 0).all(axis=1).get()  # bf16 bits: +0.0 is 0x0000
    assert zero[0] and 0.09 < zero.mean() < 0.16
    a = wl.make_inputs((64, 64), 9, "normal", cp)["x"]
    b = wl.make_inputs((64, 64), 9, "normal", cp)["x"]
    c = wl.make_inputs((64, 64), 10, "normal", cp)["x"]
    assert bitwise_equal(a, b, cp) and not bitwise_equal(a, c, cp)


def test_batched_device_inputs_keep_each_checks_distribution(cp):
    """Workload.make_inputs_many on the device (the gate batch's inputs): per check the NaN and Inf positions,
    the zero rows and the zeros of w of make_inputs for its seed, and the scale of its distribution."""
    from evaluators.gpu.gate import SMALL_CHECK_ELEMENTS
    from workloads.rmsnorm import LARGE_SCALE, TINY_SCALE
    from workloads.rmsnorm_check import element_value_host

    wl = RMSNorm("bf16")
    plan = [p for p in gate_plan(wl, 4) if int(np.prod(p[0])) <= SMALL_CHECK_ELEMENTS]
    for (shape, dist, seed), got in zip(plan, wl.make_inputs_many(plan, cp)):
        one = wl.make_inputs(shape, seed, dist, cp)
        xb, x1 = (element_value_host(a.get(), "bf16") for a in (got["x"], one["x"]))
        assert xb.shape == shape and np.array_equal(np.isnan(xb), np.isnan(x1))
        assert np.array_equal(np.isinf(xb), np.isinf(x1)) and np.array_equal(xb[np.isinf(xb)], x1[np.isinf(x1)])
        assert np.array_equal((xb == 0).all(axis=1), (x1 == 0).all(axis=1))
        assert np.array_equal(got["w"].get() == 0, one["w"].get() == 0)
        finite = xb[np.isfinite(xb) & (xb != 0)]
        if finite.size >= 500:
            scale = {"large": LARGE_SCALE["bf16"], "tiny": TINY_SCALE}.get(dist, 1.0)
            assert 0.8 < finite.std() / scale < 1.2, (shape, dist)


def test_gate_on_device_with_a_cupy_launcher(cp):
    """The batched gate with device arrays: a right launcher passes, one that skips a row fails at that shape."""
    wl = RMSNorm("fp32")

    def right(inputs, outputs, shape, params):
        x = inputs["x"]
        eps = cp.float32(params["eps"])
        outputs["y"][...] = x / cp.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * inputs["w"]

    def skips_last_row(inputs, outputs, shape, params):
        x = inputs["x"][:-1]
        eps = cp.float32(params["eps"])
        outputs["y"][:-1] = x / cp.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * inputs["w"]

    shapes = [(1, 192), (7, 760), (199, 1001)]
    ok = run_gate(wl, right, 1, shapes, cp)
    assert ok.status == Status.OK and len(ok.checks) == len(gate_plan(wl, 1, shapes)), ok.reason
    bad = run_gate(wl, skips_last_row, 1, shapes, cp)
    assert bad.status == Status.WRONG_RESULT and "unwritten" in bad.reason and "1x192" in bad.reason


def test_half_ulp_allowance_matches_numpy(cp):
    ref = np.array([16.0706, 16.2, 1.0, 0.0, -3.3, 31.9, 1e-3] * 4000)
    out = from_float(ref.astype(np.float32), "bf16")
    out[1::7] = from_float(np.array([16.5], np.float32), "bf16")[0]  # two spacings past 16.25: wrong
    want = compare(out, ref, "bf16", 3e-2, 1e-3, np)
    got = compare(cp.asarray(out.view(np.uint16)), cp.asarray(ref), "bf16", 3e-2, 1e-3, cp)
    assert (got.n_bad, want.n_bad) == (4000, 4000)
    assert got.max_abs_err == pytest.approx(want.max_abs_err)


def test_nonfinite_comparator_on_device_matches_numpy(cp):
    from evaluators.gpu.gate import poison_bits

    ref = np.array([1.0, np.nan, 0.0, 2.0, np.inf] * 1000)
    good = from_float(np.array([1.0, np.nan, 0.0, 2.0, np.inf] * 1000, np.float32), "bf16")
    bad = good.copy()
    bad[2::5] = from_float(np.array([np.nan], np.float32), "bf16")[0]  # NaN where the reference is 0
    poisoned = good.copy()
    poisoned.view(np.uint16)[1::5] = poison_bits("bf16", 0)  # never written where the reference is NaN
    for out in (good, bad, poisoned):
        want = compare(out, ref, "bf16", 3e-2, 1e-3, np, pattern=0)
        got = compare(cp.asarray(out.view(np.uint16)), cp.asarray(ref), "bf16", 3e-2, 1e-3, cp, pattern=0)
        assert got.ok == want.ok
    assert compare(cp.asarray(good.view(np.uint16)), cp.asarray(ref), "bf16", 3e-2, 1e-3, cp).max_abs_err == 0.0


def test_random_finite_fill_and_fingerprint(cp):
    from workloads import fused

    for dtype, dt in (("bf16", cp.uint16), ("fp16", cp.float16), ("fp32", cp.float32)):
        a = cp.empty(100_003, dtype=dt)
        fused.fill_random_finite(a, dtype, 7)
        b = cp.empty_like(a)
        fused.fill_random_finite(b, dtype, 8)
        vals = (a.astype(cp.uint32) << 16).view(cp.float32) if dtype == "bf16" else a.astype(cp.float32)
        assert bool(cp.isfinite(vals).all()) and float(cp.abs(vals).max()) < 2.0
        assert int((a.view(cp.uint8) != b.view(cp.uint8)).sum()) > 100_000  # another seed, other values
    x = cp.arange(1 << 20, dtype=cp.uint32).view(cp.uint8)[:-3]  # a tail that is no whole word
    f0 = fused.fingerprint(x)
    y = x.copy()
    assert int(fused.fingerprint(y)[0]) == int(f0[0])
    y[12345] ^= 1
    assert int(fused.fingerprint(y)[0]) != int(f0[0])
    z = x.copy()
    z[-1] ^= 0x80  # in the tail
    assert int(fused.fingerprint(z)[0]) != int(f0[0])
