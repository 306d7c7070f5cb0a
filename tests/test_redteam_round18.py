"""Round 18 against gate rules version 17's new mechanisms as first written (the comparator's row-scale test, since
withdrawn: its false rejection of Hugging Face's double rounding below showed that a honest formulation errs in
scale by up to 2^-9, more than round 17's subsampling cheat), on the CPU: emulated RMSNorm kernels
(tests/redteam18_kernels.py) through the real gate (``gate.run_gate``) and checked timed launches
(``timed_checks.timed_call`` / ``verify_checked``), the pool's ``objective.ReferenceMemory``, and PTX tricks through
the GPU pool's front half (``evaluators.pipeline.prepare``). No code under attack is mocked.

| kernel | trick | expected | outcome |
|---|---|---|---|
| ``rt18_alloca_unknown_offset_state`` | launch counter in an ``alloca`` buffer read at an offset the lint cannot compute | nondeterministic (launch_state) | hole (accepted); its no-store-before spelling caught since version 17 |
| ``rt18_alloca_known_offset_state`` | the same at a constant offset | nondeterministic | caught |
| ``rt18_uninit_mbarrier_state`` | an mbarrier never initialised, tested once | nondeterministic | caught (atomic_order) |
| ``PerHalfScale`` | each half of a long row scaled by its own half's mean square | wrong_result | caught by the element test (the withdrawn row-scale test was blind to it) |
| (accounting) first evaluation | a library missing from the pool's first evaluation | the same objective as against the full set | hole |
| ``DoubleRoundingHonest`` (control) | HF LlamaRMSNorm order: bf16(w * bf16(x * r)) | accepted | false rejection by the row-scale test (withdrawn); the element test still rejects an element at one seed (open) |
| ``KahanWarpTreeHonest`` (control) | Kahan per lane, butterfly + reversed warp order, rsqrt.approx, (x * w) * r | accepted | accepted |
"""

from __future__ import annotations

import numpy as np
import pytest

from evaluators.gpu.gate import run_gate
from evaluators.objective import ObjectiveSpec, ReferenceMemory, evaluate_objective
from evaluators.types import Status
from tests import redteam18_kernels as rt
from tests.front_half import assert_accepted, assert_assembles_and_launches, assert_rejected
from tests.test_redteam_round17 import SMALL, _shapes, _timed
from workloads.dtypes import half_ulp, to_float64
from workloads.rmsnorm import RMSNorm

ND = Status.NONDETERMINISTIC


@pytest.fixture(scope="module")
def wl():
    return RMSNorm("bf16")


# ------------------------------------------------------------------------------------------ static (PTX)


@pytest.mark.parametrize("name", [*rt.HOLES, *rt.CAUGHT])
def test_every_kernel_assembles_for_sm_90_and_launches(name, wl):
    assert_assembles_and_launches(rt.build({**rt.HOLES, **rt.CAUGHT}[name]), wl)


def test_an_alloca_counter_at_a_constant_offset_is_rejected(wl):
    assert_rejected(rt.build(rt.ALLOCA_KNOWN_OFFSET_STATE), wl, ND, "race_lint", "launch_state", "offset 16",
                    "alloca:rmsnorm:0")


def test_an_uninitialised_mbarrier_tested_once_is_rejected(wl):
    assert_rejected(rt.build(rt.UNINIT_MBARRIER_STATE), wl, ND, "race_lint", "atomic_order", "mbarrier.test_wait")


_STORED_FIRST = "rt18_alloca_unknown_offset_state"
_NO_STORE = "rt18_alloca_unknown_offset_state (no store before)"


@pytest.mark.xfail(strict=True, reason="round 18 open hole: rule 5's .local form lets a load at an offset it cannot "
                   "compute pass when a store into the alloca buffer reaches it, whatever bytes it wrote, so a launch "
                   "counter at bytes 16-19 read after a store of bytes 0-3 is accepted (the form's documented "
                   "unknown-offset gap)")
def test_an_alloca_counter_at_an_unknown_offset_is_rejected():
    assert_rejected(rt.build(rt.HOLES[_STORED_FIRST]), RMSNorm("bf16"), ND, "race_lint", "launch_state")


def test_an_alloca_counter_read_before_any_store_is_rejected(wl):
    """Closed in gate rules version 17 (a round-18 hole until then): an alloca'd buffer read at an offset the lint
    cannot compute needs a store of its function reaching the load (``race_lint._alloca_stores_reaching``), not
    any store anywhere."""
    assert_rejected(rt.build(rt.HOLES[_NO_STORE]), wl, ND, "race_lint", "launch_state",
                    "which no store of this function reaches first")


def test_the_unknown_offset_hole_is_accepted_today(wl):
    """The mechanism of the open hole, asserted: the stored-first spelling gets through the whole front half."""
    assert_accepted(rt.build(rt.HOLES[_STORED_FIRST]), wl)


# ------------------------------------------------------------------------------------------ per-half scale


def _scale_error(got, ref):
    """Per row, sum(ref (got - ref)) / sum(ref^2): the projection of a row's error on its reference, the statistic
    of the withdrawn row-scale test (its bound: 8 sqrt(sum(ref^2 h^2) / 3) / sum(ref^2) + 1e-4)."""
    return (ref * (got - ref)).sum(axis=-1) / (ref * ref).sum(axis=-1)


def _scale_bound(ref):
    h = half_ulp(ref, "bf16")
    b = (ref * ref).sum(axis=-1)
    return 8.0 * np.sqrt((ref * ref * h * h).sum(axis=-1) / 3.0) / b + 1e-4


def test_a_per_half_scale_is_blind_to_a_row_scale_statistic_but_caught_by_the_element_test(wl):
    """Each half normalised by its own mean square: the halves' scale errors (~2e-3) cancel in A = sum(ref e), so a
    row-scale statistic passes every row; the element test (atol 3e-2 + rtol + half an ulp) catches rows with large
    |y| at the checked timed launches of N = 131072."""
    shape = (32, 131072)
    inputs = wl.make_inputs(shape, 7, "normal")
    out = {"y": np.empty(shape, dtype=inputs["x"].dtype)}
    rt.PerHalfScale()(inputs, out, shape, {"eps": 1e-6})
    ref = wl.reference(inputs, np, {"eps": 1e-6})["y"]
    got = to_float64(out["y"], "bf16")
    assert (np.abs(_scale_error(got, ref)) <= _scale_bound(ref)).all()
    x = to_float64(inputs["x"], "bf16")
    h = shape[1] // 2
    u = ((x[:, :h] ** 2).sum(1) - (x[:, h:] ** 2).sum(1)) / (x * x).sum(1)
    assert float(np.std(u / 2)) > 1e-3  # each half's scale is off by about 2e-3: ten times the row test's bound
    whys, _ = _timed(wl, rt.PerHalfScale(), (48, 131072), 2, [0], repeats=4)
    assert whys[0] is not None and "out of tolerance" in whys[0], whys


# ------------------------------------------------------------------------------------------ honest controls


def test_kahan_and_a_butterfly_tree_pass_the_gate_and_the_long_row_checks(wl):
    kernel = rt.KahanWarpTreeHonest()
    for seed in (1, 2):
        res = run_gate(wl, kernel, seed=seed, shapes=SMALL)
        assert res.status == Status.OK, res.reason
    whys, _ = _timed(wl, kernel, (48, 131072), 2, [0], repeats=4)
    assert whys == [None]


def test_double_rounding_keeps_every_element_within_tolerance_and_shifts_the_row_scale(wl):
    """The control's mechanism: every element passes the element test, but x * r rounded to bf16 first shifts the
    row's scale by up to 2^-9 (x takes 128 mantissas a binade, r is one number a row), past the withdrawn row-scale
    test's bound in about half the rows at N = 16384: more scale error than round 17's 7-of-8-sector subsample."""
    shape = (64, 16384)
    inputs = wl.make_inputs(shape, 4, "normal")
    out = {"y": np.empty(shape, dtype=inputs["x"].dtype)}
    rt.DoubleRoundingHonest()(inputs, out, shape, {"eps": 1e-6})
    ref = wl.reference(inputs, np, {"eps": 1e-6})["y"]
    got = to_float64(out["y"], "bf16")
    assert (np.abs(got - ref) <= 3e-2 + 1e-3 * np.abs(ref) + half_ulp(ref, "bf16")).all()
    assert (np.abs(_scale_error(got, ref)) > _scale_bound(ref)).mean() > 0.2  # measured: ~0.5 of the rows


@pytest.mark.xfail(strict=True, reason="round 18 false rejection, open: besides the withdrawn row-scale test, the "
                   "element test's allowance of half an ulp assumes one rounding; bf16(w * bf16(x * r)) rounds twice "
                   "and errs by up to about 0.75 ulp, just past atol + rtol |y| + half an ulp at |y| ~ 26 (gate seed 1: "
                   "0.1189 against 0.1187)")
def test_hugging_face_double_rounding_passes_the_gate_and_the_checked_launches(wl):
    """The row-scale test that rejected every seed (a round-18 false rejection) was withdrawn from version 17; the
    element test still rejects one element at one seed."""
    kernel = rt.DoubleRoundingHonest()
    for seed in (1, 2):
        res = run_gate(wl, kernel, seed=seed, shapes=SMALL)
        assert res.status == Status.OK, res.reason
    whys, _ = _timed(wl, kernel, (384, 4096), 2, [0], repeats=4)
    assert whys == [None], whys


# ------------------------------------------------------------------------------------------ ReferenceMemory


@pytest.mark.xfail(strict=True, reason="round 18 open hole: objective.ReferenceMemory remembers only what this pool "
                   "has measured, so when QuACK fails at 16384 x 131072 in the pool's first evaluation the candidate "
                   "is judged against torch.compile there (1.029x) and later ones with the same times cannot displace it")
def test_a_library_missing_from_the_first_evaluation_does_not_inflate_the_objective(wl):
    spec = ObjectiveSpec()
    memory = ReferenceMemory(spec)
    drop = {((16384, 131072), "quack"), ((16384, 131072), "quack_tuned")}
    first, _ = memory.fill(_shapes(wl, drop))
    inflated = evaluate_objective(first, spec)
    later, _ = memory.fill(_shapes(wl))
    full = evaluate_objective(later, spec)
    assert inflated.value == pytest.approx(full.value), (inflated.value, full.value, inflated.missing)
