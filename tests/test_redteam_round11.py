"""Round 11 against the static checks of the gate rules (evaluators/input_stores.py, evaluators/race_lint.py), on
the CPU: hand-written RMSNorm-ABI entries (tests/redteam11_kernels.py) through the GPU pool's front half
(``evaluators.pipeline.prepare``: ptxas for sm_90, the ABI, the input-store check, the race lint).

| kernel | trick | gate rules say | version 14 gave |
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

Every kernel now gets the verdict the gate rules say: the input-store holes closed in version 15
(evaluators/input_stores.py), the named-barrier pair through ``race_lint._barrier_jumps`` (another statement's
arrival at the same barrier hands what was done before it to the code past a wait: rule 8 follows it from the
write, rule 5's shared form counts the producers' stores).
"""

from __future__ import annotations

import pytest

from evaluators import race_lint as rl
from evaluators.input_stores import check_input_stores, provenance
from evaluators.pipeline import Rejected
from evaluators.race_lint import race_lint
from evaluators.types import Status
from population.cfg import basic_blocks
from tests import redteam11_kernels as rt
from tests.front_half import assert_accepted, assert_rejected, front_half
from workloads.rmsnorm import RMSNorm


@pytest.fixture(scope="module")
def wl():
    return RMSNorm("bf16")


def test_every_kernel_assembles_for_sm_90(wl):
    """An accepted kernel passed ptxas, and a rejected one got past the compile step."""
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


def test_a_global_memory_handoff_through_a_named_barrier_is_rejected(wl):
    """Was: rule 8 looked for a barrier on the write's own path; the producer's bare bar.arrive is not a wait and
    the consumer's bar.sync is on the other branch."""
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


def test_an_honest_named_barrier_handoff_through_shared_memory_is_accepted(wl):
    """Was rejected (``launch_state``): rule 5's shared form asked for a path from the entry through a store into
    smem before the load, and the producers' stores are on the other branch."""
    assert_accepted(rt.entry(rt.NAMED_BARRIER_SHARED_HANDOFF, store=False), wl)


# ------------------------------------------------------------------------------- barrier matching (version 15)
# Producers (threads 64..255) and consumers (0..63) on branches apart, as rt11_named_barrier_exchange; the ids of
# the two barriers and the consumer's read vary.
_SPLIT = ("\tsetp.lt.u32 %p4, %r3, 64;\n\t@%p4 bra $L_cons;\n"
          "\tst.global.u16 [%rd11], %rs3;\n{arrive}\tbra.uni $L_done;\n"
          "$L_cons:\n{wait}\tld.global.u16 %rs4, [%rd11+128];\n\tst.global.u16 [%rd11], %rs4;\n")


@pytest.mark.parametrize("arrive, wait", [
    ("\tbar.arrive 1, 256;\n", "\tbar.sync 1, 256;\n"),  # the hand-off
    ("\tbar.arrive 1, 256;\n", "\tbar.sync 2, 256;\n"),  # barriers that never meet: unordered
    ("", ""),  # no barrier at all: the read sees the store or the refill, by timing
    ("\tbar.sync 1, 256;\n", "\tbar.sync 1, 256;\n"),  # bar.sync on both branches
])
def test_a_global_read_on_a_branch_apart_from_the_write_is_an_exchange(wl, arrive, wait):
    """Rule 8 since version 15: the read follows the write past another statement's wait of the same barrier, or
    lies on a branch no thread runs together with the write (it can see only another thread's store)."""
    k = rt.entry(_SPLIT.format(arrive=arrive, wait=wait), store=False)
    r = assert_rejected(k, wl, Status.NONDETERMINISTIC, "race_lint")
    assert "global_exchange" in r.reason


def test_a_stale_shared_read_between_two_barriers_is_still_rejected(wl):
    """A later statement's arrival at barrier 0 does not hand its stores back past an earlier wait that every
    thread passes before it (the wait dominates the arrival): the first read of smem still sees an earlier CTA's
    bytes (rule 5's shared form)."""
    body = ("\tmov.u64 %rd30, smem;\n\tbar.sync 0;\n\tld.shared.u16 %rs4, [%rd30];\n"
            "\tst.shared.u16 [%rd30], %rs3;\n\tbar.sync 0;\n\tadd.u16 %rs5, %rs3, %rs4;\n"
            "\tst.global.u16 [%rd11], %rs5;\n")
    r = assert_rejected(rt.entry(body, store=False), wl, Status.NONDETERMINISTIC, "race_lint")
    assert "launch_state" in r.reason and "smem" in r.reason


def test_a_read_of_a_location_before_the_thread_writes_it_is_not_an_exchange():
    """The apart form needs the read and the write on branches no thread runs together: a thread that reads its
    own element, passes a barrier and writes it (an inout state's update) runs both on one path, and rule 8 (run
    here alone, as for a workload without atomics) stays quiet; the same read on the other branch is flagged."""
    one_path = ("\tld.global.u16 %rs4, [%rd11];\n\tbar.sync 0;\n\tadd.u16 %rs5, %rs3, %rs4;\n"
                "\tst.global.u16 [%rd11], %rs5;\n")
    rep = race_lint(rt.entry(one_path, store=False), None, order_ok=False)
    assert rep.ok, rep.reason()
    apart = ("\tsetp.lt.u32 %p4, %r3, 64;\n\t@%p4 bra $L_cons;\n\tst.global.u16 [%rd11], %rs3;\n\tbra.uni $L_done;\n"
             "$L_cons:\n\tld.global.u16 %rs4, [%rd11];\n\tadd.u16 %rs5, %rs3, %rs4;\n\tst.global.u16 [%rd11], %rs5;\n")
    rep = race_lint(rt.entry(apart, store=False), None, order_ok=False)
    assert [f.kind for f in rep.findings] == ["global_exchange"]
    assert "never meets this read" in rep.findings[0].why


@pytest.mark.parametrize("between, flagged", [
    ("\tbarrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n", False),
    ("\tbar.sync 0;\n", False),
    ("\tbar.warp.sync -1;\n", True),  # the other warps' reds are still open
    ("\tbar.sync 1, 64;\n", True),  # a count: maybe not every thread
    ("", True),
])
def test_a_read_after_a_reduction_is_cleared_only_by_a_barrier_of_every_thread(between, flagged):
    """Rule 4's reduction form (``_reads_after_reductions``): the read of a word reds update counts the threads
    that arrived before it unless a barrier every thread passes (the CTA's, the cluster's) lies between."""
    body = ("\tmov.u64 %rd30, smem;\n\tst.shared.u32 [%rd30], 0;\n\tbar.sync 0;\n\tred.shared.add.u32 [%rd30], 1;\n"
            + between + "\tld.shared.u32 %r20, [%rd30];\n\tcvt.u16.u32 %rs4, %r20;\n\tst.global.u16 [%rd11], %rs4;\n")
    k = rt.entry(body, store=False)
    assert bool(rl._reads_after_reductions(provenance(k), basic_blocks)) == flagged
