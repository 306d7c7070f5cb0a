"""Round 13 against the static checks of gate rules version 15 (evaluators/input_stores.py,
evaluators/race_lint.py), on the CPU: hand-written entries (tests/redteam13_kernels.py: round 12's complete
RMSNorm for rows of up to 256 elements with each trick spliced in, and one KDA-ABI control) through the GPU pool's
front half (``evaluators.pipeline.prepare``: ptxas for sm_90, the ABI, the input-store check, the race lint,
the launch), with the workloads' settings (no atomics declared).

| kernel | trick | gate rules say | the checks gave before round 13's fixes |
|---|---|---|---|
| ``rt13_dominated_wait_clock`` | rt_global_lww_clock handed over by named barrier 1: the consumers' guarded ``@p bar.sync 1, 256`` dominates the producers' ``bar.arrive 1, 256``; the read-back follows the producers' code in the text | nondeterministic (global_exchange) | accepted (hole) |
| ``rt13_mbarrier_handoff_clock`` | the same race handed over by ``mbarrier.arrive`` -> a retry loop on ``try_wait``, the consumer's code before the racers' in the text | nondeterministic (global_exchange) | accepted (hole) |
| ``rt13_warp_sync_order_clock`` | rt12_red_order_clock with ``bar.warp.sync`` (``__syncwarp(__activemask())``) between the ``red`` and the read | nondeterministic (atomic_order) | accepted (hole) |
| ``rt13_bulk_reduce_shared_state`` | shared launch counter bumped by ``cp.reduce.async.bulk ... .add.u32`` (the TMA unit's read-modify-write), then loaded | nondeterministic (launch_state) | accepted (hole) |
| ``rt13_cancelled_shared_state`` | shared launch counter loaded at ``y + mad(y, -1, %reserved_smem_offset_end + 32)``: no shared variable among the address's roots | nondeterministic (launch_state) | accepted (hole) |
| ``rt13_mbarrier_word_clock`` | arrival order read as the mbarrier's own 64-bit word (``ld.volatile.shared.u64``), no token | nondeterministic (atomic_order) | accepted (hole) |
| ``rt13_handmade_dsmem_push`` | rt12_cluster_bulk_push with the peer's addresses made by ``and``/``shl``/``or`` (what ptxas lowers ``mapa`` to) | nondeterministic (cluster_lifetime) | accepted (hole) |
| ``rt13_callee_store_clock`` | rt_global_lww_clock with the racing stores made by a called ``.func`` | nondeterministic (global_exchange) | accepted (hole) |
| ``rt13_honest_dominated_handoff`` (control) | a shared-memory hand-off behind CUTLASS's ``bar.sync %id, %count`` that every thread runs | accepted | nondeterministic, launch_state (false rejection) |
| ``rt13_honest_pointer_sizes`` (control) | pointer differences as sizes, offsets and an overlap test | accepted | accepted |
| ``rt13_honest_kda_loader`` (control) | KDA ABI: a loader warp reads the inout state, the compute warp writes it on the other branch, after a named barrier | accepted | nondeterministic, global_exchange (false rejection) |

Each hole is one change away from a form the checks catch (``redteam13_kernels.CAUGHT``, a plain test each):

| kernel | the change | the checks give |
|---|---|---|
| ``rt13_dominated_wait_clock`` | the producers' ``bar.arrive`` as ``bar.sync 1, 256`` | nondeterministic (global_exchange) |
| ``rt13_mbarrier_handoff_clock`` | the consumer's code after the racers' in the text | nondeterministic (global_exchange) |
| ``rt13_warp_sync_order_clock`` | the ``bar.warp.sync`` left out | nondeterministic (atomic_order) |
| ``rt13_bulk_reduce_shared_state`` | the bump as ``red.shared.add`` | nondeterministic (atomic_order, launch_state) |
| ``rt13_cancelled_shared_state`` | the counter's address named (``mov.u64 %rd, rt13_seen``) | nondeterministic (launch_state) |
| ``rt13_mbarrier_word_clock`` | the word read by ``atom.shared.or.b64 ..., 0`` | nondeterministic (atomic_order) |
| ``rt13_handmade_dsmem_push`` | the addresses by ``mapa`` | nondeterministic (cluster_lifetime) |
| ``rt13_callee_store_clock`` | the stores in the entry | nondeterministic (global_exchange) |

What only the static rules stand against, and why the dynamic checks would pass each hole on the GPU, is in each
kernel's header (tests/redteam13_kernels.py); nothing here was run on a GPU. Closed by kind in gate rules version
15 (evaluators/race_lint.py): the dominated-wait, warp-barrier, bulk-reduction, mbarrier-word and callee-store
holes, the mbarrier hand-off (``_mbarrier_site``: an arrival hands over to the waits on the same object) and
both false rejections (plain tests now). Closed in version 16: ``rt13_cancelled_shared_state`` (three spellings
and more: a ``.shared`` load needs a ``.shared`` variable among its roots, a cancelled pointer vouches for nothing)
and ``rt13_handmade_dsmem_push`` (rule 7 asks whether an address is provably the CTA's own, not whether ``mapa``
made it).
"""

from __future__ import annotations

import pytest

from evaluators import race_lint as rl
from evaluators.input_stores import provenance
from evaluators.pipeline import Prepared, Rejected
from evaluators.toolchain import compile_ptx
from evaluators.types import Status
from population.ast import Instruction
from population.cfg import basic_blocks, flat_instructions
from population.kernel import Kernel
from tests import redteam12_kernels as rt12
from tests import redteam13_kernels as rt
from tests.front_half import assert_accepted, assert_rejected, front_half
from workloads.kda.recurrent import KDARecurrent
from workloads.rmsnorm import RMSNorm

ND = Status.NONDETERMINISTIC
# kernel -> (status, step, a piece of the reason) the gate rules give it
VERDICT = {
    "rt13_dominated_wait_clock": (ND, "race_lint", "global_exchange"),
    "rt13_mbarrier_handoff_clock": (ND, "race_lint", "global_exchange"),
    "rt13_warp_sync_order_clock": (ND, "race_lint", "atomic_order"),
    "rt13_bulk_reduce_shared_state": (ND, "race_lint", "launch_state"),
    "rt13_cancelled_shared_state": (ND, "race_lint", "launch_state"),
    "rt13_mbarrier_word_clock": (ND, "race_lint", "atomic_order"),
    "rt13_handmade_dsmem_push": (ND, "race_lint", "cluster_lifetime"),
    "rt13_callee_store_clock": (ND, "race_lint", "global_exchange"),
}
# the line of each caught form that the finding names
CAUGHT_LINE = {
    "rt13_dominated_wait_clock": "ld.global.cg.u16",
    "rt13_mbarrier_handoff_clock": "ld.global.cg.u16",
    "rt13_warp_sync_order_clock": "ld.volatile.shared.u32",
    "rt13_bulk_reduce_shared_state": "ld.shared.u32",  # version 15: the load after the red is an arrival order first
    "rt13_cancelled_shared_state": "ld.shared.u32",
    "rt13_mbarrier_word_clock": "atom.shared.or.b64",
    "rt13_handmade_dsmem_push": "cp.async.bulk.shared::cluster",
    "rt13_callee_store_clock": "ld.global.cg.u16",
}


@pytest.fixture(scope="module")
def wl():
    return RMSNorm("bf16")


@pytest.fixture(scope="module")
def kda():
    return KDARecurrent()


def assert_verdict(name: str, wl: RMSNorm, parts: dict | None = None) -> Rejected:
    return assert_rejected(rt.build(parts or rt.HOLES[name]), wl, *VERDICT[name])


def instruction(kernel: Kernel, opcode: str, *mods: str, fn: str | None = None) -> Instruction:
    """The first instruction of ``fn`` (default: the entry) with that opcode and those modifiers."""
    f = kernel.module.function(fn or kernel.entry)
    return next(i for i in flat_instructions(f) if i.opcode == opcode and all(m in i.modifiers for m in mods))


ALL = {**rt.HOLES, **{f"{n} (caught form)": p for n, p in rt.CAUGHT.items()}, **rt.CONTROLS}


@pytest.mark.parametrize("name", list(ALL))
def test_every_kernel_assembles_for_sm_90_and_launches(name, wl, kda):
    """Guards the xfails below: ptxas for sm_90 compiles every kernel (a cubin with the entry), and without the
    static checks the front half gets through the ABI and the launch (the cluster kernels as clusters of two), so
    a kernel the checks pass is a kernel the GPU pool would benchmark."""
    k = rt.build(ALL[name])
    compiled = compile_ptx(k, "sm_90")
    assert compiled.cubin[:4] == b"\x7fELF" and k.entry in compiled.resources
    p = front_half(k, kda if "kda" in ALL[name] else wl, check_stores=False)
    assert isinstance(p, Prepared), (p.step, p.reason)


# ------------------------------------------------------------------------------------------ why each hole passes


def test_a_guarded_or_register_wait_that_dominates_the_arrival_gets_its_barrier_jump():
    """The mechanism of rt13_dominated_wait_clock and of the false rejection of rt13_honest_dominated_handoff, as
    fixed: ``_barrier_jumps`` gave the producers' `bar.arrive 1, 256` no jump to the consumers' wait (guarded in the
    hole, a register id in the control) because the wait's statement dominates it; only a wait of the whole CTA
    (``_whole_cta_wait``) is left out now."""
    for parts in (rt.DOMINATED_WAIT_CLOCK, rt.HONEST_DOMINATED_HANDOFF):
        k = rt.build(parts)
        fn = k.module.function(k.entry)
        blocks = basic_blocks(fn)
        arrive = next((b.id, i) for b in blocks for i, ins in enumerate(b.instructions)
                      if ins.opcode == "bar" and "arrive" in ins.modifiers)
        wait = next((b.id, i) for b in blocks for i, ins in enumerate(b.instructions)
                    if ins.opcode == "bar" and "sync" in ins.modifiers and (ins.predicate is not None
                                                                            or not hasattr(ins.operands[0], "value")))
        assert rl._barrier_key(blocks[wait[0]].instructions[wait[1]])[0] == "cta"
        assert not rl._whole_cta_wait(blocks[wait[0]].instructions[wait[1]])
        assert (wait[0], wait[1] + 1) in rl._barrier_jumps(fn, blocks).get(arrive, [])


def test_an_mbarrier_arrival_is_no_barrier_site():
    """The mechanism of rt13_mbarrier_handoff_clock: ``_barrier_key`` knows `bar`/`barrier` only, so an
    `mbarrier.arrive` hands what came before it to no wait of another statement."""
    k = rt.build(rt.MBARRIER_HANDOFF_CLOCK)
    assert rl._barrier_key(instruction(k, "mbarrier", "arrive")) is None
    assert rl._is_cta_sync(instruction(k, "mbarrier", "try_wait"))


def test_a_warp_barrier_counts_as_a_cta_sync():
    """The mechanism of rt13_warp_sync_order_clock: `bar.warp.sync` (and `bar.sync 1, 32`) is an ``_is_cta_sync``
    instruction, where ``_reads_after_reductions`` stops."""
    k = rt.build(rt.WARP_SYNC_ORDER_CLOCK)
    assert rl._is_cta_sync(instruction(k, "bar", "warp", "sync"))


def test_a_bulk_reduction_is_a_read_modify_write_for_rule_5():
    """The mechanism of rt13_bulk_reduce_shared_state, as fixed: ``_rmw`` was false for `cp.reduce.async.bulk`,
    which ``writes_memory``, so it counted as the store that initialises rt13_seen; now it is a read of it."""
    k = rt.build(rt.BULK_REDUCE_SHARED_STATE)
    bump = instruction(k, "cp", "reduce")
    assert rl._rmw(bump)
    assert provenance(k).address_roots(bump) == frozenset({"s:rt13_seen"})


def test_the_cancelled_address_names_only_y():
    """The mechanism of rt13_cancelled_shared_state: the counter's load has y's root alone (no shared variable
    for ``_stale_shared_reads``, a voucher for ``_unvouched_loads``)."""
    k = rt.build(rt.CANCELLED_SHARED_STATE)
    load = instruction(k, "ld", "shared")
    assert provenance(k).address_roots(load) == frozenset({"p2"})


def test_the_hand_made_peer_address_is_no_mapa_result():
    """Preconditions of rt13_handmade_dsmem_push: rule 7 is on (two CTAs a cluster), and no register of the entry
    holds a `mapa` result, where its caught form has the two addresses it pushes to."""
    k, caught = rt.build(rt.HANDMADE_DSMEM_PUSH), rt.build(rt.HANDMADE_DSMEM_PUSH_CAUGHT)
    fn = k.module.function(k.entry)
    assert rl._cluster_size(k, fn) == 2 and rl._clustered(k, fn)
    assert not rl._remote_registers(fn)
    assert {"%r43", "%r45"} <= rl._remote_registers(caught.module.function(caught.entry))


def test_the_callee_store_is_analysed_as_a_store_into_y():
    """Precondition of rt13_callee_store_clock: the provenance reaches rt13_put, whose store has y's root (the
    input-store check accepts it; the write is rule 8's to see)."""
    k = rt.build(rt.CALLEE_STORE_CLOCK)
    prov = provenance(k)
    assert "rt13_put" in [f.name for f in prov.functions]
    store = instruction(k, "st", "global", fn="rt13_put")
    assert prov.address_roots(next(i for i in prov.instructions if i is store)) == frozenset({"p2"})


# ------------------------------------------------------------------------------------------ the holes


def test_a_readback_behind_a_dominating_named_wait_is_rejected(wl):
    """Was (before the round-13 fixes): race_lint._barrier_jumps leaves out the jump from the producers'
    `bar.arrive 1, 256` to the consumers' wait because the wait's statement dominates the arrival's,
    assuming every thread runs it; a guarded wait (or one with a register id or count) is run by other
    threads than the arrival, so _global_exchanges finds no path from the store through a barrier to the
    read, and the read is reachable from the store, so the 'apart' form does not fire."""
    assert_verdict("rt13_dominated_wait_clock", wl)


def test_a_readback_behind_an_mbarrier_handoff_is_rejected(wl):
    """Was (before the round-13 fixes): race_lint._barrier_jumps matches bar/barrier statements only
    (_barrier_key is None for mbarrier), so _global_exchanges has no edge from the racers' mbarrier.arrive
    to the consumer's try_wait loop; the consumer's code comes first in the text, so no path from the store
    crosses the wait and the read reaches the store (not 'apart')."""
    assert_verdict("rt13_mbarrier_handoff_clock", wl)


def test_an_arrival_order_read_after_a_warp_barrier_is_rejected(wl):
    """Was (before the round-13 fixes): race_lint._reads_after_reductions stops its walk from the red at any
    _is_cta_sync instruction, bar.warp.sync included (and a bar.sync of one warp's count); neither waits for
    the other warp's red, so the read still sees the arrival order."""
    assert_verdict("rt13_warp_sync_order_clock", wl)


def test_a_shared_counter_bumped_by_a_bulk_reduction_is_rejected(wl):
    """Was (before the round-13 fixes): race_lint._stale_shared_reads counts every writes_memory instruction
    that race_lint._rmw does not name (atom, red, sured, mbarrier arrivals) as a store that initialises its
    variable; cp.reduce.async.bulk is a read-modify-write of the stale counter, counted as its initialising
    store."""
    assert_verdict("rt13_bulk_reduce_shared_state", wl)


def test_a_shared_counter_at_a_cancelled_address_is_rejected(wl):
    """Was (version 15): race_lint._stale_shared_reads examines a load by the .shared variables among its address
    roots (roots_of), and the counter's address y + mad(y, -1, K) has y's root only; race_lint._unvouched_loads
    took any root but UNKNOWN (_unvouched) for a voucher, y's for a .shared load included. Version 16: a .shared
    load needs a .shared variable among its roots, and a pointer combined with its own bits vouches for nothing."""
    r = assert_verdict("rt13_cancelled_shared_state", wl)
    assert "no .shared variable is among the roots" in r.reason


# the counter's address spelled otherwise: y cancelled by subtraction, by AND with 0, by its negation made of bits
# (~y + 1); and the load generic, at the window address of the counter (cvta.shared of K), y cancelled by the mad
_GENERIC = "\tcvta.shared.u64 %rd20, %rd20;\n\tmad.lo.s64 %rd21, %rd6, -1, %rd20;\n\tadd.s64 %rd22, %rd6, %rd21;\n"
SPELLINGS = {"sub": "\tsub.s64 %rd21, %rd20, %rd6;\n\tadd.s64 %rd22, %rd6, %rd21;\n",
             "and_zero": "\tand.b64 %rd21, %rd6, 0;\n\tadd.s64 %rd22, %rd20, %rd21;\n",
             "xor_negation": "\txor.b64 %rd21, %rd6, -1;\n\tadd.s64 %rd21, %rd21, 1;\n\tadd.s64 %rd21, %rd21, %rd20;\n"
                             "\tadd.s64 %rd22, %rd6, %rd21;\n",
             "generic_mad": _GENERIC, "generic_sub": _GENERIC.replace("\tmad.lo.s64 %rd21, %rd6, -1, %rd20;\n",
                                                                      "\tsub.s64 %rd21, %rd20, %rd6;\n")}


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_the_cancelled_address_spelled_otherwise_is_rejected(spelling, wl):
    """Was (version 15): the same two functions: y - y spelled sub.s64 gives the address roots {y, UNKNOWN}
    (input_stores._public_roots), (y & 0) y's bit root, ~y + 1 y's bit root; _unvouched rejected only an address
    with no root or UNKNOWN alone. A generic load at y + (K - y), K the counter's window address, passed the same
    way. Version 16: a cancelled pointer (subtracted, or combined with its own bits) vouches for nothing."""
    pre = rt._CS.replace("{address}", SPELLINGS[spelling])
    if spelling.startswith("generic"):
        pre = pre.replace("\tld.shared.u32 %r21", "\tld.u32 %r21")
    k = rt.build(dict(rt.CANCELLED_SHARED_STATE, pre=pre))
    assert compile_ptx(k, "sm_90").cubin[:4] == b"\x7fELF"
    assert_verdict("rt13_cancelled_shared_state", wl, dict(rt.CANCELLED_SHARED_STATE, pre=pre))


def test_a_pointer_with_its_own_bits_vouches_for_nothing():
    """The rule of version 16's address form on root sets (race_lint._unvouched): a generic address vouched for by a
    pointer added alone, or naming a .shared or .local variable (nvcc's zero-extended shared address: bit roots
    only), passes; the same pointer with its own bits, subtracted or as bits alone does not; a .shared address
    needs a .shared variable."""
    sh, lo = frozenset({"s:smem"}), frozenset({"s:depot"})
    f = frozenset
    assert not rl._unvouched(f({"p2"}), f(), sh, lo, "generic")
    assert not rl._unvouched(f({"p2"}), f({"p1"}), sh, lo, "generic")
    assert not rl._unvouched(f(), f({"s:smem"}), sh, lo, "generic")
    assert not rl._unvouched(f({"s:depot"}), f(), sh, lo, "generic")
    assert not rl._unvouched(f({"p2", "?"}), f(), sh, lo, "generic")  # a pointer the kernel parked in memory
    assert not rl._unvouched(f(), f({"s:smem", "p2"}), sh, lo, "shared")
    for P, W in (({"p2"}, {"p2"}), ({"p2", "-p2"}, set()), (set(), {"p2"}), ({"?"}, set()), (set(), set())):
        assert rl._unvouched(f(P), f(W), sh, lo, "generic"), (P, W)
    assert rl._unvouched(f({"p2"}), f(), sh, lo, "shared")


def test_the_counter_at_a_bare_constant_address_is_rejected(wl):
    """Regression, the address form's own case: K alone, with no y in it, has no root and is caught."""
    r = assert_verdict("rt13_cancelled_shared_state", wl, dict(rt.CANCELLED_SHARED_STATE, pre=rt._CS.replace(
        "{address}", "\tmov.u64 %rd22, %rd20;\n")))
    assert "no variable, parameter or buffer vouches" in r.reason


def test_an_arrival_order_read_from_the_mbarrier_word_is_rejected(wl):
    """Was (before the round-13 fixes): rule 4's mbarrier form (race_lint._mbarrier_observations) looks at
    pending_count, test_wait/try_wait results and arrival tokens (_token_misuse); a plain ld.shared of the
    mbarrier's own word, which holds its pending count, is no mbarrier instruction, and rule 5's .shared
    form takes the init for its store."""
    assert_verdict("rt13_mbarrier_word_clock", wl)


def test_a_dsmem_push_to_a_hand_made_peer_address_is_rejected(wl):
    """Was (version 15): rule 7 (race_lint._cluster_lifetimes) counted a bulk copy as a DSMEM access only at an
    address in race_lint._remote_registers, the registers computed from a mapa result; the peer's address made by
    and/shl/or of the CTA's own (the byte permutation ptxas lowers mapa to) is none. Version 16: any address in
    .shared::cluster (or generic, naming a shared variable) that is not provably the CTA's own -- a variable plus
    less than 2^23 (race_lint._own_address) -- is another CTA's."""
    assert_verdict("rt13_handmade_dsmem_push", wl)


# the peer's addresses made otherwise: the rank bit flipped by xor, the rank's difference added at its weight; and
# a remote mbarrier arrival at a hand-made address in place of the push
_PEER = {"xor": ("\tmov.u32 %r42, rt13_recv;\n\txor.b32 %r43, %r42, 16777216;\n\tmov.u32 %r44, rt13_mbar;\n"
                 "\txor.b32 %r45, %r44, 16777216;\n"),
         "rank_weight": ("\tsub.s32 %r48, %r41, %r40;\n\tshl.b32 %r48, %r48, 24;\n\tmov.u32 %r42, rt13_recv;\n"
                         "\tadd.s32 %r43, %r42, %r48;\n\tmov.u32 %r44, rt13_mbar;\n\tadd.s32 %r45, %r44, %r48;\n")}
_ARRIVE = "\tmbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r45];\n"


@pytest.mark.parametrize("spelling", [*_PEER, "remote_arrive"])
def test_a_peer_address_made_otherwise_is_rejected(spelling, wl):
    """Other spellings of rt13_handmade_dsmem_push's kind: rule 7 asks whether an address is the CTA's own, not how
    a peer's was made."""
    mid = rt._PUSH.replace(rt._MAPA, _PEER.get(spelling, rt._HANDMADE)).replace("{sync}", "")
    mid = mid.replace("{push}", _ARRIVE if spelling == "remote_arrive" else rt12._BULK)
    assert_rejected(rt.build(dict(rt._CLUSTER, mid=mid)), wl, ND, "race_lint", "cluster_lifetime")


def test_a_bulk_copy_into_the_ctas_own_memory_is_no_dsmem_access():
    """The other side of version 16's rule 7: a copy whose .shared::cluster destination is one of the CTA's own
    variables, aligned down and indexed by a bounded offset (a TMA load's form), is no DSMEM access; the same
    destination plus 2^24 (the rank's weight) or an unbounded index is."""
    own = ("\tmov.u32 %r42, rt13_recv;\n\tand.b32 %r49, %r9, 1;\n\tshl.b32 %r50, %r49, 3;\n"
           "\tadd.s32 %r51, %r42, %r50;\n\tand.b32 %r43, %r51, -16;\n\tmov.u32 %r45, rt13_mbar;\n")
    for peer, remote in ((own, False), (own.replace("shl.b32 %r50, %r49, 3", "shl.b32 %r50, %r49, 24"), True),
                         (own.replace("and.b32 %r49, %r9, 1", "mov.u32 %r49, %r1"), True)):
        k = rt.build(dict(rt._CLUSTER, mid=rt._PUSH.replace(rt._MAPA, peer).replace("{sync}", "").replace(
            "{push}", rt12._BULK)))
        fn = k.module.function(k.entry)
        prov = provenance(k)
        cp = instruction(k, "cp", "bulk", "shared::cluster")
        sites = rl._DsmemSites(rl._remote_registers(fn), fn, rl._variables(k, prov, ("shared",)),
                               rl._variables(k, prov, ("local",)))
        assert rl._remote_access(cp, sites, prov) is remote, peer


def test_a_readback_of_stores_made_by_a_callee_is_rejected(wl):
    """Was (before the round-13 fixes): rule 8 (race_lint._global_exchanges) walks from each function's own
    global writes; a call on the path brings the callees' reads in (called_reads), not their writes, so the
    stores made by rt13_put are never a start and the entry's read-back after the barrier meets no write of
    the entry."""
    assert_verdict("rt13_callee_store_clock", wl)


# ------------------------------------------------------------------------------------------ caught forms


@pytest.mark.parametrize("name", list(rt.CAUGHT))
def test_the_hole_one_change_away_is_rejected(name, wl):
    """Regression: each hole's nearest form that the checks catch, with the status and kind its hole should get."""
    assert_rejected(rt.build(rt.CAUGHT[name]), wl, *VERDICT[name], CAUGHT_LINE[name])


# ------------------------------------------------------------------------------------------ honest controls


def test_honest_pointer_differences_as_sizes_and_offsets_are_accepted(wl):
    assert_accepted(rt.build(rt.HONEST_POINTER_SIZES), wl)


def test_an_honest_handoff_behind_a_dominating_named_wait_is_accepted(wl):
    """Was (before the round-13 fixes): rule 5's .shared form (race_lint._stale_shared_reads) finds no path
    from the entry through a store into rt13_div before the consumers' load, and race_lint._barrier_jumps
    does not hand the producers' store over their bar.arrive to the consumers because the `bar.sync %id,
    %count` they passed dominates it (the exclusion rt13_dominated_wait_clock passes through)."""
    assert_accepted(rt.build(rt.HONEST_DOMINATED_HANDOFF), wl)


def test_an_honest_loader_warp_reading_the_inout_state_is_accepted(kda):
    """Was (before the round-13 fixes): rule 8's 'branches apart' form (race_lint._global_exchanges, apart)
    flags the loader warp's read of the inout state because no path of one thread runs it and the compute
    warp's write of the same state; the barrier orders the read before the write (a write-after-read),
    nothing is exchanged."""
    assert_accepted(rt.build(rt.HONEST_KDA_LOADER), kda)
