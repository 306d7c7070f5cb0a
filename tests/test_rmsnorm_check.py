"""RMSNorm's fused reference-and-compare of sampled rows (workloads/rmsnorm_check.py) on the CPU: the numpy twin
against the independent host path (``RMSNorm.reference`` + ``gate.compare``) on NaN/Inf rows, tiny rows, zero rows
and every drawn eps; the CUDA source's ``__host__ __device__`` arithmetic compiled by nvcc for the host and for
sm_90 and compared with the twin element by element and row by row."""

from __future__ import annotations

import shutil
import struct
import subprocess

import numpy as np
import pytest

from evaluators.gpu.gate import compare
from workloads.dtypes import from_float, to_float64
from workloads.elements import MANTISSA_BITS
from workloads.rmsnorm import EPS_DRAWS, RMSNorm
from workloads.rmsnorm_check import (
    HOST_TWINS,
    KIND,
    SOURCE,
    count_bad_rows,
    count_bad_rows_host,
    element_bad_host,
    element_value_host,
    reference,
    reference_rows_host,
)

BITS = {"bf16": np.uint16, "fp16": np.uint16, "fp32": np.uint32}


def host_case(dtype: str, dist: str, shape=(199, 760), seed=3, eps=1e-6):
    """(x bits, w, rows, the correct output's rows as bits, eps as the kernel gets it, the workload)."""
    wl = RMSNorm(dtype)
    inputs = wl.make_inputs(shape, seed, dist)
    params = {"eps": eps}
    ref = wl.reference(inputs, np, params)["y"]
    y = from_float(ref, dtype, np)
    rows = np.sort(np.random.default_rng(seed).choice(shape[0], size=min(64, shape[0]), replace=False))
    x_bits = np.asarray(inputs["x"]).view(BITS[dtype])
    return x_bits, inputs["w"], rows, np.asarray(y)[rows].view(BITS[dtype]).copy(), wl._eps(params), wl, inputs


def generic_count(wl, inputs, rows, got_bits, eps, dtype):
    """What verify_checked's generic path counts: reference_rows + gate.compare."""
    ref = wl.reference_rows(inputs, rows, np, {"eps": eps})["y"]
    got = got_bits.view(np.asarray(inputs["x"]).dtype)
    return compare(got, ref, dtype, *wl.tolerance).n_bad


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("dist", RMSNorm.distributions)
@pytest.mark.parametrize("eps", EPS_DRAWS)
def test_twin_counts_what_the_reference_and_compare_count(dtype, dist, eps):
    x, w, rows, good, e, wl, inputs = host_case(dtype, dist, eps=eps)
    atol, rtol = wl.tolerance
    assert count_bad_rows_host(x, w, rows, good, e, dtype, atol, rtol) == 0
    assert generic_count(wl, inputs, rows, good, eps, dtype) == 0
    bad = good.copy()
    rng = np.random.default_rng(7)
    picks = rng.choice(bad.size, size=37, replace=False)
    flat = bad.reshape(-1)
    # one ulp is within tolerance, a sign flip of a value far from zero or a NaN is not
    flat[picks[:12]] ^= BITS[dtype](1)
    flat[picks[12:24]] ^= BITS[dtype](0x8000 if dtype != "fp32" else 0x80000000)
    flat[picks[24:]] = BITS[dtype](0x7FC0 if dtype == "bf16" else (0x7E00 if dtype == "fp16" else 0x7FC00000))
    n_twin = count_bad_rows_host(x, w, rows, bad, e, dtype, atol, rtol)
    assert n_twin == generic_count(wl, inputs, rows, bad, eps, dtype)
    if dist != "nonfinite":
        assert n_twin >= 13  # the NaNs where the reference is finite, and most sign flips
    counter = np.zeros(1, dtype=np.uint64)
    count_bad_rows(inputs["x"], w, rows, bad, e, dtype, atol, rtol, counter, np)
    assert int(counter[0]) == n_twin


def test_nonfinite_rows_expect_nan_exactly_where_the_reference_has_it():
    x, w, rows, good, e, wl, inputs = host_case("bf16", "nonfinite", shape=(64, 192), seed=11)
    ref = wl.reference_rows(inputs, rows, np, {"eps": 1e-6})["y"]
    assert np.isnan(ref[0]).all()  # row 0 holds a NaN: the whole row is NaN
    atol, rtol = wl.tolerance
    finite = good.copy()
    finite[0] = 0  # zeros where NaN is expected: every element of the row fails
    assert count_bad_rows_host(x, w, rows, finite, e, "bf16", atol, rtol) == good.shape[1]
    inf_row = int(np.flatnonzero(np.isnan(ref).any(axis=1) & ~np.isnan(ref).all(axis=1))[0])
    assert (ref[inf_row][~np.isnan(ref[inf_row])] == 0).all()  # a row with an Inf is 0 but NaN at the Inf


def test_tiny_rows_fail_when_eps_is_dropped():
    """A kernel that leaves eps out is wrong on tiny rows at every drawn eps (more so the larger it is)."""
    wl = RMSNorm("bf16")
    inputs = wl.make_inputs((32, 512), 5, "tiny")
    x = to_float64(np.asarray(inputs["x"]), "bf16")
    y = from_float(x / np.sqrt((x * x).mean(axis=1, keepdims=True)) * inputs["w"].astype(np.float64), "bf16", np)
    rows = np.arange(32)
    bits = np.asarray(y).view(np.uint16)
    xb = np.asarray(inputs["x"]).view(np.uint16)
    atol, rtol = wl.tolerance
    for eps, least in zip(EPS_DRAWS, (1000, 5000, 10000)):  # mean(x^2) ~ 1e-6: eps matters at every draw
        n = count_bad_rows_host(xb, inputs["w"], rows, bits, wl._eps({"eps": eps}), "bf16", atol, rtol)
        assert n == generic_count(wl, inputs, rows, bits, eps, "bf16") > least


def test_twin_refuses_unknown_dtypes_and_skips_empty_samples():
    with pytest.raises(ValueError):
        count_bad_rows(np.zeros((2, 2), np.uint16), np.zeros(2, np.float32), np.arange(2), np.zeros((2, 2)), 1e-6,
                       "fp8", 0.1, 0.1, np.zeros(1, np.uint64), np)
    counter = np.zeros(1, dtype=np.uint64)
    count_bad_rows(np.zeros((2, 4), np.uint16), np.zeros(4, np.float32), np.zeros(0, np.int64),
                   np.zeros((0, 4), np.uint16), 1e-6, "bf16", 0.1, 0.1, counter, np)
    assert counter[0] == 0 and set(HOST_TWINS) == {f"rmsnorm_{k}_{d}" for k in ("rows_bad", "reference")
                                                   for d in ("bf16", "fp16", "fp32")}
    with pytest.raises(ValueError):
        reference(np.zeros((2, 2), np.uint16), np.zeros(2, np.float32), None, 1e-6, "fp8", np)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("dist", ["nonfinite", "tiny", "large"])
def test_reference_twin_is_the_workloads_reference(dtype, dist):
    """The reference kernel's twin (every row, or the rows given) against RMSNorm.reference / reference_rows on
    the host: equal to the last rounding of a double sum taken in another order, NaN where they have NaN."""
    x, w, rows, _, e, wl, inputs = host_case(dtype, dist, shape=(50, 333), eps=1e-5)
    want = wl.reference(inputs, np, {"eps": 1e-5})["y"]
    whole = reference(inputs["x"], w, None, e, dtype, np)
    part = reference_rows_host(x, w, rows, e, dtype)
    np.testing.assert_allclose(whole, want, rtol=1e-14, atol=0)
    np.testing.assert_allclose(part, want[rows], rtol=1e-14, atol=0)
    assert np.array_equal(np.isnan(whole), np.isnan(want)) and (dist != "nonfinite" or np.isnan(want).any())
    y = np.empty((len(rows), 333))
    HOST_TWINS[f"rmsnorm_reference_{dtype}"](
        (len(rows),), (256,), (x, w, rows, np.int32(1), np.uint64(333), np.float64(e), y))
    assert np.array_equal(y, part, equal_nan=True)


def test_the_kernels_host_twin_adds_to_the_counter():
    x, w, rows, good, e, wl, _ = host_case("fp16", "large", shape=(40, 96))
    good = good.copy()
    good[3, :5] ^= np.uint16(0x8000)
    counter = np.full(1, 4, dtype=np.uint64)
    atol, rtol = wl.tolerance
    HOST_TWINS["rmsnorm_rows_bad_fp16"]((len(rows),), (256,), (x, w, rows, good, np.uint64(96), np.float64(e),
                                                                np.float64(atol), np.float64(rtol),
                                                                np.int32(MANTISSA_BITS["fp16"]), counter))
    assert int(counter[0]) == 4 + count_bad_rows_host(x, w, rows, good, e, "fp16", atol, rtol) and counter[0] > 4


HARNESS = r"""
#include <cmath>
#include <cstdio>
#include <cstdlib>
%s
static u64 d2u(double d) { union { double d; u64 u; } c; c.d = d; return c.u; }
int main(int argc, char** argv) {
    // element values of every 16-bit pattern (bf16, fp16) and of the fp32 patterns in argv[2]
    for (u32 b = 0; b < 65536; ++b) printf("%%016llx %%016llx\n", d2u(element_value(b, 0)), d2u(element_value(b, 1)));
    FILE* f = fopen(argv[1], "rb");
    u64 head[4];
    double par[3];
    if (fread(head, 8, 4, f) != 4 || fread(par, 8, 3, f) != 3) return 1;
    u64 rows = head[0], n = head[1], pairs = head[3];
    int kind = (int)head[2], mant = kind == 0 ? 7 : (kind == 1 ? 10 : 23);
    u32* x = (u32*)malloc(rows * n * 4);
    u32* g = (u32*)malloc(rows * n * 4);
    float* w = (float*)malloc(n * 4);
    double* pr = (double*)malloc(pairs * 16);
    if (fread(x, 4, rows * n, f) != rows * n || fread(g, 4, rows * n, f) != rows * n || fread(w, 4, n, f) != n
        || fread(pr, 16, pairs, f) != pairs) return 1;
    for (u64 r = 0; r < rows; ++r) {  // the kernel's per-row work, serially
        double s = 0.0;
        for (u64 j = 0; j < n; ++j) { double v = element_value(x[r * n + j], kind); s += v * v; }
        double d = rms_scale(s, n, par[0]);
        u64 bad = 0;
        for (u64 j = 0; j < n; ++j)
            bad += element_bad(element_value(g[r * n + j], kind), rms_reference(element_value(x[r * n + j], kind), d,
                               (double)w[j]), par[1], par[2], mant);
        printf("row %%llu %%016llx %%016llx\n", bad, d2u(d),
               d2u(rms_reference(element_value(x[r * n + n - 1], kind), d, (double)w[n - 1])));
    }
    for (u64 k = 0; k < pairs; ++k) printf("pair %%u %%016llx\n", element_bad(pr[2 * k], pr[2 * k + 1], par[1], par[2], mant),
                                           d2u(half_ulp(pr[2 * k + 1], mant)));
    return 0;
}
"""


def _u2d(h: str) -> float:
    return struct.unpack("<d", struct.pack("<Q", int(h, 16)))[0]


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    d = tmp_path_factory.mktemp("rmsnorm_check")
    src = d / "h.cu"
    src.write_text(HARNESS % SOURCE)
    exe = d / "h"
    # sm_90 device code (the kernels) and the host functions, without FMA contraction as the module is built
    subprocess.run(["nvcc", "-arch=sm_90", "-fmad=false", "-o", str(exe), str(src)], check=True,
                   capture_output=True, timeout=300)
    return d, exe


def _run(harness, dtype, x_rows, got, w, eps, atol, rtol, pairs):
    d, exe = harness
    data = d / f"in_{dtype}.bin"
    with open(data, "wb") as f:
        f.write(np.array([x_rows.shape[0], x_rows.shape[1], KIND[dtype], len(pairs)], dtype=np.uint64).tobytes())
        f.write(np.array([eps, atol, rtol], dtype=np.float64).tobytes())
        f.write(x_rows.astype(np.uint32).tobytes() + got.astype(np.uint32).tobytes())
        f.write(np.asarray(w, np.float32).tobytes() + np.asarray(pairs, np.float64).tobytes())
    out = subprocess.run([str(exe), str(data)], check=True, capture_output=True, text=True, timeout=120).stdout
    lines = out.split("\n")
    values = np.array([[_u2d(t) for t in ln.split()] for ln in lines[:65536]])
    rows = [ln.split()[1:] for ln in lines if ln.startswith("row ")]
    pair = [ln.split()[1:] for ln in lines if ln.startswith("pair ")]
    return values, [(int(b), _u2d(s), _u2d(y)) for b, s, y in rows], [(int(b), _u2d(h)) for b, h in pair]


@pytest.mark.parametrize("dtype,dist,eps", [("bf16", "nonfinite", 1e-6), ("bf16", "tiny", 1e-3),
                                            ("fp16", "large", 1e-5), ("fp32", "zero_rows", 1e-3)])
def test_cuda_source_computes_what_the_numpy_twin_computes(harness, dtype, dist, eps):
    x, w, rows, good, e, wl, inputs = host_case(dtype, dist, shape=(40, 1001), eps=eps)
    got = good.copy()
    got[1, :9] ^= BITS[dtype](0x8000 if dtype != "fp32" else 0x80000000)
    got[2, 3] = 0
    atol, rtol = wl.tolerance
    specials = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-300, 5e-324, 1.0, 16.0, 31.999, 1e38, -3e-5]
    pairs = [(g, r) for g in specials for r in specials] + list(
        zip(np.random.default_rng(1).standard_normal(200), np.random.default_rng(2).standard_normal(200)))
    values, row_out, pair_out = _run(harness, dtype, x[rows], got, w, e, atol, rtol, pairs)
    u16 = np.arange(65536, dtype=np.uint16)
    for col, kind in ((0, "bf16"), (1, "fp16")):
        want = element_value_host(u16, kind)
        assert np.array_equal(values[:, col], want, equal_nan=True)
    xr = element_value_host(x[rows], dtype)
    d_twin = np.sqrt((xr * xr).sum(axis=1) / xr.shape[1] + e)
    ref = wl.reference_rows(inputs, rows, np, {"eps": eps})["y"]
    for i, (bad, d, y_last) in enumerate(row_out):
        assert bad == count_bad_rows_host(x, w, rows[i:i + 1], got[i:i + 1], e, dtype, atol, rtol), i
        assert d == pytest.approx(d_twin[i], rel=1e-14, nan_ok=True)  # the sum's order alone differs
        assert y_last == pytest.approx(ref[i, -1], rel=1e-14, abs=0, nan_ok=True)
    assert sum(r[0] for r in row_out) == generic_count(wl, inputs, rows, got, eps, dtype) > 0
    g, r = np.array(pairs).T
    from workloads.dtypes import half_ulp

    assert [b for b, _ in pair_out] == element_bad_host(g, r, atol, rtol, dtype).astype(int).tolist()
    finite = np.isfinite(r)
    assert np.array_equal(np.array([h for _, h in pair_out])[finite], half_ulp(r[finite], dtype, np))
