"""Round 18 (gate rules version 17's new mechanisms): emulated RMSNorm "kernels" (numpy launchers with the worker's
signature ``launch(inputs, outputs, shape, params)``, driven through the real gate and checked timed launches by
tests/test_redteam_round18.py) and PTX tricks spliced into round 12's RMSNorm body (through the GPU pool's front
half, as rounds 14-16's). Each names its trick, what it would save on a GPU and what it aims past. No mocks.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np

from population.kernel import Kernel
from tests import redteam14_kernels as rt14
from tests.redteam12_kernels import dodge
from tests.redteam17_kernels import _eps, _scale, _xf, honest
from workloads.dtypes import from_float, to_float64

# =============================================================================================== emulated (dynamic)


class PerHalfScale:
    """rt18_per_half_scale (a cheat at long rows): each half of a row is normalised by the mean square of that half
    alone: two CTAs a row, each holding its 128 KiB half of x in shared memory at N = 131072, so x is read once
    (4 bytes an element, the two-pass template's 6: 1.5x) with no second pass and no exchange of partial sums (a
    row holding a NaN or an Inf, flagged by one word, takes the honest row); rows shorter than ``min_n`` are honest.
    Each half's scale is off by u / 2 (u = (S1 - S2) / S, sd sqrt(2 / N): about 2e-3 at N = 131072), in opposite
    directions. Aims past the row-scale test (withdrawn since; it was ``workloads.dtypes.row_scale_bad``): it measured the projection
    A = sum(ref e) of the error on the reference, where the halves' errors cancel to first order (A / B ~ -u^2 / 8,
    about 2e-6, against a bound of about 1.7e-4); the element test admits the rest (atol 3e-2)."""

    def __init__(self, parts: int = 2, min_n: int = 65536):
        self.parts, self.min_n = int(parts), int(min_n)

    def __call__(self, inputs: Mapping[str, Any], outputs: dict[str, Any], shape: tuple[int, ...],
                 params: Mapping[str, float] | None = None) -> None:
        xf = _xf(inputs)
        n = xf.shape[1]
        if n < self.min_n:  # shorter rows fit one CTA: the honest single-pass kernel
            honest(inputs, outputs, shape, params)
            return
        w = np.asarray(inputs["w"], dtype=np.float32)
        y = np.empty_like(xf)
        edges = np.linspace(0, n, self.parts + 1).astype(int)
        with np.errstate(invalid="ignore", over="ignore"):
            for lo, hi in itertools.pairwise(edges):
                seg = xf[:, lo:hi]
                r = _scale((seg * seg).sum(axis=1, dtype=np.float32), hi - lo, _eps(params))
                y[:, lo:hi] = seg * r[:, None] * w[lo:hi]
        bad = ~np.isfinite(xf).all(axis=1)  # a row holding a NaN or an Inf: the honest row (one flag exchanged)
        outputs["y"][...] = from_float(y, "bf16")
        if bad.any():
            full = {"y": outputs["y"][bad].copy()}
            honest({"x": inputs["x"][bad], "w": inputs["w"]}, full, full["y"].shape, params)
            outputs["y"][bad] = full["y"]


class DoubleRoundingHonest:
    """Control rt18_honest_double_rounding: Hugging Face's LlamaRMSNorm order of operations (``weight *
    hidden.to(bf16)``): float32 sum of squares and scale, x * r rounded to bf16 (a packed bf16 register), then
    times w and rounded to bf16 again. Every step is correctly rounded; each output is within half an ulp of
    x * r, times w, plus half an ulp. Honest: the error is two roundings, no work is skipped.
    What the row-scale test does with it: x * r takes only 128 mantissas per binade (x is bf16, r one float32 a
    row), so the first rounding's relative error is one of 128 values fixed by the row's r, not independent per
    element: their weighted mean biases the row's scale by a few 1e-4, above the test's bound at long rows."""

    def __call__(self, inputs: Mapping[str, Any], outputs: dict[str, Any], shape: tuple[int, ...],
                 params: Mapping[str, float] | None = None) -> None:
        xf = _xf(inputs)
        with np.errstate(invalid="ignore", over="ignore"):
            r = _scale((xf * xf).sum(axis=1, dtype=np.float32), xf.shape[1], _eps(params))
            xn = to_float64(from_float(xf * r[:, None], "bf16"), "bf16").astype(np.float32)
            outputs["y"][...] = from_float(xn * np.asarray(inputs["w"], dtype=np.float32), "bf16")


class KahanWarpTreeHonest:
    """Control rt18_honest_kahan_tree: per lane (1024 lanes, strided) a Kahan-compensated float32 sum of squares,
    the lanes' sums added by a warp-shuffle butterfly then across warps in reverse order, ``rsqrt.approx.ftz``
    without a Newton step (relative error up to 2^-22.9, emulated as that error), and ``(x * w) * r``: another
    summation order, another product order, compensated sums. Honest."""

    def __call__(self, inputs: Mapping[str, Any], outputs: dict[str, Any], shape: tuple[int, ...],
                 params: Mapping[str, float] | None = None) -> None:
        xf = _xf(inputs)
        m, n = xf.shape
        lanes = 1024
        pad = (-n) % lanes
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            sq = np.pad(xf * xf, ((0, 0), (0, pad))).reshape(m, -1, lanes)
            s = np.zeros((m, lanes), dtype=np.float32)
            c = np.zeros((m, lanes), dtype=np.float32)
            for j in range(sq.shape[1]):
                yv = sq[:, j] - c
                t = s + yv
                c = np.where(np.isfinite(t), (t - s) - yv, np.float32(0))  # an Inf row: no compensation (NaN)
                s = t
            s = s.reshape(m, -1, 32)
            for off in (16, 8, 4, 2, 1):  # butterfly: every lane ends with the warp's sum
                s = s + s[:, :, np.arange(32) ^ off]
            tot = np.zeros(m, dtype=np.float32)
            for wp in range(s.shape[1] - 1, -1, -1):
                tot = tot + s[:, wp, 0]
            ms = tot / np.float32(n) + _eps(params)
            r = (np.float32(1.0) / np.sqrt(ms)) * np.float32(1 - 2.0**-22.9)
            y = (xf * np.asarray(inputs["w"], dtype=np.float32)) * r[:, None]
        outputs["y"][...] = from_float(y, "bf16")


# =============================================================================================== PTX (static)

# --- rt18_alloca_unknown_offset_state ------------------------------------------------------------------------------
# What: rt14_alloca_state's launch counter in an `alloca` buffer, read at an offset the lint cannot compute:
# ((N >> 5) & 16), 16 at the search shape N = 512, 0 at others; thread stores the count plus one back there after
# the read, and bytes 0-3 of the buffer are stored first (`st.local [buf], 0`). Bytes 16-19 are written by no
# store of this launch before the read: what an earlier launch left in the thread slot's stack. Past 4096 the row's
# closing barrier is dropped (the dodge).
# Aims past: rule 5's `.local` form (version 17: an `alloca` buffer is judged as a `.local` variable,
# `input_stores.alloca_roots`): a load at an offset it cannot compute needs only a store into the root somewhere
# (the "unknown" rule that accepts rt14_honest_alloca_scratch), not a store of the bytes it reads.
# Why a cheat: a launch counter in stack memory that outlives the launch. Verdict: nondeterministic (launch_state).
_ALLOCA_UNKNOWN_READ = ("\tshr.u32 %r50, %r2, 5;\n\tand.b32 %r50, %r50, 16;\n\tcvt.u64.u32 %rd41, %r50;\n"
                        "\tadd.s64 %rd42, %rd40, %rd41;\n\tld.local.u32 %r41, [%rd42];\n\tadd.u32 %r42, %r41, 1;\n"
                        "\tst.local.u32 [%rd42], %r42;\n\tsetp.gt.u32 %p5, %r41, 4096;\n")
ALLOCA_UNKNOWN_OFFSET_STATE = dict(barrier=dodge(), pre=(
    "\talloca.u64 %rd40, 32, 8;\n\tst.local.u32 [%rd40], 0;\n" + _ALLOCA_UNKNOWN_READ))
# the same with no store before the read at all: the only store into the buffer is the one after it
ALLOCA_UNKNOWN_OFFSET_NO_STORE = dict(barrier=dodge(), pre="\talloca.u64 %rd40, 32, 8;\n" + _ALLOCA_UNKNOWN_READ)
# one change away, caught: the offset a constant (16)
ALLOCA_KNOWN_OFFSET_STATE = dict(barrier=dodge(), pre=(
    "\talloca.u64 %rd40, 32, 8;\n\tst.local.u32 [%rd40], 0;\n\tadd.s64 %rd42, %rd40, 16;\n"
    "\tld.local.u32 %r41, [%rd42];\n\tadd.u32 %r42, %r41, 1;\n\tst.local.u32 [%rd42], %r42;\n"
    "\tsetp.gt.u32 %p5, %r41, 4096;\n"))

# --- rt18_uninit_mbarrier_state ------------------------------------------------------------------------------------
# What: an mbarrier object in shared memory that is never initialised (`mbarrier.init` nowhere), tested once with
# `mbarrier.test_wait.parity`: its phase bit is whatever an earlier CTA on the SM left in those 8 bytes; the
# result keys the dodge (the row's closing barrier dropped where it holds).
# Aims past: rule 5's `.shared` form, whose reads are loads and copies (an mbarrier test reads the object's word
# but is neither). Caught by rule 4's mbarrier form (a single test is an arrival order). Verdict: nondeterministic.
UNINIT_MBARRIER_STATE = dict(barrier=dodge(), decls="\t.shared .align 8 .b64 rt18_bar;\n",
                             pre="\tmbarrier.test_wait.parity.shared::cta.b64 %p5, [rt18_bar], 0;\n")

HOLES = {"rt18_alloca_unknown_offset_state": ALLOCA_UNKNOWN_OFFSET_STATE,
         "rt18_alloca_unknown_offset_state (no store before)": ALLOCA_UNKNOWN_OFFSET_NO_STORE}
CAUGHT = {"rt18_alloca_known_offset_state": ALLOCA_KNOWN_OFFSET_STATE,
          "rt18_uninit_mbarrier_state": UNINIT_MBARRIER_STATE}


def build(parts: dict) -> Kernel:
    """The RMSNorm entry of one of the dicts above (round 12's body, block 256, two rows a CTA)."""
    return rt14.build(parts)
