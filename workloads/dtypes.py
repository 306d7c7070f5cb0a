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

