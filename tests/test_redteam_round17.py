"""Round 17 against gate rules version 17's dynamic half, on the CPU: emulated RMSNorm kernels
(tests/redteam17_kernels.py, numpy launchers with the worker's signature) through the real gate
(``gate.run_gate`` at the small gate shapes: ``check_batch``, runs 1-4, every comparison), the checked timed
launches (``timed_checks.timed_call`` / ``verify_checked``, driven in the worker's order by
tests/timed_launches.py), and the objective's accounting (``objective.evaluate_objective`` into
``archive.grid.GridArchive``). No code under attack is mocked.

| cheat | trick | aims past | outcome |
|---|---|---|---|
| ``ShrunkTruncated()`` | every output rounded toward zero (``cvt.rz``) | the comparator | caught (wrong_result: one ulp at 16 <= \\|y\\| < 32 is 0.125, past the tolerance) |
| ``ShrunkTruncated(below=16)`` | rounded toward zero only where \\|y\\| < 16 | the comparator | hole: a bias of -0.5 ulp on every output passes |
| ``NanRowUnwritten`` | rows holding a NaN left unwritten where y already holds a NaN, at benchmark shapes only | the timed comparator | hole: a NaN row still holding the poison passes |
| ``SectorSubsampleSumSq(7, 8)`` | two-pass kernel's sum of squares from 7 of 8 sectors (N = 131072) | the comparator, row samples | hole: escape ~0.9999 per evaluation (computed) |
| fallback reference | an objective against a partial library set competes with one against the full set | objective / archive | hole: the same times displace the incumbent; closed in version 17 (the pool's ReferenceMemory) |
| ``PackedBf16SumSq`` (control) | bf16x2 accumulation of squares, 16 a lane | - | accepted |
| ``CanonicalNanHonest`` (control) | the GPU's canonical NaN bits (0x7FFF) in NaN rows | - | accepted |
| ``ApproxRsqrtHonest`` (control) | 256-lane tree, rsqrt.approx without Newton, x * (r * w) | - | accepted |
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from archive.grid import Dimension, GridArchive
from evaluators.gpu.gate import run_gate
from evaluators.gpu.timed_checks import CHECK_ROWS, CHECKED_LAUNCHES, InputSets, timed_call, verify_checked
from evaluators.objective import ObjectiveSpec, ReferenceMemory, evaluate_objective
from evaluators.types import ShapeResult, Status
from tests import redteam17_kernels as rt
from tests.timed_launches import drive, rms_honest
from workloads.dtypes import half_ulp, to_float64
from workloads.rmsnorm import GATE_SHAPES, SEARCH_SHAPES, RMSNorm

SMALL = [s for s in GATE_SHAPES if s[0] * s[1] <= 1 << 22]


@pytest.fixture(scope="module")
def wl():
    return RMSNorm("bf16")


def _timed(wl, kernel, shape, k, seeds, repeats=8):
    """Per seed the reason of ``verify_checked`` (None: every checked launch right), with ``k`` input sets as the
    worker makes them (set 0 normal, the others rotated), the naive answer of set 0 as the "answer" refill."""
    sets = InputSets.make(wl, shape, [11 + i for i in range(k)], np)
    out = {"y": np.empty(shape, dtype=sets.sets[0]["x"].dtype)}
    sets.answers = {"y": out["y"].copy()}
    rms_honest(sets.sets[0], sets.answers, shape)
    whys = []
    for seed in seeds:
        call, checked = timed_call(wl, kernel, sets, out, shape, np.random.default_rng(seed), repeats=repeats)
        drive(call, repeats)
        whys.append(verify_checked(wl, sets, checked, shape))
        assert sets.mutated() == []
    return whys, sets


def _signed_error_in_half_ulps(wl, kernel, seed=5, shape=(199, 4096)):
    """Mean of (out - ref) / half_ulp(ref) * sign(ref) over the finite nonzero outputs of one launch on normal
    inputs: the direction and size of a kernel's systematic error (0 for round to nearest)."""
    inputs = wl.make_inputs(shape, seed, "normal")
    out = {"y": np.empty(shape, dtype=inputs["x"].dtype)}
    kernel(inputs, out, shape, {"eps": 1e-6})
    ref = wl.reference(inputs, np, {"eps": 1e-6})["y"]
    got = to_float64(out["y"], "bf16")
    ok = np.isfinite(ref) & (ref != 0)
    return float(np.mean((got[ok] - ref[ok]) / half_ulp(ref[ok], "bf16") * np.sign(ref[ok])))


# ------------------------------------------------------------------------------------------ controls


@pytest.mark.parametrize("name", ["honest", "packed_bf16_sumsq", "canonical_nan", "approx_rsqrt"])
def test_honest_emulations_with_unusual_numerics_pass_the_gate_and_the_checked_launches(name, wl):
    """No false rejection: bf16x2 accumulation of squares (16 a lane), the GPU's canonical NaN bits in NaN rows
    (not the poison 0x7FA5, not numpy's 0x7FC0), a 256-lane tree with rsqrt.approx and x * (r * w)."""
    kernel = {"honest": rt.honest, "packed_bf16_sumsq": rt.PackedBf16SumSq(), "canonical_nan": rt.CanonicalNanHonest(),
              "approx_rsqrt": rt.ApproxRsqrtHonest()}[name]
    for seed in (1, 2):
        res = run_gate(wl, kernel, seed=seed, shapes=SMALL)
        assert res.status == Status.OK, res.reason
    whys, sets = _timed(wl, kernel, (384, 1024), 5, [0, 1])
    assert "nonfinite" in sets.distributions and whys == [None, None]


def test_the_canonical_nan_control_writes_nan_rows_with_the_gpu_bits(wl):
    inputs = wl.make_inputs((7, 760), 3, "nonfinite")
    out = {"y": np.empty((7, 760), dtype=inputs["x"].dtype)}
    rt.CanonicalNanHonest()(inputs, out, (7, 760), {"eps": 1e-6})
    bits = out["y"].view(np.uint16)
    assert (bits[0] == rt.GPU_NAN_BF16).all()  # row 0 holds a NaN under "nonfinite"


# ------------------------------------------------------------------------------------------ biased rounding


def test_rounding_every_output_toward_zero_is_caught(wl):
    """cvt.rz instead of cvt.rn: one ulp at 16 <= |y| < 32 is 0.125, past atol + rtol |y| + half an ulp (at most
    0.1245 there), so the few outputs that large fail; measured: caught at 6 of seeds 0-7 of the small gate
    alone (escape ~1/4 per gate; the checked timed launches meet such outputs too)."""
    results = [run_gate(wl, rt.ShrunkTruncated(), seed=s, shapes=SMALL) for s in range(8)]
    caught = [r for r in results if r.status == Status.WRONG_RESULT]
    assert len(caught) >= 5
    assert all("out of tolerance" in r.reason for r in caught)


def test_rounding_toward_zero_below_16_passes_and_is_biased_by_half_an_ulp(wl):
    """The mechanism of the hole below: round toward zero where |y| < 16 (one ulp there is at most 0.0625, inside
    atol 3e-2 + half an ulp), to nearest above. The gate passes it at every seed, the checked launches at every
    seed, and its mean signed error is half an ulp toward zero (an honest kernel's is ~0)."""
    biased = rt.ShrunkTruncated(below=16.0)
    assert all(run_gate(wl, biased, seed=s, shapes=SMALL).status == Status.OK for s in range(4))
    whys, _ = _timed(wl, biased, (384, 4096), 5, [0, 1])
    assert whys == [None, None]
    assert abs(_signed_error_in_half_ulps(wl, rt.honest)) < 0.02
    assert _signed_error_in_half_ulps(wl, biased) < -0.45


@pytest.mark.xfail(strict=True, reason="round 17 open hole: the comparator (gate.compare, the fused row check) "
                   "bounds each element's |error| and never the mean signed error, so a systematic bias of half "
                   "an ulp toward zero on every output (cvt.rz below |y| = 16) passes every check")
def test_a_kernel_biased_by_half_an_ulp_is_rejected(wl):
    biased = rt.ShrunkTruncated(below=16.0)
    assert any(run_gate(wl, biased, seed=s, shapes=SMALL).status != Status.OK for s in range(4))


# ------------------------------------------------------------------------------------------ NaN rows


def _benchmark_only(shape):
    """The trick's shape test: M >= 2048 and N a multiple of 256 other than 8192 (every search shape; no gate
    shape); the emulation runs at M = 2048 for time."""
    return shape[0] >= 2048 and shape[1] % 256 == 0 and shape[1] != 8192


def test_the_nan_row_trick_fires_at_every_search_shape_and_no_gate_shape():
    assert all(_benchmark_only(s) for s in SEARCH_SHAPES)
    assert not any(_benchmark_only(s) for s in GATE_SHAPES)


def test_the_gate_catches_unwritten_nan_rows_where_it_looks(wl):
    """The same trick switched on at the gate's shapes: the gate passes its poison pattern to the comparator,
    so an element still holding it fails even where the reference is NaN."""
    res = run_gate(wl, rt.NanRowUnwritten(lambda s: True), seed=3, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT and "never written" in res.reason


@pytest.mark.xfail(strict=True, reason="round 17 open hole: the checked timed launches compare values only "
                   "(timed_checks.verify_checked calls compare without the refill pattern), so a row holding a NaN "
                   "left unwritten, still holding the 'nan' refill's poison or a stale NaN, passes; at benchmark "
                   "shapes only the gate never sees it")
def test_unwritten_nan_rows_at_the_timed_launches_are_rejected(wl):
    kernel = rt.NanRowUnwritten(_benchmark_only)
    whys, sets = _timed(wl, kernel, (2048, 512), 5, [0, 1, 2, 3], repeats=20)
    assert "nonfinite" in sets.distributions and kernel.skipped_rows > 0  # it fired
    assert all(w is not None for w in whys)


# ------------------------------------------------------------------------------------------ subsampled sum of squares


def test_a_half_sector_subsample_is_caught_at_long_rows(wl):
    whys, _ = _timed(wl, rt.SectorSubsampleSumSq(1, 2), (48, 131072), 2, [0], repeats=4)
    assert whys[0] is not None and "out of tolerance" in whys[0]


@pytest.mark.xfail(strict=True, reason="round 17 open hole: a two-pass kernel's sum of squares from 7 of 8 "
                   "sectors at N = 131072 errs by ~0.08% (sd) of the row scale; the comparator admits 0.36-0.46% at "
                   "the largest |y| of a row, so a row fails with ~1e-8 and the 4 x 1026 sampled rows of a shape "
                   "escape at ~0.9999 per evaluation (1.04x fewer bytes than the honest two-pass kernel)")
def test_a_seven_of_eight_sector_subsample_is_rejected(wl):
    kernel = rt.SectorSubsampleSumSq(7, 8)
    shape = (48, 131072)
    whys, _ = _timed(wl, kernel, shape, 2, [0, 1], repeats=4)
    # the escape per evaluation from the scale error's spread and each row's tolerance margin (normal inputs)
    inputs = wl.make_inputs(shape, 21, "normal")
    x = to_float64(inputs["x"], "bf16")
    keep = (np.arange(shape[1]) // rt.SECTOR_ELEMS) % kernel.period < kernel.keep
    est = (x[:, keep] ** 2).mean(axis=1) / (x * x).mean(axis=1)
    sd = float(np.std(0.5 * (est - 1.0)))  # relative error of rsqrt: half that of the mean square
    ref = wl.reference(inputs, np, {"eps": 1e-6})["y"]
    margin = float(np.median([np.min((3e-2 + 1e-3 * np.abs(r[r != 0])) / np.abs(r[r != 0])) for r in ref]))
    p_row = math.erfc(margin / sd / math.sqrt(2))
    escape = (1 - p_row) ** (CHECKED_LAUNCHES * (CHECK_ROWS + 2))
    assert kernel.bytes_per_element() == 5.75
    assert any(w is not None for w in whys) or escape < 0.5, (sd, margin, p_row, escape)


# ------------------------------------------------------------------------------------------ objective accounting


# Medians (µs) at RMSNorm's search shapes, of the order measured on the H200 (GPU_NOTES.md): QuACK leads at
# 131072, torch.compile below.
TIMES = {(32768, 512): {"torch_compile": 18.0, "liger": 21.0, "quack": 20.0, "quack_tuned": 19.5, "torch": 40.0},
         (32768, 4096): {"torch_compile": 130.0, "liger": 133.0, "quack": 131.0, "quack_tuned": 131.0, "torch": 300.0},
         (32768, 16384): {"torch_compile": 520.0, "liger": 540.0, "quack": 525.0, "quack_tuned": 522.0,
                          "torch": 1200.0},
         (16384, 131072): {"torch_compile": 2300.0, "liger": 2400.0, "quack": 2080.0, "quack_tuned": 2050.0,
                           "torch": 5000.0}}
KERNEL = {(32768, 512): 19.0, (32768, 4096): 132.0, (32768, 16384): 525.0, (16384, 131072): 2100.0}


def _shapes(wl, drop=()):
    out = []
    for shape, t in KERNEL.items():
        base = {n: v for n, v in TIMES[shape].items() if (shape, n) not in drop}
        gbps = wl.gbps(shape, t)
        out.append(ShapeResult(shape=shape, dtype="bf16", time_us=t, gbps=gbps, frac_copy=gbps / 4200.0,
                               baseline_us=base))
    return out


def test_a_missing_library_inflates_the_objective_of_the_same_times(wl):
    """The mechanism: the same kernel times, measured on a worker where QuACK failed at 16384 x 131072 (the
    shape it leads), are judged against torch.compile there: the objective grows by (2300/2050)^(1/4)."""
    spec = ObjectiveSpec()
    full = evaluate_objective(_shapes(wl), spec)
    drop = {((16384, 131072), "quack"), ((16384, 131072), "quack_tuned")}
    part = evaluate_objective(_shapes(wl, drop), spec)
    assert part.missing == {"16384x131072": ["quack", "quack_tuned"]} and part.name == "best_library"
    assert part.value / full.value == pytest.approx((2300.0 / 2050.0) ** 0.25)
    # where no reference ran at one shape, the value is a fraction of the copy rate: another scale entirely
    none = evaluate_objective(_shapes(wl, {((32768, 512), n) for n in TIMES[(32768, 512)]}), spec)
    assert none.name == "copy_roofline" and none.value < full.value


def test_an_objective_against_a_partial_reference_does_not_displace_the_full_one(wl):
    """Closed in gate rules version 17 (a round-17 hole until then): the pool judges a contender missing from one
    evaluation at its last time in the pool (``objective.ReferenceMemory``, ``GPUPool.evaluate``), so the same
    kernel times score the same objective whether or not QuACK ran on this worker this time, and do not displace
    the elite judged against the full set."""
    spec = ObjectiveSpec()
    memory = ReferenceMemory(spec)
    first, filled = memory.fill(_shapes(wl))
    full = evaluate_objective(first, spec)
    assert filled == {}
    drop = {((16384, 131072), "quack"), ((16384, 131072), "quack_tuned")}
    again, filled = memory.fill(_shapes(wl, drop))
    part = evaluate_objective(again, spec)
    assert filled == {"16384x131072": ["quack", "quack_tuned"]} and part.missing == {}
    assert part.value == pytest.approx(full.value)
    archive = GridArchive([Dimension("registers", (0.0, 64.0, 255.0))])
    archive.add(1, full.value, {"registers": 40.0})
    res = archive.add(2, part.value, {"registers": 40.0})
    assert not res.added, (full.value, part.value)
