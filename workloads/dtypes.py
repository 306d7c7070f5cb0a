"""Element types of workload tensors, on the host (numpy + ml_dtypes) and on the device (CuPy).

CuPy has no bfloat16, so on the device a bf16 tensor is stored as ``uint16`` holding the bf16 bits; the helpers
here take an array module ``xp`` (numpy or cupy) and work on either representation. fp16 and fp32 use the
native dtypes on both sides.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np

from workloads import fused
from workloads.elements import ELEMENT_BYTES, MANTISSA_BITS, POISON_NAN_BITS

__all__ = ["ELEMENT_BYTES", "MANTISSA_BITS", "POISON_NAN_BITS", "as_bits", "bits_dtype", "check_dtype",
           "from_float", "half_ulp", "host_dtype", "storage_dtype", "to_device", "to_float64"]


def check_dtype(dtype: str) -> str:
    """Return ``dtype`` if it is one of bf16, fp16, fp32; ValueError naming the allowed values otherwise."""
    if dtype not in ELEMENT_BYTES:
        raise ValueError(f"dtype must be one of {sorted(ELEMENT_BYTES)}, got {dtype!r}")
    return dtype


def host_dtype(dtype: str) -> np.dtype:
    """numpy dtype of host arrays: ml_dtypes.bfloat16, float16 or float32."""
    return np.dtype({"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32}[check_dtype(dtype)])


def bits_dtype(dtype: str) -> np.dtype:
    """Unsigned integer dtype of the same width (uint16 or uint32): the device storage of bf16, and the view
    used for bitwise comparisons."""
    return np.dtype(np.uint16 if ELEMENT_BYTES[check_dtype(dtype)] == 2 else np.uint32)


def storage_dtype(dtype: str, xp: ModuleType = np) -> np.dtype:
    """The dtype arrays of ``dtype`` have under array module ``xp``: host_dtype for numpy; for CuPy, uint16 for
    bf16 and the native dtype otherwise."""
    if xp is np:
        return host_dtype(dtype)
    return bits_dtype(dtype) if dtype == "bf16" else host_dtype(dtype)


def as_bits(a: Any, dtype: str, xp: ModuleType = np) -> Any:
    """A view of ``a``'s elements as unsigned integers of the element width (no copy)."""
    return a.view(bits_dtype(dtype))


def to_device(host: Mapping[str, Any], xp: ModuleType) -> dict[str, Any]:
    """Copies of host arrays (NumPy; bf16 as ml_dtypes.bfloat16) in ``xp``'s device representation, by name:
    a bfloat16 array travels as its uint16 bits (CuPy has no bfloat16, ``storage_dtype``), every other array
    keeps its dtype. The very values a host reference saw, for a launch on the device."""
    return {k: xp.asarray(v.view(np.uint16) if v.dtype.name == "bfloat16" else v) for k, v in host.items()}


def to_float64(a: Any, dtype: str, xp: ModuleType = np) -> Any:
    """Exact float64 copy of an array of ``dtype`` in either representation (bf16 bits are widened by a 16-bit
    shift: bf16 is the upper half of an IEEE binary32)."""
    if dtype == "bf16" and a.dtype == np.uint16:
        return (a.astype(xp.uint32) << 16).view(xp.float32).astype(xp.float64)
    if xp is np:
        with np.errstate(invalid="ignore"):  # poisoned (NaN) elements are expected here
            return a.astype(np.float64)
    return a.astype(xp.float64)


def from_float(a: Any, dtype: str, xp: ModuleType = np) -> Any:
    """Round a float32/float64 array to ``dtype`` (round to nearest even), in ``xp``'s storage representation.

    For bf16 under CuPy the float32 value is rounded on its bit pattern in one fused kernel
    (``fused.round_bf16``): add 0x7FFF plus the lowest kept bit, drop the low 16 bits (the rounding ml_dtypes
    and CUDA's __float2bfloat16_rn use). Infinities and the quiet NaN 0x7FC00000 (numpy's ``nan``) round
    to the bf16 Inf / NaN; other NaN payloads are not expected (the workloads' generators use ``nan``).
    """
    if dtype == "bf16" and xp is not np:
        return fused.round_bf16(a.astype(xp.float32, copy=False))
    return a.astype(storage_dtype(dtype, xp))


def half_ulp(ref: Any, dtype: str, xp: ModuleType = np) -> Any:
    """Half the spacing of ``dtype`` values around each element of the float64 array ``ref`` (0 where ref is 0):
    the largest error of a correctly rounded ``dtype`` result. For bf16 it is between 2^-9 and 2^-8 of |ref|
    (0.0625 for |ref| in [16, 32)), above the published rtol of 1e-3, so the gate adds it to its tolerance.
    Normal numbers only: below the smallest normal of ``dtype`` the true spacing is constant and larger than
    this formula gives, a stricter bound that the gate's atol covers."""
    _, e = xp.frexp(xp.abs(ref))  # |ref| = m * 2^e, m in [0.5, 1): the binade is [2^(e-1), 2^e)
    h = xp.ldexp(xp.float64(0.5), e - 1 - MANTISSA_BITS[check_dtype(dtype)])
    return xp.where(ref == 0, 0.0, h)


# The row-scale test (``row_scale_bad``): how many standard deviations of the rows' rounding noise, and the relative
# slack for the kernel's own float32 scale (a float32 sum of up to 2^18 squares in sequence errs by about 1.3e-5 of
# the scale; a tree by less): workloads.rmsnorm_check's fused kernel uses the same two numbers.
ROW_SCALE_SIGMAS = 8.0
ROW_SCALE_SLACK = 1e-4


def row_scale_bad(got: Any, ref: Any, dtype: str, xp: ModuleType = np) -> Any:
    """Per row (last axis) of float64 outputs ``got`` and references ``ref``: True where a finite row's outputs do
    not carry the reference's scale within their rounding noise. With e = got - ref, A = sum(ref e), B = sum(ref^2)
    and C = sum(ref^2 h^2) (h = ``half_ulp(ref)``), correctly rounded outputs give A / B a mean of 0 and a standard
    deviation of sqrt(C / 3) / B (each e uniform within +-h, independent); a row fails when |A| exceeds
    ``ROW_SCALE_SIGMAS`` such deviations plus ``ROW_SCALE_SLACK`` B. It judges what the element test cannot: a
    scale from part of the row (red-team round 17, a sum of squares over 7 of every 8 sectors at N = 131072: 7e-4
    of the scale, sd, where each element's tolerance admits about 4e-3) and outputs rounded one way. Rows holding a
    non-finite value or only zeros are left to the element test. For outputs that are a per-row scale times a
    function of the inputs (``OutputSpec.row_scaled``: RMSNorm's y)."""
    with np.errstate(invalid="ignore", over="ignore"):
        finite = xp.isfinite(got).all(axis=-1) & xp.isfinite(ref).all(axis=-1)
        g = xp.where(finite[..., None], got, 0.0)
        r = xp.where(finite[..., None], ref, 0.0)
        h = half_ulp(r, dtype, xp)
        a = (r * (g - r)).sum(axis=-1)
        b = (r * r).sum(axis=-1)
        c = (r * r * h * h).sum(axis=-1)
        return finite & (b > 0) & (xp.abs(a) > ROW_SCALE_SIGMAS * xp.sqrt(c / 3.0) + ROW_SCALE_SLACK * b)

