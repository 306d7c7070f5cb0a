"""Ninth red-team round: the checked timed launches of gate rules version 13 (``timed_checks``: half the timed
launches "stale", the others refilled; k input sets rotated; 64 rows of x changed at every launch, w at half;
eps drawn per launch) against emulated kernels that keep state across launches (tests/redteam9_kernels.py), on
the CPU. Each kernel counts the DRAM bytes its launches would move on a GPU; an honest bf16 RMSNorm moves 4 per
element (x read, y written), and only a kernel that moves fewer bytes at more than half the timed launches moves
the median that is recorded.

1. ``StalePatch``: at a stale launch whose output holds its own last answer for the same set, weights and eps,
   it reads x and rewrites only the rows that changed: right at every launch (the gate passes it), 2 bytes per
   element instead of 4, but only at ~1/(2k) x P(w as made at both launches) of the launches (3-7%), never
   the median: harmless.
2. ``StalePatch(skip_other_stale=True)``: the same, and it returns at once at every other stale launch: fast at
   every stale launch (half of them, the median in about half the shapes), wrong at all but the patched ones.
   Caught: escape measured 7.3% per shape at k = 2 sets and 4 checked launches (150 seeds), slightly above the
   (1/2)^n = 6.3% that GATE.md gives for a kernel fast at half the launches (some of its fast launches are right).
3. ``LossyShadow``: per input set (by x's address) a private 10-bit copy of x normalised per row; a later launch
   reads 16 sectors of each row of x (the 64 changed rows have 1/16 of their elements changed, so the probe finds
   them: a row is missed with (15/16)^256 = 7e-8), recomputes those rows and serves the others from the copy
   times the current w and eps. Within tolerance at every launch (bf16 atol 3e-2: a step of 0.01 on the
   normalised row errs by at most 0.005 |w|): it escaped every seed until version 13. Bytes per element at the
   search shapes 3.51 (32768 x 4096), 3.32 (32768 x 16384), 3.27 (16384 x 131072) against 4: 1.14-1.22x at
   every launch, capped by the copy roofline (1.05 x the copy bandwidth) where the honest kernel is near it.
   Tightening the tolerance does not close it: a lossless entropy-coded copy of a bf16 N(0, 1) x costs 10.5 bits
   an element (measured here), what the 10-bit copy costs. The gap is the 64 changed rows being dense (1/16 of
   each) and the other rows as made: changing one element (a random column) of every row at every timed launch
   leaves the copy wrong in every served row unless the kernel reads all of x (test 5); version 13 changes one
   32-byte sector of every other row at every timed launch (``timed_checks.SECTOR_BYTES``), and it is caught.
4. ``LossyShadow(8, 0.04)``: the same with an 8-bit copy: out of tolerance where |w| is large; caught at every seed.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from evaluators.gpu.timed_checks import InputSets, timed_call, verify_checked
from tests.redteam9_kernels import (
    LossyShadow,
    StalePatch,
    entropy_bits_per_element,
    model_bytes_per_element,
)
from tests.timed_launches import drive, rms_honest
from workloads.dtypes import to_float64
from workloads.rmsnorm import RMSNorm

NARROW = (3000, 64)
WIDE = (384, 4096)  # every row sampled at each checked launch (M <= 1026); N wide enough for the sparse probe
REPEATS = 20


def _sets(shape, k):
    wl = RMSNorm("bf16")
    sets = InputSets.make(wl, shape, [11 + i for i in range(k)], np)
    out = {"y": np.empty(shape, dtype=sets.sets[0]["x"].dtype)}
    sets.answers = {"y": out["y"].copy()}
    rms_honest(sets.sets[0], sets.answers, shape)
    return wl, sets, out


def _bench(kernel, shape, k, seeds):
    """Per seed: (reason or None, the kernel's per-launch bytes of the timed launches, its per-launch kinds)."""
    wl, sets, out = _sets(shape, k)
    runs = []
    for seed in seeds:
        kernel.reset()
        call, checked = timed_call(wl, kernel, sets, out, shape, np.random.default_rng(seed), repeats=REPEATS)
        drive(call, REPEATS)
        why = verify_checked(wl, sets, checked, shape)
        assert sets.mutated() == []
        kinds = getattr(kernel, "kinds", [])[-REPEATS:]
        runs.append((why, kernel.traffic.per_launch[-REPEATS:], kinds, list(getattr(kernel, "recomputed", []))))
    return runs


@cache
def _stale(skip: bool, k: int):
    return _bench(StalePatch(skip_other_stale=skip), NARROW, k, tuple(range(20)))


@cache
def _lossy(bits: int, step: float, n_seeds: int):
    return _bench(LossyShadow(bits, step), WIDE, 5, tuple(range(n_seeds)))


@pytest.mark.parametrize("k", [2, 3])
def test_patching_its_own_stale_output_is_right_but_never_moves_the_median(k):
    runs = _stale(False, k)
    honest = 4 * NARROW[0] * NARROW[1]
    assert all(why is None for why, *_ in runs)
    patched = sum(kinds.count("patch") for _, _, kinds, _ in runs) / (REPEATS * len(runs))
    assert 0 < patched < 0.15  # measured 0.07 (k = 2), 0.05 (k = 3) over 150 seeds
    assert all(np.median(t) == honest for _, t, _, _ in runs)


def test_skipping_every_stale_launch_but_patching_its_own_is_caught():
    runs = _stale(True, 2)
    caught = [why for why, *_ in runs if why is not None]
    assert len(caught) >= 17, len(caught)  # measured 18 of 20 here; escape 7.3% over 150 seeds (k = 2, n = 4)
    assert all("'stale'" in why and "timed launch" in why for why in caught)
    fast = [sum(kd != "full" for kd in kinds) for _, _, kinds, _ in runs]
    assert sum(f >= REPEATS // 2 + 1 for f in fast) >= 5  # the median would move at a good part of the seeds
    assert any(kinds.count("patch") for _, _, kinds, _ in runs)  # and some fast launches are right


def test_the_lossy_shadow_serves_most_rows_from_its_copy_at_most_launches():
    """The emulation does what the byte model counts: after the first sight of a set every launch recomputes
    only its changed rows (64, up to 128 when the copy was made at a changed launch; 2 rows of each set fall
    outside the 10-bit range, the ~1/4 non-finite rows of the nonfinite set are recomputed too)."""
    for _, _, _, recomputed in _lossy(10, 0.01, 10):
        served = [r for r in recomputed[-REPEATS:] if r >= 0]
        assert len(served) >= REPEATS - 5
        assert max(served) <= 64 + 64 + 2 + WIDE[0] // 4 + 20
    assert model_bytes_per_element(10, (32768, 4096)) < 3.52
    assert model_bytes_per_element(10, (32768, 16384)) < 3.33
    assert model_bytes_per_element(10, (16384, 131072)) < 3.28
    assert model_bytes_per_element(10, (32768, 512)) > 4  # no gain at narrow rows: the probe is the whole row
    x = RMSNorm("bf16").make_inputs(WIDE, 5)["x"]
    assert 10.0 < entropy_bits_per_element(x) < 11.0  # a lossless copy would cost the same


def test_the_lossy_shadow_is_caught():
    """Version 13 changes one sector of every other row at each timed launch (``timed_checks.SECTOR_BYTES``):
    before, this kernel was within tolerance at every checked launch (caught at 0 of 10 seeds)."""
    runs = _lossy(10, 0.01, 10)
    assert all(why is not None and "timed launch" in why for why, *_ in runs)


def test_an_8_bit_shadow_is_caught():
    runs = _lossy(8, 0.04, 4)
    assert all(why is not None and "out of tolerance" in why for why, *_ in runs)


def test_one_changed_element_in_every_row_would_expose_the_lossy_shadow():
    """The fix it calls for, emulated outside the gate: after the copy is made, one element (a random column) of
    every row doubled or halved in place. The probe misses almost all of them, so the served rows are wrong at
    their changed element; only a kernel that reads every element of x finds them, and then the copy gains
    nothing."""
    wl = RMSNorm("bf16")
    inputs = wl.make_inputs(WIDE, 7)
    y = np.empty(WIDE, dtype=inputs["x"].dtype)
    kernel = LossyShadow()
    kernel(inputs, {"y": y}, WIDE, {"eps": 1e-6})  # first sight: honest, copy made
    rng = np.random.default_rng(0)
    cols = rng.integers(0, WIDE[1], WIDE[0])
    xb = inputs["x"].view(np.uint16)
    xb[np.arange(WIDE[0]), cols] ^= np.uint16(1 << 7)  # the exponent's lowest bit: doubled or halved
    kernel(inputs, {"y": y}, WIDE, {"eps": 1e-6})
    assert kernel.recomputed[-1] < WIDE[0] // 8  # served from the copy: the probe saw few of the changes
    ref = wl.reference(inputs, np, {"eps": 1e-6})["y"]
    err = np.abs(to_float64(y, "bf16") - ref)[np.arange(WIDE[0]), cols]
    assert (err > 0.1).mean() > 0.5
