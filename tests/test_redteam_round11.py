"""Round 11 against the static checks of the gate rules (evaluators/input_stores.py, evaluators/race_lint.py), on
the CPU: hand-written RMSNorm-ABI entries (tests/redteam11_kernels.py) through the GPU pool's front half
(``evaluators.pipeline.prepare``: ptxas for sm_90, the ABI, the input-store check, the race lint).

| kernel | trick | gate rules say | the checks give |
|---|---|---|---|
| ``rt11_zero_mix_absolute`` | constant address + (y & 0) | input_mutated | accepted (hole) |
| ``rt11_carry_launder`` | x's address rebuilt through the carry flag (add.cc / addc) + (y & 0) | input_mutated | accepted (hole) |
| ``rt11_param_array`` | x declared ``.param .u64 ...[1]`` + (y & 0) | input_mutated | accepted (hole) |
| ``rt11_popc_offset`` | (x - y) / 512 counted by ``bar.red.popc``, added to y | input_mutated | accepted (hole) |
| ``rt11_offset_expr_state`` | launch counter in a .global at ``slot+0`` + (y & 0) | nondeterministic | accepted (hole) |
| ``rt11_named_barrier_exchange`` | global-memory hand-off ``bar.arrive`` -> ``bar.sync`` | nondeterministic | accepted (hole) |
| ``rt11_ballot_zero_mix`` | ballot of x's address bits + (y & 0) | input_mutated | input_mutated |
| ``rt11_named_barrier_sync_exchange`` | the hand-off with ``bar.sync`` on both sides | nondeterministic | nondeterministic |
| ``rt11_honest_popc`` (control) | ``bar.red.popc`` of data values | accepted | accepted |
| ``rt11_named_barrier_shared_handoff`` (control) | the hand-off through shared memory | accepted | nondeterministic (false rejection) |

Each hole is an ``xfail(strict=True)``: it turns into a failure (to be made a plain test) once the check is fixed.
"""

from __future__ import annotations

import pytest

from evaluators.input_stores import check_input_stores
from evaluators.pipeline import Rejected, prepare
from evaluators.race_lint import race_lint
from evaluators.types import Status
from population.kernel import Kernel
from targets.spec import get_gpu
from tests import redteam11_kernels as rt
from workloads.rmsnorm import RMSNorm


@pytest.fixture(scope="module")
def wl():
    return RMSNorm("bf16")


def front_half(kernel: Kernel, wl: RMSNorm):
    """``prepare`` at the first search shape: the Prepared, or the Rejected it raised."""
    try:
        return prepare(kernel, wl, get_gpu("h200"), wl.search_shapes[:1])
    except Rejected as r:
        return r


def assert_rejected(kernel: Kernel, wl: RMSNorm, status: Status, step: str) -> Rejected:
    r = front_half(kernel, wl)
    assert isinstance(r, Rejected), "accepted by the front half"
    assert r.step != "compile", r.reason  # every kernel here assembles for sm_90
    assert (r.status, r.step) == (status, step), r.reason
    return r


def assert_accepted(kernel: Kernel, wl: RMSNorm) -> None:
    r = front_half(kernel, wl)
    assert not isinstance(r, Rejected), (r.status, r.step, r.reason)


def test_every_kernel_assembles_for_sm_90(wl):
    """Guards the xfails below: an accepted kernel passed ptxas, and a rejected one got past the compile step."""
    for body, kw in [(rt.ZERO_MIX_ABSOLUTE, {}), (rt.CARRY_LAUNDER, {}), (rt.PARAM_ARRAY, {"xdims": rt.PARAM_ARRAY_DIMS}),
                     (rt.POPC_OFFSET, {}), (rt.OFFSET_EXPR_STATE, {"globals_": rt.OFFSET_EXPR_GLOBALS}),
                     (rt.NAMED_BARRIER_EXCHANGE, {"store": False}), (rt.BALLOT_ZERO_MIX, {}),
                     (rt.NAMED_BARRIER_SYNC_EXCHANGE, {}), (rt.HONEST_POPC, {}),
                     (rt.NAMED_BARRIER_SHARED_HANDOFF, {"store": False})]:
        r = front_half(rt.entry(body, **kw), wl)
        assert not isinstance(r, Rejected) or r.step not in ("compile", "entry", "abi"), r.reason


# ------------------------------------------------------------------------------------------ input-store holes


def test_absolute_address_plus_a_zero_of_y_is_rejected(wl):
    assert_rejected(rt.entry(rt.ZERO_MIX_ABSOLUTE), wl, Status.INPUT_MUTATED, "input_stores")


def test_input_address_rebuilt_through_the_carry_flag_is_rejected(wl):
    assert_rejected(rt.entry(rt.CARRY_LAUNDER), wl, Status.INPUT_MUTATED, "input_stores")


def test_input_declared_as_a_one_element_param_array_is_rejected(wl):
    k = rt.entry(rt.PARAM_ARRAY, xdims=rt.PARAM_ARRAY_DIMS)
    assert "rmsnorm_param_0[1]" in k.ptx
    assert_rejected(k, wl, Status.INPUT_MUTATED, "input_stores")


def test_an_input_distance_counted_by_a_barrier_reduction_is_rejected(wl):
    assert_rejected(rt.entry(rt.POPC_OFFSET), wl, Status.INPUT_MUTATED, "input_stores")


def test_ballot_bits_of_the_input_plus_a_zero_of_y_are_rejected(wl):
    """Regression: y's zero does not hide x's bit root."""
    r = assert_rejected(rt.entry(rt.BALLOT_ZERO_MIX), wl, Status.INPUT_MUTATED, "input_stores")
    assert "input 'x'" in r.reason


# ------------------------------------------------------------------------------------------ race lint holes


def test_a_launch_counter_addressed_through_an_address_expression_is_rejected(wl):
    k = rt.entry(rt.OFFSET_EXPR_STATE, globals_=rt.OFFSET_EXPR_GLOBALS)
    r = assert_rejected(k, wl, Status.NONDETERMINISTIC, "race_lint")
    assert "launch_state" in r.reason


def test_the_counter_addressed_by_its_symbol_is_rejected(wl):
    """Regression: the same counter named by `mov.u64 %rd, rt11_slot` is rule 5's launch_state."""
    body = rt.OFFSET_EXPR_STATE.replace("rt11_slot+0", "rt11_slot")
    r = assert_rejected(rt.entry(body, globals_=rt.OFFSET_EXPR_GLOBALS), wl, Status.NONDETERMINISTIC, "race_lint")
    assert "launch_state" in r.reason


@pytest.mark.xfail(strict=True, reason="hole: rule 8 looks for a barrier on a path from the write to the read; "
                                       "a producer's bare bar.arrive is not counted and the consumer's bar.sync "
                                       "is on the other branch, so a named-barrier hand-off through global "
                                       "memory has no such path")
def test_a_global_memory_handoff_through_a_named_barrier_is_rejected(wl):
    k = rt.entry(rt.NAMED_BARRIER_EXCHANGE, store=False)
    r = assert_rejected(k, wl, Status.NONDETERMINISTIC, "race_lint")
    assert "global_exchange" in r.reason


def test_the_handoff_with_bar_sync_on_both_sides_is_rejected(wl):
    """Regression: rule 8 with the barrier on the write's own path."""
    r = assert_rejected(rt.entry(rt.NAMED_BARRIER_SYNC_EXCHANGE), wl, Status.NONDETERMINISTIC, "race_lint")
    assert "global_exchange" in r.reason


# ------------------------------------------------------------------------------------------ honest controls


def test_the_honest_skeleton_is_accepted(wl):
    assert_accepted(rt.entry(""), wl)


def test_an_honest_barrier_reduction_of_data_is_accepted(wl):
    k = rt.entry(rt.HONEST_POPC)
    assert check_input_stores(k, wl).ok
    assert race_lint(k, None, wl.uses_atomics, wl.uses_atomics, wl.uses_atomics, wl.uses_atomics).ok
    assert_accepted(k, wl)


@pytest.mark.xfail(strict=True, reason="false rejection: rule 5's shared form asks for a path from the entry "
                                       "through a store into smem before the load; in a named-barrier hand-off "
                                       "the producers' stores are on the other branch")
def test_an_honest_named_barrier_handoff_through_shared_memory_is_accepted(wl):
    assert_accepted(rt.entry(rt.NAMED_BARRIER_SHARED_HANDOFF, store=False), wl)
