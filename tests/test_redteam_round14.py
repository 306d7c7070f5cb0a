"""Round 14 against gate rules version 15, on the CPU: hand-written RMSNorm entries (tests/redteam14_kernels.py:
round 12's body with each trick spliced in) through the GPU pool's front half (``evaluators.pipeline.prepare``:
ptxas for sm_90, the ABI, the input-store check, the race lint), and one emulated kernel through the checked timed
launches (``timed_checks.timed_call`` / ``verify_checked``), as round 9's.

| kernel | trick | aims past | the checks give |
|---|---|---|---|
| ``rt14_envreg_dodge`` | barrier kept only while the driver-defined ``%envreg0..3`` XOR to 0 | rule 3's deny-list | nondeterministic (time_dependent; rule 3 an allow-list since version 16) |
| ``rt14_register_state`` | launch counter in a register read before any definition (3 spellings) | rule 5 (memory forms only) | nondeterministic (launch_state, register form, version 16); the "guarded" spelling accepted (hole) until version 17 |
| ``rt14_unset_retval_state`` | the counter as a callee's return value the callee never writes | rule 5, provenance | nondeterministic (launch_state, version 16) |
| ``rt14_alloca_state`` | the counter in ``alloca``'d stack memory, read before written | rule 5's ``.local`` form | nondeterministic (launch_state, address form; since version 17 the ``.local`` form: bytes no store wrote) |
| ``rt14_extern_shared_state`` | the counter in dynamic shared memory (``.extern .shared``) | rule 5's ``.shared`` form | nondeterministic (launch_state) |
| ``rt14_laundered_store_*`` | a store into x at y + (x - y), the distance through f64, a split, a shuffle, ``ld.param.v4`` | check 1 | input_mutated |
| ``rt14_subsampled_sumsq`` (emulated) | mean square from every 2nd element of the row | the comparator | wrong_result |
| ``rt14_honest_alloca_scratch`` (control) | ``alloca`` scratch written, then read | - | nondeterministic (false rejection); accepted since version 17 |
| ``rt14_honest_bulk_pipeline`` (control) | TMA bulk copy of the row into shared memory behind an mbarrier | - | accepted |
| ``rt14_honest_cp_async_double_buffer`` (control) | cp.async double buffer, ``wait_group 1`` | - | accepted |

The holes pass every static check; what the dynamic checks would do with them is in each kernel's comment
(tests/redteam14_kernels.py): the register forms keep state exactly as rt_local_state did, which the static rule
5 is the check against (the sanitizer replay runs in a fresh process). Nothing here was run on a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from evaluators import race_lint as rl
from evaluators.gpu.timed_checks import InputSets, timed_call, verify_checked
from evaluators.types import Status
from population.ast import SpecialRegister
from population.cfg import flat_instructions
from tests import redteam14_kernels as rt
from tests.front_half import assert_accepted, assert_assembles_and_launches, assert_rejected
from tests.timed_launches import drive, rms_honest
from workloads.rmsnorm import RMSNorm

ND = Status.NONDETERMINISTIC

ALL = {**rt.HOLES, **{f"rt14_register_state ({k})": v for k, v in rt.REGISTER_STATE_SPELLINGS.items()},
       **rt.CAUGHT, **rt.CONTROLS}


@pytest.fixture(scope="module")
def wl():
    return RMSNorm("bf16")


@pytest.mark.parametrize("name", list(ALL))
def test_every_kernel_assembles_for_sm_90_and_launches(name, wl):
    """Guards the xfails below (tests.front_half.assert_assembles_and_launches)."""
    assert_assembles_and_launches(rt.build(ALL[name]), wl)


# ------------------------------------------------------------------------------------------ why each hole passes


def test_envreg_is_a_special_register_that_the_time_list_does_not_name():
    """The mechanism of rt14_envreg_dodge: the parser knows %envreg<n> for a special register, rule 3's list of
    time registers (``race_lint._TIME_REGISTERS``) does not hold it; the allow-list of registers the launch fixes
    (``race_lint._LAUNCH_REGISTERS``, version 16) does not either, so rule 3 rejects it."""
    k = rt.build(rt.ENVREG_DODGE)
    srcs = {op.name for i in flat_instructions(k.module.function(k.entry)) if i.opcode == "mov" for op in i.operands
            if isinstance(op, SpecialRegister)}
    assert {"%envreg0", "%envreg1", "%envreg2", "%envreg3"} <= srcs
    assert not any(r.startswith("%envreg") for r in rl._TIME_REGISTERS)
    assert rl._unfixed_special("%envreg0") and not rl._unfixed_special("%tid.x")


# ------------------------------------------------------------------------------------------ the holes


def test_a_dodge_keyed_on_envreg_is_rejected(wl):
    assert_rejected(rt.build(rt.ENVREG_DODGE), wl, ND, "race_lint", "time_dependent", "%envreg")


@pytest.mark.parametrize("spelling", list(rt.REGISTER_STATE_SPELLINGS))
def test_a_launch_counter_in_an_undefined_register_is_rejected(spelling, wl):
    """"guarded" was an open hole until gate rules version 17: rule 5's register form counted a write on any earlier
    path, guarded or not; its guarded spelling (``race_lint._guarded_only_decisions``) follows a value read where
    only guarded writes reach it to the guard of a branch or barrier."""
    name = {"undefined": "%r40", "guarded": "%r40", "predicate": "%p12"}[spelling]
    r = assert_rejected(rt.build(rt.REGISTER_STATE_SPELLINGS[spelling]), wl, ND, "race_lint", "launch_state")
    assert f"register {name}" in r.reason


def test_a_launch_counter_in_an_unwritten_return_value_is_rejected(wl):
    r = assert_rejected(rt.build(rt.UNSET_RETVAL_STATE), wl, ND, "race_lint", "launch_state", "ld.param.b32")
    assert "rt14_none" in r.reason


# ------------------------------------------------------------------------------------------ caught kinds


def test_a_launch_counter_in_alloca_memory_is_rejected(wl):
    """Since the alloca fix an ``alloca`` buffer is judged as a ``.local`` variable of its own: the counter's load
    reads bytes no store wrote before it (rule 5's ``.local`` form), not merely an unvouched address."""
    r = assert_rejected(rt.build(rt.ALLOCA_STATE), wl, ND, "race_lint", "launch_state", "ld.local.u32")
    assert "reads 4 bytes at offset 0 of the .local variable 'alloca:rmsnorm:0'" in r.reason


def test_a_read_of_a_second_alloca_buffer_is_not_vouched_for_by_stores_into_the_first(wl):
    """Each ``alloca`` is its own buffer: scratch stored into the first (at an offset the lint cannot compute) does
    not vouch for a read of the second, which holds what the last thread on the slot left."""
    two = dict(rt.HONEST_ALLOCA_SCRATCH)
    two["pre"] = two["pre"].replace("\tld.local.f32 %f27, [%rd42];\n",
                                    "\talloca.u64 %rd43, 32, 8;\n\tadd.s64 %rd44, %rd43, %rd41;\n"
                                    "\tld.local.f32 %f27, [%rd44];\n")
    assert two["pre"] != rt.HONEST_ALLOCA_SCRATCH["pre"]
    r = assert_rejected(rt.build(two), wl, ND, "race_lint", "launch_state", "ld.local.f32")
    assert "alloca:rmsnorm:1" in r.reason


def test_a_launch_counter_in_dynamic_shared_memory_is_rejected(wl):
    assert_rejected(rt.build(rt.EXTERN_SHARED_STATE), wl, ND, "race_lint", "launch_state", "ld.shared.u32",
                    "rt14_dyn")


@pytest.mark.parametrize("spelling", list(rt.LAUNDERED_STORES))
def test_a_store_into_x_at_a_laundered_distance_is_rejected(spelling, wl):
    assert_rejected(rt.build(rt.LAUNDERED_STORES[spelling]), wl, Status.INPUT_MUTATED, "input_stores",
                    "st.global.u16", "input 'x' (param 0)")


# ------------------------------------------------------------------------------------------ emulated


SUB_SHAPE = (384, 4096)  # every row sampled at each checked launch (M <= 1026)
SUB_REPEATS = 8


def _checked(kernel, seeds) -> list[str | None]:
    wl = RMSNorm("bf16")
    sets = InputSets.make(wl, SUB_SHAPE, [11 + i for i in range(5)], np)
    out = {"y": np.empty(SUB_SHAPE, dtype=sets.sets[0]["x"].dtype)}
    sets.answers = {"y": out["y"].copy()}
    rms_honest(sets.sets[0], sets.answers, SUB_SHAPE)
    whys = []
    for seed in seeds:
        call, checked = timed_call(wl, kernel, sets, out, SUB_SHAPE, np.random.default_rng(seed), repeats=SUB_REPEATS)
        drive(call, SUB_REPEATS)
        whys.append(verify_checked(wl, sets, checked, SUB_SHAPE))
        assert sets.mutated() == []
    return whys


def test_the_honest_emulation_passes_the_checked_launches():
    """Control of the emulation: stride 1 is the exact mean square."""
    assert _checked(rt.SubsampledSumSq(1), [0]) == [None]


def test_a_mean_square_from_every_second_element_is_caught():
    """The comparator's bf16 tolerance (atol 3e-2, rtol 1e-3 + half an ulp) does not admit the estimate: at
    N = 4096 a 2048-sample mean square errs by ~1.6% (sd), |y| up to ~4 |w| then errs past it (measured: ~2% of
    the checked elements out of tolerance at every seed)."""
    whys = _checked(rt.SubsampledSumSq(2), [0, 1])
    assert all(w is not None and "out of tolerance" in w and "timed launch" in w for w in whys), whys


# ------------------------------------------------------------------------------------------ honest controls


def test_an_honest_alloca_scratch_is_accepted(wl):
    """Round 14's false rejection, closed: the buffer ``alloca`` returns is a ``.local`` root of its own
    (``input_stores.alloca_roots``), so the load at an offset the lint cannot compute is judged by the ``.local``
    form (the thread stores into that buffer) instead of being rejected as an unvouched address."""
    assert_accepted(rt.build(rt.HONEST_ALLOCA_SCRATCH), wl)


def test_an_honest_bulk_copy_pipeline_is_accepted(wl):
    assert_accepted(rt.build(rt.HONEST_BULK_PIPELINE), wl)


def test_an_honest_cp_async_double_buffer_is_accepted(wl):
    assert_accepted(rt.build(rt.HONEST_CP_ASYNC), wl)
