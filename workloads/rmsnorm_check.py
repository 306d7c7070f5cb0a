"""RMSNorm's float64 reference on the device, and the gate's comparator fused with it for sampled rows.

A checked timed launch (``evaluators.gpu.timed_checks.verify_checked``) is compared at about 1090 sampled rows.
The generic path gathers those rows of x, builds their float64 reference and compares: six device operations and,
at 16384 x 131072, 1.1 GB of float64 reference written and read back per launch (H200, 2026-12-01: 9.3 ms for the
four checked launches of that shape, 1.8 ms at the small search shapes). ``count_bad_rows`` does the same in one
kernel without a float64 row in memory: one CTA per sampled row reads the row of x twice (sum of squares in
double, then each element's reference ``x / sqrt(sum / N + eps) * w`` in double), compares it with the gathered
output by the gate's rule (``gate.compare``: ``|out - ref| <= atol + rtol |ref| + half_ulp(ref)``, or equal, or
both NaN) and adds the count of failing elements to a device counter, with no synchronisation. ``reference``
writes the same per-row reference into a float64 array (every row, or sampled rows read in place): one kernel
where ``RMSNorm.reference`` took five operations (the gate's 36 small checks build 48 references per evaluation).

The arithmetic is written once as ``__host__ __device__`` functions of ``SOURCE`` and compiled without FMA
contraction (``--fmad=false``), so each element's reference and verdict are those numpy computes from the same
scale; only the sum of squares is taken in another order than numpy's (a parallel tree), as in
``workloads.fused.row_sum_squares``. One kernel per element type (the type a template argument), 256 threads a
CTA, eight independent loads in flight per thread. tests/test_rmsnorm_check.py compiles the source with nvcc for
the host and for sm_90 and compares it with the numpy twins (``count_bad_rows_host``, ``reference_rows_host``)
and with ``RMSNorm.reference`` + ``gate.compare``, NaN/Inf rows, tiny rows and every drawn eps included;
tests/gpu/test_fused_gpu.py runs the kernels against numpy on a GPU. ``HOST_TWINS`` holds the kernels' numpy twins
for the CPU stand-in of CuPy (tests/cupy_standin.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from functools import cache
from types import ModuleType
from typing import Any

import numpy as np

from workloads.dtypes import bits_dtype
from workloads.elements import MANTISSA_BITS

SOURCE = r"""
typedef unsigned long long u64;
typedef unsigned int u32;

// Element kinds: 0 bf16 bits, 1 fp16 bits, 2 fp32 bits (a template argument of the kernels: one kernel per
// element type, the other kinds' code folded away).
__host__ __device__ inline float u32_as_f32(u32 b) {
    union { u32 u; float f; } c;
    c.u = b;
    return c.f;
}

// The exact value of an element's bits as a double (IEEE 754 binary16 decoded by hand: host and device alike).
__host__ __device__ inline double element_value(u32 b, int kind) {
    if (kind == 0) return (double)u32_as_f32(b << 16);
    if (kind == 2) return (double)u32_as_f32(b);
    u32 s = (b >> 15) & 1u, e = (b >> 10) & 0x1Fu, m = b & 0x3FFu;
    double v;
    if (e == 0) v = ldexp((double)m, -24);
    else if (e == 31) v = m ? (double)u32_as_f32(0x7FC00000u) : (double)u32_as_f32(0x7F800000u);
    else v = ldexp((double)(m | 0x400u), (int)e - 25);
    return s ? -v : v;
}

// d = sqrt(mean(x^2) + eps): workloads.rmsnorm.RMSNorm.reference's order of operations.
__host__ __device__ inline double rms_scale(double sum_squares, u64 n, double eps) {
    return sqrt(sum_squares / (double)n + eps);
}

// The reference of one element: x / d * w.
__host__ __device__ inline double rms_reference(double x, double d, double w) {
    return x / d * w;
}

// workloads.dtypes.half_ulp for one value: half the spacing of the output type around r (0 at r == 0).
__host__ __device__ inline double half_ulp(double r, int mantissa_bits) {
    if (r == 0.0) return 0.0;
    int e;
    frexp(fabs(r), &e);
    return ldexp(0.5, e - 1 - mantissa_bits);
}

// 1 when the output value g fails the gate's rule against the reference r (evaluators.gpu.gate.compare).
__host__ __device__ inline u32 element_bad(double g, double r, double atol, double rtol, int mantissa_bits) {
    bool ok = fabs(g - r) <= atol + rtol * fabs(r) + half_ulp(r, mantissa_bits) || g == r || (isnan(g) && isnan(r));
    return ok ? 0u : 1u;
}

// Elements each thread loads before it uses them: independent loads in flight, so one CTA per row reads at
// near copy rate (a thread's 2-byte loads one at a time keep too few bytes in flight per SM).
#define UNROLL 8
// The kernels run 256 threads a CTA (BLOCK in the Python module), at least 4 CTAs an SM (64 registers).

// d = sqrt(mean(x^2) + eps) of the n-element row xr, computed by the whole CTA (blockDim.x a multiple of 32,
// at most 1024) and returned to every thread.
template <typename T, int kind>
__device__ double block_row_scale(const T* __restrict__ xr, u64 n, double eps) {
    __shared__ double part[32];
    __shared__ double scale;
    double s = 0.0;
    const u64 step = (u64)UNROLL * blockDim.x;
    for (u64 j0 = threadIdx.x; j0 < n; j0 += step) {
        u32 v[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            u64 j = j0 + (u64)k * blockDim.x;
            v[k] = j < n ? (u32)xr[j] : 0u;  // bits 0: +0.0, adds nothing
        }
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            double e = element_value(v[k], kind);
            s += e * e;
        }
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (u32 k = 0; k < (blockDim.x + 31) / 32; ++k) t += part[k];
        scale = rms_scale(t, n, eps);
    }
    __syncthreads();
    return scale;
}

// One CTA per sampled row b: row rows[b] of x (n elements), got row b (the gathered output), w (n floats); the
// count of failing elements added to *counter.
template <typename T, int kind>
__device__ void rows_bad(const T* __restrict__ x, const float* __restrict__ w, const long long* __restrict__ rows,
                         const T* __restrict__ got, u64 n, double eps, double atol, double rtol, int mantissa_bits,
                         u64* counter) {
    const T* xr = x + (u64)rows[blockIdx.x] * n;
    const T* gr = got + (u64)blockIdx.x * n;
    double d = block_row_scale<T, kind>(xr, n, eps);
    u32 bad = 0;
    const u64 step = (u64)UNROLL * blockDim.x;
    for (u64 j0 = threadIdx.x; j0 < n; j0 += step) {
        u32 xv[UNROLL], gv[UNROLL];
        float wv[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            u64 j = j0 + (u64)k * blockDim.x;
            bool in = j < n;
            xv[k] = in ? (u32)xr[j] : 0u;
            gv[k] = in ? (u32)gr[j] : 0u;
            wv[k] = in ? w[j] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            if (j0 + (u64)k * blockDim.x < n) {
                double r = rms_reference(element_value(xv[k], kind), d, (double)wv[k]);
                bad += element_bad(element_value(gv[k], kind), r, atol, rtol, mantissa_bits);
            }
        }
    }
    for (int o = 16; o > 0; o >>= 1) bad += __shfl_down_sync(0xffffffffu, bad, o);
    if ((threadIdx.x & 31) == 0 && bad) atomicAdd(counter, (u64)bad);
}

// One CTA per row b of the reference y (n doubles a row): from row rows[b] of x (row b when use_rows is 0).
template <typename T, int kind>
__device__ void reference_rows(const T* __restrict__ x, const float* __restrict__ w,
                               const long long* __restrict__ rows, int use_rows, u64 n, double eps,
                               double* __restrict__ y) {
    const T* xr = x + (use_rows ? (u64)rows[blockIdx.x] : (u64)blockIdx.x) * n;
    double* yr = y + (u64)blockIdx.x * n;
    double d = block_row_scale<T, kind>(xr, n, eps);
    const u64 step = (u64)UNROLL * blockDim.x;
    for (u64 j0 = threadIdx.x; j0 < n; j0 += step) {
        u32 xv[UNROLL];
        float wv[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            u64 j = j0 + (u64)k * blockDim.x;
            xv[k] = j < n ? (u32)xr[j] : 0u;
            wv[k] = j < n ? w[j] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            u64 j = j0 + (u64)k * blockDim.x;
            if (j < n) yr[j] = rms_reference(element_value(xv[k], kind), d, (double)wv[k]);
        }
    }
}

"""

# Element types: the ``kind`` template argument of the kernels and the C type of their bits.
KIND = {"bf16": 0, "fp16": 1, "fp32": 2}
_BITS_TYPE = {"bf16": "unsigned short", "fp16": "unsigned short", "fp32": "u32"}

# The two kernels of one element type ``d`` (C type ``t``, kind ``k``), instantiated for every type of KIND.
_ENTRIES = r"""extern "C" __global__ void __launch_bounds__(256, 4)
rmsnorm_rows_bad_{d}(const {t}* x, const float* w, const long long* rows, const {t}* got, u64 n, double eps,
    double atol, double rtol, int mantissa_bits, u64* counter) {{
    rows_bad<{t}, {k}>(x, w, rows, got, n, eps, atol, rtol, mantissa_bits, counter);
}}
extern "C" __global__ void __launch_bounds__(256, 4)
rmsnorm_reference_{d}(const {t}* x, const float* w, const long long* rows, int use_rows, u64 n, double eps,
    double* y) {{
    reference_rows<{t}, {k}>(x, w, rows, use_rows, n, eps, y);
}}
"""
SOURCE += "".join(_ENTRIES.format(d=d, t=_BITS_TYPE[d], k=k) for d, k in KIND.items())

# Compiler options: no FMA contraction, so every element's arithmetic is numpy's (IEEE double, one rounding per
# operation).
OPTIONS = ("--fmad=false",)
BLOCK = 256


@cache
def _module() -> Any:
    import cupy as cp

    return cp.RawModule(code=SOURCE, options=OPTIONS)


def element_value_host(bits: np.ndarray, dtype: str) -> np.ndarray:
    """``element_value`` over an unsigned-integer bits array: the exact float64 values."""
    bits = np.asarray(bits)
    with np.errstate(invalid="ignore"):  # NaN patterns widen to NaN
        if dtype == "bf16":
            return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        if dtype == "fp16":
            return bits.astype(np.uint16).view(np.float16).astype(np.float64)
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def element_bad_host(g: np.ndarray, r: np.ndarray, atol: float, rtol: float, dtype: str) -> np.ndarray:
    """``element_bad`` over float64 arrays (bool): ``gate.compare``'s rule."""
    from workloads.dtypes import half_ulp

    with np.errstate(invalid="ignore", over="ignore"):
        ok = (np.abs(g - r) <= atol + rtol * np.abs(r) + half_ulp(r, dtype, np)) | (g == r) | (np.isnan(g) & np.isnan(r))
    return ~ok


def count_bad_rows_host(x_bits: np.ndarray, w: np.ndarray, rows: np.ndarray, got_bits: np.ndarray, eps: float,
                        dtype: str, atol: float, rtol: float) -> int:
    """The kernel's count in numpy: elements of ``got_bits`` ((len(rows), N) bits of ``dtype``) failing the
    gate's rule against ``x_bits[rows] / sqrt(mean(x^2) + eps) * w`` in float64 (``eps`` the float64 value of the
    float32 the kernel gets); ``x_bits`` (M, N) bits, ``w`` (N,) float32."""
    r = reference_rows_host(np.asarray(x_bits).reshape(-1, np.asarray(got_bits).shape[-1]), w, rows, eps, dtype)
    g = element_value_host(got_bits, dtype).reshape(r.shape)
    return int(element_bad_host(g, r, atol, rtol, dtype).sum())


def _contiguous(a: Any, xp: ModuleType) -> Any:
    """``a`` itself when C-contiguous (what the kernels index), else a contiguous copy."""
    return a if a.flags.c_contiguous else xp.ascontiguousarray(a)


def _int64_rows(rows: Any, xp: ModuleType) -> Any:
    """``rows`` as the int64 device array the kernels read (unchanged when it is one; None stays None)."""
    if rows is None or rows.dtype == np.int64:
        return rows
    return rows.astype(xp.int64)


def count_bad_rows(x: Any, w: Any, rows: Any, got: Any, eps: float, dtype: str, atol: float, rtol: float,
                   counter: Any, xp: ModuleType) -> None:
    """Add to ``counter`` (a 1-element uint64 array of ``xp``) the elements of ``got`` ((len(rows), N), ``dtype``
    storage: bf16 as uint16 bits) out of the gate's tolerance against the float64 RMSNorm reference of the rows
    ``rows`` (1-D int64 of ``xp``) of ``x`` ((M, N), contiguous) with ``w`` ((N,) float32) and ``eps`` (the float64
    value of the kernel's float32 eps). On the device one kernel, no synchronisation; on the host
    ``count_bad_rows_host``. ValueError for an unknown dtype."""
    if dtype not in KIND:
        raise ValueError(f"count_bad_rows: dtype must be one of {sorted(KIND)}, got {dtype!r}")
    n_rows, n = int(got.shape[0]), int(got.shape[-1])
    if n_rows == 0 or n == 0:
        return
    bits = bits_dtype(dtype)
    if xp is np:
        counter[0] += count_bad_rows_host(np.asarray(x).view(bits), w, rows, np.asarray(got).view(bits), eps, dtype,
                                          atol, rtol)
        return
    _module().get_function(f"rmsnorm_rows_bad_{dtype}")(
        (n_rows,), (BLOCK,), (_contiguous(x, xp).view(bits), _contiguous(w, xp), _int64_rows(rows, xp),
                              _contiguous(got, xp).view(bits), np.uint64(n), np.float64(eps), np.float64(atol),
                              np.float64(rtol), np.int32(MANTISSA_BITS[dtype]), counter))


def reference_rows_host(x_bits: np.ndarray, w: np.ndarray, rows: np.ndarray | None, eps: float,
                        dtype: str) -> np.ndarray:
    """The reference kernel's output in numpy: float64 (len(rows), N) (every row of ``x_bits`` when ``rows`` is
    None), ``x / sqrt(mean(x^2) + eps) * w``."""
    x = element_value_host(x_bits if rows is None else np.asarray(x_bits)[np.asarray(rows)], dtype)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        d = np.sqrt((x * x).sum(axis=1, keepdims=True) / x.shape[1] + eps)
        return x / d * np.asarray(w, dtype=np.float32).astype(np.float64)


def reference(x: Any, w: Any, rows: Any, eps: float, dtype: str, xp: ModuleType) -> Any:
    """float64 (len(rows), N): the RMSNorm reference of the rows ``rows`` (1-D int64 of ``xp``; None: every row)
    of ``x`` ((M, N), ``dtype`` storage) with ``w`` ((N,) float32) and ``eps`` (the float64 value of the kernel's
    float32 eps): on the device one kernel into a new array (no float64 temporaries), on the host
    ``reference_rows_host``. ValueError for an unknown dtype."""
    if dtype not in KIND:
        raise ValueError(f"reference: dtype must be one of {sorted(KIND)}, got {dtype!r}")
    bits = bits_dtype(dtype)
    if xp is np:
        return reference_rows_host(np.asarray(x).view(bits), w, rows, eps, dtype)
    x = _contiguous(x, xp)
    rows = _int64_rows(rows, xp)
    m, n = (int(x.shape[0]) if rows is None else int(rows.shape[0])), int(x.shape[-1])
    y = xp.empty((m, n), dtype=xp.float64)
    if m and n:
        _module().get_function(f"rmsnorm_reference_{dtype}")(
            (m,), (BLOCK,), (x.view(bits), _contiguous(w, xp), y if rows is None else rows,
                             np.int32(rows is not None), np.uint64(n), np.float64(eps), y))
    return y


def _rows_bad_twin(dtype: str, grid: tuple, block: tuple, args: tuple) -> None:
    x, w, rows, got, n, eps, atol, rtol, mantissa_bits, counter = args
    assert grid[0] == len(rows) and int(mantissa_bits) == MANTISSA_BITS[dtype] and block == (BLOCK,)
    counter.reshape(-1)[0] += count_bad_rows_host(x.reshape(-1, int(n)), w, rows, got.reshape(-1, int(n)),
                                                  float(eps), dtype, float(atol), float(rtol))


def _reference_twin(dtype: str, grid: tuple, block: tuple, args: tuple) -> None:
    x, w, rows, use_rows, n, eps, y = args
    assert block == (BLOCK,) and grid[0] == y.reshape(-1, int(n)).shape[0]
    y.reshape(-1, int(n))[...] = reference_rows_host(x.reshape(-1, int(n)), w, rows if int(use_rows) else None,
                                                     float(eps), dtype)


# Host twins of the kernels by name, called as ``twin(grid, block, args)`` with numpy arrays in place of device
# arrays: what the CPU stand-in for CuPy (tests/cupy_standin.py) runs for these kernels.
HOST_TWINS: dict[str, Callable[[tuple, tuple, tuple], None]] = {
    **{f"rmsnorm_rows_bad_{d}": functools.partial(_rows_bad_twin, d) for d in KIND},
    **{f"rmsnorm_reference_{d}": functools.partial(_reference_twin, d) for d in KIND}}
