"""Fused CuPy kernels for the array work around a candidate: inputs, float64 references and comparisons.

Written with plain CuPy operators, the gate's comparison of one output against its float64 reference is a
chain of about fifteen kernels with float64 temporaries (about 100 bytes of memory traffic per element) and a
bf16 rounding is six; each function here reads its operands once, in one ``cupy.ElementwiseKernel`` or a
``cupy.ReductionKernel`` (full reductions in two levels, see REDUCE_CHUNK). They compute what the numpy
formulas in ``evaluators.gpu.gate`` and ``workloads.dtypes`` compute, to within the rounding of
double sums taken in another order (tests/gpu checks the pairs against each other), and are used only where
the array module is CuPy. Kernels are built on first use, per element type.

Element types (``dtype``): "bf16" (stored as uint16 bits on the device), "fp16", "fp32".
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from workloads.elements import MANTISSA_BITS

# CuPy type name of the device storage of each element type.
STORAGE_TYPE = {"bf16": "uint16", "fp16": "float16", "fp32": "float32"}


def as_double(var: str, dtype: str) -> str:
    """C expression: the value of element ``var`` (of ``dtype``'s storage type) as an exact double.

    bf16 is the upper half of an IEEE binary32, so its bits are widened by a 16-bit shift."""
    if dtype == "bf16":
        return f"((double)__uint_as_float(((unsigned int){var}) << 16))"
    if dtype == "fp16":
        return f"((double)(float){var})"
    return f"((double){var})"


def _cp() -> Any:
    import cupy

    return cupy


def _half_ulp_function(dtype: str) -> str:
    """CUDA source of ``half_ulp_<dtype>(double r)``: dtypes.half_ulp for one value."""
    return (f"__device__ double half_ulp_{dtype}(double r) {{\n"
            f"    if (r == 0.0) return 0.0;\n    int e;\n    frexp(fabs(r), &e);\n"
            f"    return ldexp(0.5, e - 1 - {MANTISSA_BITS[dtype]});\n}}\n")


def bits_of(var: str, dtype: str) -> str:
    """C expression: the raw bits of element ``var`` (of ``dtype``'s storage type) as an unsigned integer."""
    if dtype == "bf16":
        return f"((unsigned int){var})"
    if dtype == "fp16":
        return f"((unsigned int)*reinterpret_cast<const unsigned short*>(&{var}))"
    return f"__float_as_uint({var})"


def _matches(v: str, r: str) -> str:
    """C condition: value ``v`` equals reference ``r`` exactly, or both are NaN (a NaN the reference has is
    expected: non-finite inputs)."""
    return f"(({v}) == ({r}) || (isnan({v}) && isnan({r})))"


@cache
def _count_bad_kernel(dtype: str, atol: float, rtol: float, poison: int | None) -> Any:
    v = as_double("o", dtype)
    # NaN compares false, so a NaN where the reference is finite counts as bad; an element still holding the
    # poison bits counts as bad even where the reference is NaN (never written).
    unwritten = f"{bits_of('o', dtype)} == {poison}u || " if poison is not None else ""
    return _cp().ReductionKernel(
        f"{STORAGE_TYPE[dtype]} o, float64 r", "int64 n",
        # NVRTC may contract the bound into an FMA: it can differ from numpy's by an ulp of a double.
        f"({unwritten}!(fabs({v} - r) <= {atol!r} + {rtol!r} * fabs(r) + half_ulp_{dtype}(r) || "
        f"{_matches(v, 'r')})) ? 1 : 0", "a + b", "n = a", "0",
        f"count_bad_{dtype}", reduce_type="long long", preamble=_half_ulp_function(dtype))


@cache
def _max_err_kernel(dtype: str) -> Any:
    v = as_double("o", dtype)
    return _cp().ReductionKernel(
        f"{STORAGE_TYPE[dtype]} o, float64 r", "float64 e",
        f"{_matches(v, 'r')} ? 0.0 : "
        f"((fabs({v} - r) == fabs({v} - r)) ? fabs({v} - r) : __longlong_as_double(0x7ff0000000000000LL))",
        "fmax(a, b)", "e = a", "0", f"max_err_{dtype}", reduce_type="double")


@cache
def _count_differ_kernel() -> Any:
    return _cp().ReductionKernel("T p, T q", "int64 n", "(p != q) ? 1 : 0", "a + b", "n = a", "0",
                                 "count_differ", reduce_type="long long")


@cache
def _row_sum_squares_kernel(dtype: str) -> Any:
    v = as_double("x", dtype)
    return _cp().ReductionKernel(f"{STORAGE_TYPE[dtype]} x", "float64 s", f"{v} * {v}", "a + b", "s = a", "0",
                                 f"row_sum_squares_{dtype}", reduce_type="double")


@cache
def _round_bf16_kernel() -> Any:
    # Round to nearest even on the bit pattern (as ml_dtypes and __float2bfloat16_rn do for finite values).
    return _cp().ElementwiseKernel(
        "float32 f", "uint16 b",
        "unsigned int u = __float_as_uint(f); b = (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);",
        "round_bf16")


# Full reductions run in two levels: a ReductionKernel over rows of REDUCE_CHUNK elements (one CTA per row, so
# the whole GPU works) and CuPy's own reduction of the partials. A ReductionKernel reducing a whole array to one
# value runs on very few CTAs: on an H200 it took 0.4-0.9 s for 512 MB where the two-level form is bandwidth
# bound (measured with experiments/gate_cost.py, 2026-11-30).
REDUCE_CHUNK = 8192


def _two_level(kernel: Any, arrays: tuple[Any, ...], combine: str) -> Any:
    """``kernel`` reduced over every element of ``arrays`` (same shape): a 0-d device array. combine: "sum" or
    "max" (how partials are joined)."""
    cp = _cp()
    flat = [cp.ascontiguousarray(a).reshape(-1) for a in arrays]
    n = flat[0].size
    rows = n // REDUCE_CHUNK
    parts = []
    if rows:
        head = kernel(*(f[: rows * REDUCE_CHUNK].reshape(rows, REDUCE_CHUNK) for f in flat), axis=1)
        parts.append(head.sum() if combine == "sum" else head.max())
    if n > rows * REDUCE_CHUNK:
        parts.append(kernel(*(f[rows * REDUCE_CHUNK:] for f in flat)))
    if len(parts) == 1:
        return parts[0]
    return parts[0] + parts[1] if combine == "sum" else cp.maximum(parts[0], parts[1])


def _widest_bits(a: Any) -> Any:
    """A contiguous 1-D unsigned-integer view of ``a``'s bytes with the widest element that divides its size."""
    cp = _cp()
    b = cp.ascontiguousarray(a).reshape(-1).view(cp.uint8)
    for t in (cp.uint64, cp.uint32, cp.uint16):
        size = np.dtype(t).itemsize
        if b.size % size == 0 and b.data.ptr % size == 0:  # a misaligned wide load is a sticky CUDA error
            return b.view(t)
    return b


def count_bad(out: Any, ref: Any, dtype: str, atol: float, rtol: float, poison: int | None = None) -> int:
    """Elements of ``out`` (``dtype`` storage) with ``not |out - ref| <= atol + rtol * |ref| + half_ulp(ref)``
    (see dtypes.half_ulp) that are not equal to ``ref`` and not NaN where ``ref`` is NaN; elements whose bits
    are ``poison`` (when given) count as bad wherever they are. ``ref`` float64 of the same shape."""
    if out.size == 0:
        return 0
    return int(count_bad_array(out, ref, dtype, atol, rtol, poison))


def count_bad_array(out: Any, ref: Any, dtype: str, atol: float, rtol: float, poison: int | None = None) -> Any:
    """``count_bad`` as a 0-d device array (no synchronisation; ``out`` must not be empty)."""
    kernel = _count_bad_kernel(dtype, float(atol), float(rtol), None if poison is None else int(poison))
    return _two_level(kernel, (out, ref), "sum")


def max_abs_err(out: Any, ref: Any, dtype: str) -> float:
    """max |out - ref| over all elements (0 where both are NaN or equal), inf when a difference is otherwise
    NaN, 0.0 for empty arrays."""
    if out.size == 0:
        return 0.0
    return float(max_abs_err_array(out, ref, dtype))


def max_abs_err_array(out: Any, ref: Any, dtype: str) -> Any:
    """``max_abs_err`` as a 0-d float64 device array (no synchronisation; ``out`` must not be empty)."""
    return _two_level(_max_err_kernel(dtype), (out, ref), "max")


def count_differ(a: Any, b: Any) -> int:
    """Positions where two arrays of one dtype and shape differ (compare bit views for bitwise equality)."""
    if a.size == 0:
        return 0
    return int(_two_level(_count_differ_kernel(), (a, b), "sum"))


def bytes_differ(a: Any, b: Any) -> bool:
    """True when two arrays of the same byte size differ in any byte (compared as the widest words that fit)."""
    return count_differ(_widest_bits(a), _widest_bits(b)) > 0


def row_sum_squares(x: Any, dtype: str) -> Any:
    """float64 (M,): the sum of x[i, :]**2 over each row of a (M, N) array, in double precision."""
    return _row_sum_squares_kernel(dtype)(x, axis=1)


def round_bf16(f: Any) -> Any:
    """uint16 bf16 bits of a float32 array, rounded to nearest even (the cupy path of dtypes.from_float)."""
    return _round_bf16_kernel()(f)


@cache
def elementwise(name: str, in_params: str, out_params: str, body: str) -> Any:
    """A cached ``cupy.ElementwiseKernel`` (for workloads' own fused references)."""
    return _cp().ElementwiseKernel(in_params, out_params, body, name)


# Mask of the bits a random finite value may set, below the sign bit: exponent at most that of 1.x, so every
# pattern is a finite number in (-2, 2) (bf16 0x3FFF, fp16 0x3BFF, fp32 0x3FFFFFFF).
FINITE_MASK = {"bf16": 0x3FFF, "fp16": 0x3BFF, "fp32": 0x3FFFFFFF}


@cache
def _fill_finite_kernel(dtype: str) -> Any:
    bits = "uint16" if dtype in ("bf16", "fp16") else "uint32"
    width = 16 if bits == "uint16" else 32
    # splitmix64 of (index, seed): Steele, Lea and Flood, "Fast splittable pseudorandom number generators" (2014).
    return _cp().ElementwiseKernel(
        "uint64 seed", f"{bits} y",
        "unsigned long long h = (unsigned long long)i * 0x9E3779B97F4A7C15ull + seed;"
        " h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull; h = (h ^ (h >> 27)) * 0x94D049BB133111EBull; h ^= h >> 31;"
        f" y = ({'unsigned short' if width == 16 else 'unsigned int'})"
        f"((h & {FINITE_MASK[dtype]}ull) | (((h >> 40) & 1ull) << {width - 1}));",
        f"fill_finite_{dtype}")


def fill_random_finite(out: Any, dtype: str, seed: int) -> None:
    """Overwrite ``out`` (``dtype`` storage, contiguous) in place with finite values in (-2, 2) hashed from
    ``seed`` and the element index: a per-launch "uninitialised buffer" pattern with no allocation."""
    bits = out.view(_cp().uint16 if dtype in ("bf16", "fp16") else _cp().uint32).reshape(-1)
    _fill_finite_kernel(dtype)(np.uint64(seed % (2**64)), bits)


_FINGERPRINT_SRC = r"""
extern "C" __global__ void fingerprint(const unsigned int* __restrict__ w, unsigned long long n_words,
                                       const unsigned char* __restrict__ tail, unsigned int n_tail,
                                       unsigned long long* __restrict__ out) {
    unsigned long long acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n_words;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long h = ((unsigned long long)w[i] << 32 | i) * 0x9E3779B97F4A7C15ull + i;
        h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
        h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
        acc += h ^ (h >> 31);
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        for (unsigned int k = 0; k < n_tail; ++k) acc += ((unsigned long long)tail[k] + 1ull) * (0xD6E8FEB86659FD93ull + k);
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}
"""


@cache
def _fingerprint_kernel() -> Any:
    return _cp().RawKernel(_FINGERPRINT_SRC, "fingerprint")


def fingerprint(a: Any) -> Any:
    """A 64-bit fingerprint of ``a``'s bytes as a 1-element uint64 device array (no synchronisation): the sum
    over its 32-bit words of splitmix64(word, index), plus the trailing bytes. Any change of one word changes it;
    an accidental collision of two different contents has probability about 2^-64. Used to tell whether shared
    benchmark inputs changed, without a second copy of them (a 4 GiB input read once: about 1 ms on an H200).
    ``a`` must be contiguous and 4-byte aligned."""
    cp = _cp()
    b = cp.ascontiguousarray(a).reshape(-1).view(cp.uint8)
    n_words = b.size // 4
    out = cp.zeros(1, dtype=cp.uint64)
    words = b[: n_words * 4].view(cp.uint32) if n_words else cp.zeros(1, dtype=cp.uint32)
    tail = b[n_words * 4:] if b.size % 4 else cp.zeros(1, dtype=cp.uint8)
    blocks = max(1, min(4096, -(-n_words // 256)))
    _fingerprint_kernel()((blocks,), (256,), (words, np.uint64(n_words), tail, np.uint32(b.size % 4), out))
    return out
