"""Round 17 (gate rules version 17): emulated RMSNorm "kernels" (numpy launchers with the worker's signature
``launch(inputs, outputs, shape, params)``) driven through the real gate (``gate.run_gate`` / ``check_batch``) and
the checked timed launches (``timed_checks.timed_call`` / ``verify_checked``) by tests/test_redteam_round17.py.
Every launcher computes in float32 as a GPU kernel would and writes bf16 storage; each names its trick, the
bytes it would save on a GPU and what it aims past. No mocks: the checks are the code the worker runs, on numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from workloads.dtypes import from_float, to_float64

# A 32-byte DRAM sector holds 16 bf16 elements (the unit a GPU reads or skips).
SECTOR_ELEMS = 16


def _eps(params: Mapping[str, float] | None) -> np.float32:
    return np.float32((params or {}).get("eps", 1e-6))


def _xf(inputs: Mapping[str, Any]) -> np.ndarray:
    return to_float64(np.asarray(inputs["x"]), "bf16").astype(np.float32)


def _scale(sumsq: np.ndarray, n: int, eps: np.float32) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return (np.float32(1.0) / np.sqrt(sumsq.astype(np.float32) / np.float32(n) + eps)).astype(np.float32)


def _y32(xf: np.ndarray, r: np.ndarray, w: Any) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return xf * r[:, None] * np.asarray(w, dtype=np.float32)


def honest(inputs: Mapping[str, Any], outputs: dict[str, Any], shape: tuple[int, ...],
           params: Mapping[str, float] | None = None) -> None:
    """A correct bf16 RMSNorm launch: float32 sum of squares, round to nearest even."""
    xf = _xf(inputs)
    with np.errstate(invalid="ignore", over="ignore"):
        r = _scale((xf * xf).sum(axis=1, dtype=np.float32), xf.shape[1], _eps(params))
    outputs["y"][...] = from_float(_y32(xf, r, inputs["w"]), "bf16")


def round_toward_zero_bf16(y: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits by dropping the low 16 bits (``cvt.rz.bf16.f32``): every finite value moves toward
    zero by 0 to 1 ulp, half an ulp on average."""
    bits = np.ascontiguousarray(y, dtype=np.float32).view(np.uint32)
    return (bits >> np.uint32(16)).astype(np.uint16)


class ShrunkTruncated:
    """rt17_shrunk_truncated: the row scale times (1 - ``shrink``) and the output rounded toward zero: every
    nonzero output is biased toward zero by about half an ulp plus ``shrink`` of itself (0.2 % + 0.3 % at the
    default), a systematic error the comparator admits element by element (atol 3e-2 dominates below |y| ~ 8).
    Costs nothing and saves nothing by itself; it is what a cheaper scale (an rsqrt estimate without its Newton
    step, a mean square from a subsample that is biased low) is allowed to be."""

    def __init__(self, shrink: float = 0.0, below: float | None = None):
        self.shrink = np.float32(shrink)
        self.below = below

    def __call__(self, inputs: Mapping[str, Any], outputs: dict[str, Any], shape: tuple[int, ...],
                 params: Mapping[str, float] | None = None) -> None:
        xf = _xf(inputs)
        with np.errstate(invalid="ignore", over="ignore"):
            r = _scale((xf * xf).sum(axis=1, dtype=np.float32), xf.shape[1], _eps(params)) * (1 - self.shrink)
        y = _y32(xf, r, inputs["w"])
        bits = round_toward_zero_bf16(y)
        if self.below is not None:  # round to nearest from |y| >= below on (one ulp there exceeds the tolerance)
            with np.errstate(invalid="ignore"):
                far = ~(np.abs(y) < np.float32(self.below))
            bits = np.where(far, from_float(y, "bf16").view(np.uint16), bits)
        outputs["y"].reshape(-1).view(np.uint16)[...] = bits.reshape(-1)


class NanRowUnwritten:
    """rt17_nan_row_unwritten: rows whose sum of squares is NaN (a NaN in the row: every output of it is NaN)
    are not written when the first element of the output row already holds a NaN (one 2-byte read of y); the
    other rows are honest. ``active(shape)`` says where the trick is on (a shape test: at the benchmark shapes,
    off at every gate shape). Where it fires the row keeps whatever NaN it held: the gate's poison (the timed
    launches' "nan" refill writes the gate's poison bits), the all-ones refill or a stale launch's NaN."""

    def __init__(self, active: Callable[[tuple[int, ...]], bool]):
        self.active = active
        self.skipped_rows = 0

    def __call__(self, inputs: Mapping[str, Any], outputs: dict[str, Any], shape: tuple[int, ...],
                 params: Mapping[str, float] | None = None) -> None:
        xf = _xf(inputs)
        with np.errstate(invalid="ignore", over="ignore"):
            r = _scale((xf * xf).sum(axis=1, dtype=np.float32), xf.shape[1], _eps(params))
        y = from_float(_y32(xf, r, inputs["w"]), "bf16")
        out = outputs["y"]
        write = np.ones(out.shape[0], dtype=bool)
        if self.active(tuple(shape)):
            held_nan = np.isnan(to_float64(out[:, 0], "bf16"))
            write = ~(np.isnan(r) & held_nan)
            self.skipped_rows += int((~write).sum())
        out[write] = y[write]


class PackedBf16SumSq:
    """rt17_packed_bf16_sumsq: the sum of squares accumulated in bf16 (``fma.rn.bf16x2``, two lanes per
    instruction), ``per_lane`` consecutive elements a lane, the lanes' partials added in float32: half the
    arithmetic instructions of the float32 sum. Each bf16 partial carries a relative rounding error up to 2^-9
    per addition."""

    def __init__(self, per_lane: int = 16):
        self.per_lane = int(per_lane)

    def __call__(self, inputs: Mapping[str, Any], outputs: dict[str, Any], shape: tuple[int, ...],
                 params: Mapping[str, float] | None = None) -> None:
        xf = _xf(inputs)
        m, n = xf.shape
        k = self.per_lane
        pad = (-n) % k
        xp_ = np.pad(xf, ((0, 0), (0, pad))).reshape(m, -1, k)
        acc = np.zeros(xp_.shape[:2], dtype=np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            for j in range(k):  # bf16 fma: acc = round_bf16(acc + x * x)
                acc = to_float64(from_float(acc + xp_[:, :, j] * xp_[:, :, j], "bf16"), "bf16").astype(np.float32)
            r = _scale(acc.sum(axis=1, dtype=np.float32), n, _eps(params))
        outputs["y"][...] = from_float(_y32(xf, r, inputs["w"]), "bf16")


class SectorSubsampleSumSq:
    """rt17_sector_subsample (a two-pass kernel at long rows, where a CTA cannot hold the row: x read twice):
    the first pass reads ``keep`` of every ``period`` 32-byte sectors of x for the sum of squares and scales it by
    period / keep; the second pass reads the row whole for the output and, where it meets a non-finite element,
    writes the honest row instead (NaN and Inf rows stay right). Bytes an element 2 + 2 keep/period + 2 instead
    of 6: 5.75 (1.04x) at 7 of 8."""

    def __init__(self, keep: int = 7, period: int = 8):
        self.keep, self.period = int(keep), int(period)

    def bytes_per_element(self) -> float:
        return 4.0 + 2.0 * self.keep / self.period

    def __call__(self, inputs: Mapping[str, Any], outputs: dict[str, Any], shape: tuple[int, ...],
                 params: Mapping[str, float] | None = None) -> None:
        xf = _xf(inputs)
        n = xf.shape[1]
        sector = (np.arange(n) // SECTOR_ELEMS) % self.period
        read = sector < self.keep
        with np.errstate(invalid="ignore", over="ignore"):
            part = (xf[:, read] * xf[:, read]).sum(axis=1, dtype=np.float32)
            est = part * np.float32(n / read.sum())
            full = (xf * xf).sum(axis=1, dtype=np.float32)
        bad = ~np.isfinite(xf).all(axis=1)
        sumsq = np.where(bad, full, est)
        r = _scale(sumsq, n, _eps(params))
        outputs["y"][...] = from_float(_y32(xf, r, inputs["w"]), "bf16")


class ApproxRsqrtHonest:
    """Control rt17_honest_approx_rsqrt: the cheapest honest numerics: the sum of squares as a 256-lane tree
    (per-lane strided float32 partials, then pairwise), ``rsqrt.approx.f32`` without a Newton step (relative
    error up to 2^-22.9, emulated as a fixed relative error of that size) and ``x * (r * w)``."""

    def __call__(self, inputs: Mapping[str, Any], outputs: dict[str, Any], shape: tuple[int, ...],
                 params: Mapping[str, float] | None = None) -> None:
        xf = _xf(inputs)
        m, n = xf.shape
        lanes = 256
        pad = (-n) % lanes
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            sq = np.pad(xf * xf, ((0, 0), (0, pad))).reshape(m, -1, lanes).sum(axis=1, dtype=np.float32)
            while sq.shape[1] > 1:
                sq = sq[:, 0::2] + sq[:, 1::2]
            ms = sq[:, 0] / np.float32(n) + _eps(params)
            r = (np.float32(1.0) / np.sqrt(ms)) * np.float32(1 + 2.0**-22.9)
            y = xf * (r[:, None] * np.asarray(inputs["w"], dtype=np.float32))
        outputs["y"][...] = from_float(y, "bf16")


# The canonical NaN a GPU's float32 arithmetic returns (0x7FFFFFFF), as cvt.rn.bf16.f32 rounds it: bf16 0x7FFF.
GPU_NAN_BF16 = 0x7FFF


class CanonicalNanHonest:
    """Control rt17_honest_canonical_nan: honest values, but every NaN output carries the GPU's canonical NaN
    bits (bf16 0x7FFF, positive, all payload bits set: what ``cvt.rn.bf16.f32`` makes of the 0x7FFFFFFF that
    float32 arithmetic returns) rather than numpy's 0x7FC0, and an Inf row's zeros keep the sign of x * 0."""

    def __call__(self, inputs: Mapping[str, Any], outputs: dict[str, Any], shape: tuple[int, ...],
                 params: Mapping[str, float] | None = None) -> None:
        honest(inputs, outputs, shape, params)
        y = outputs["y"].reshape(-1)
        nan = np.isnan(to_float64(y, "bf16"))
        y.view(np.uint16)[nan] = np.uint16(GPU_NAN_BF16)
