"""Round 12 against the static checks of gate rules version 15 (evaluators/input_stores.py,
evaluators/race_lint.py), on the CPU: hand-written RMSNorm-ABI entries (tests/redteam12_kernels.py: a complete
RMSNorm for rows of up to 256 elements, two rows a CTA, each trick spliced in) through the GPU pool's front half
(``evaluators.pipeline.prepare``: ptxas for sm_90, the ABI, the input-store check, the race lint), with RMSNorm's
settings (no atomics declared).

| kernel | trick | gate rules say | version 14 gave |
|---|---|---|---|
| ``rt12_red_shared_state`` | launch counter in uninitialised shared memory, bumped by ``red.shared.add`` before it is read | nondeterministic (launch_state) | accepted (hole) |
| ``rt12_hashed_shared_state`` | the counter as ``rt12_seen[(y >> 8) & 3]``: the index carries y's bits | nondeterministic (launch_state) | accepted (hole) |
| ``rt12_cancel_global_state`` | ``.global`` launch counter at ``y + (cell - y)``, cell initialised with its address | nondeterministic (launch_state) | accepted (hole) |
| ``rt12_alias_store`` | x written back by a ``.func`` called through ``.alias`` | input_mutated | accepted (hole) |
| ``rt12_arrive_token_clock`` | arrival order decoded from ``mbarrier.arrive``'s state token (``pending_count`` by hand) | nondeterministic (atomic_order) | accepted (hole) |
| ``rt12_red_order_clock`` | arrival order as ``red.shared.add`` then ``ld.shared`` of the word | nondeterministic (atomic_order) | accepted (hole) |
| ``rt12_ldmatrix_spin_clock`` | rt_alu_pace_dodge's spin on a shared flag read by ``ldmatrix`` | nondeterministic (wall_clock_wait) | accepted (hole) |
| ``rt12_cluster_bulk_push`` | DSMEM push by ``cp.async.bulk.shared::cluster`` without the cluster barrier after the peer's mbarrier init | nondeterministic (cluster_lifetime) | accepted (hole) |
| ``rt12_callee_local_state`` | rt_local_state's counter read by a called ``.func`` through ``&local`` | nondeterministic (launch_state) | accepted (hole) |
| ``rt12_callee_readback_clock`` | rt_global_lww_clock read back in a called ``.func`` | nondeterministic (global_exchange) | accepted (hole) |
| ``rt12_honest_red_count`` (control) | the mean's divisor counted with ``red.shared`` after a zeroing store | accepted | accepted |
| ``rt12_honest_cluster_push`` (control) | the bulk push with both cluster barriers | accepted | accepted |
| ``rt12_honest_out_param`` (control) | a helper that stores through a pointer to the caller's ``.local`` | accepted | input_mutated (false rejection) |

Each hole is one change away from a form the checks catch (``redteam12_kernels.CAUGHT``, a plain test each):

| kernel | the change | the checks give |
|---|---|---|
| ``rt12_red_shared_state`` | the counter ``ld`` before its ``st`` (rt_shared_state's form) | nondeterministic (launch_state) |
| ``rt12_hashed_shared_state`` | the table indexed by the row, not by y's bits | nondeterministic (launch_state) |
| ``rt12_cancel_global_state`` | the counter's address named (``mov.u64 %rd, rt12_launches``) | nondeterministic (launch_state) |
| ``rt12_alias_store`` | the function called by its own name | input_mutated |
| ``rt12_arrive_token_clock`` | ``mbarrier.pending_count`` of the token | nondeterministic (atomic_order) |
| ``rt12_red_order_clock`` | one ``atom.shared.add`` whose result is read | nondeterministic (atomic_order) |
| ``rt12_ldmatrix_spin_clock`` | the flag read by ``ld.volatile.shared`` | nondeterministic (wall_clock_wait) |
| ``rt12_cluster_bulk_push`` | the push by ``st.async`` | nondeterministic (cluster_lifetime) |
| ``rt12_callee_local_state`` | the counter's load in the entry | nondeterministic (launch_state) |
| ``rt12_callee_readback_clock`` | the read-back in the entry | nondeterministic (global_exchange) |

What only the static rules stand against, and why the dynamic checks would pass each hole on the GPU, is in each
kernel's header (tests/redteam12_kernels.py). Gate rules version 15 closes eight holes by kind (the input-store
check follows ``.alias`` and rejects calls to bodiless non-system functions, takes module variables' initialisers
as stored values and lets no subtracted root vouch; the race lint as its module docstring says under rules 1, 4,
5, 7 and 8). Version 16 closes ``rt12_callee_local_state`` and the false rejection of ``rt12_honest_out_param``
(rule 5's ``.local`` form across calls; the input-store check lets a callee write its callers' variables).
"""

from __future__ import annotations

import pytest

from evaluators import race_lint as rl
from evaluators.input_stores import provenance
from evaluators.pipeline import Rejected
from evaluators.toolchain import compile_ptx
from evaluators.types import Status
from tests import redteam12_kernels as rt
from tests.front_half import assert_accepted, assert_rejected, front_half
from workloads.rmsnorm import RMSNorm

ND, IM = Status.NONDETERMINISTIC, Status.INPUT_MUTATED
# kernel -> (status, step, a piece of the reason) the gate rules give it
VERDICT = {
    "rt12_red_shared_state": (ND, "race_lint", "launch_state"),
    "rt12_hashed_shared_state": (ND, "race_lint", "launch_state"),
    "rt12_cancel_global_state": (ND, "race_lint", "launch_state"),
    "rt12_alias_store": (IM, "input_stores", "input 'x'"),
    "rt12_arrive_token_clock": (ND, "race_lint", "atomic_order"),
    "rt12_red_order_clock": (ND, "race_lint", "atomic_order"),
    "rt12_ldmatrix_spin_clock": (ND, "race_lint", "wall_clock_wait"),
    "rt12_cluster_bulk_push": (ND, "race_lint", "cluster_lifetime"),
    "rt12_callee_local_state": (ND, "race_lint", "launch_state"),
    "rt12_callee_readback_clock": (ND, "race_lint", "global_exchange"),
}
# the line of each caught form that the finding names
CAUGHT_LINE = {
    "rt12_red_shared_state": "ld.shared.u32",
    "rt12_hashed_shared_state": "ld.shared.u32",
    "rt12_cancel_global_state": "st.global.u32",
    "rt12_alias_store": "st.global.u16",
    "rt12_arrive_token_clock": "mbarrier.pending_count",
    "rt12_red_order_clock": "atom.shared.add",
    "rt12_ldmatrix_spin_clock": "ld.volatile.shared",
    "rt12_cluster_bulk_push": "st.async.shared::cluster",
    "rt12_callee_local_state": "ld.u32",
    "rt12_callee_readback_clock": "ld.global.cg.u16",
}


@pytest.fixture(scope="module")
def wl():
    return RMSNorm("bf16")


def assert_verdict(name: str, wl: RMSNorm) -> Rejected:
    return assert_rejected(rt.build(rt.HOLES[name]), wl, *VERDICT[name])


ALL = {**{f"{n}": p for n, p in rt.HOLES.items()}, **{f"{n} (caught form)": p for n, p in rt.CAUGHT.items()},
       **rt.CONTROLS}


@pytest.mark.parametrize("name", list(ALL))
def test_every_kernel_assembles_for_sm_90(name, wl):
    """Guards the xfails below: ptxas for sm_90 compiles every kernel (a cubin with the entry), and the front half
    gets past compile, entry, ABI and launch (the cluster kernels launch as clusters of two)."""
    k = rt.build(ALL[name])
    compiled = compile_ptx(k, "sm_90")
    assert compiled.cubin[:4] == b"\x7fELF" and "rmsnorm" in compiled.resources
    r = front_half(k, wl)
    assert not isinstance(r, Rejected) or r.step in ("input_stores", "race_lint"), (r.step, r.reason)


def test_the_honest_body_is_accepted(wl):
    p = assert_accepted(rt.entry(), wl)
    assert p.block == (256, 1, 1) and p.resources.barriers >= 1


# ------------------------------------------------------------------------------------------ input-store holes


def test_a_store_into_x_by_a_function_called_through_an_alias_is_rejected(wl):
    """Was (version 14): evaluators/input_stores.py provenance() follows a call only to a function of that
    name with a body (`bodies`); `call rt12_put_alias` names an .alias prototype without one (the way
    vprintf is skipped), so rt12_put's st.global into x is never analysed, by the input-store check or by
    any race lint rule (both walk Provenance.functions)."""
    assert_verdict("rt12_alias_store", wl)


def test_a_global_launch_counter_at_y_plus_its_distance_from_y_is_rejected(wl):
    """Was (version 14): input_stores._Analysis.transfer gives a load of a module variable only self.memory
    (what the kernel stores), not the address its initialiser holds (`rt12_cell = rt12_launches`), and
    _transfer_parts gives `c - y` (c rootless) y's bit root and `y + (c - y)` y's pointer root: roots are
    sets, the y added back does not cancel the y subtracted, so the write into rt12_launches has roots {y}
    and race_lint._launch_state_writes finds no .global variable in it."""
    assert_verdict("rt12_cancel_global_state", wl)


# ------------------------------------------------------------------------------------------ race lint holes


def test_a_shared_launch_counter_bumped_by_red_before_its_read_is_rejected(wl):
    """Was (version 14): race lint rule 5's .shared form (race_lint._stale_shared_reads) counts every
    writes_memory instruction as a store that initialises the variable; red.shared.add is a read-modify-
    write of the word an earlier CTA left, so the ld.shared after it reads an 'initialised' variable
    (_shared_load takes an atom for a load, a red for none)."""
    assert_verdict("rt12_red_shared_state", wl)


def test_a_shared_launch_counter_indexed_by_bits_of_y_is_rejected(wl):
    """Was (version 14): race_lint._stale_shared_reads (roots_of) examines a load only when every root of
    its address is a .shared variable (`r <= shared`); the index (y >> 8) & 3 adds y's bit root, so the load
    of rt12_seen[...] is never examined, and _unvouched_loads takes rt12_seen's root for a voucher."""
    assert_verdict("rt12_hashed_shared_state", wl)


def test_an_arrival_order_decoded_from_an_mbarrier_token_is_rejected(wl):
    """Was (version 14): race lint rule 4's mbarrier form (race_lint._mbarrier_observations) flags
    mbarrier.pending_count and test_wait/try_wait results only; the state token mbarrier.arrive returns
    holds the same count (ptxas lowers pending_count for sm_90 to 0x100000 - ((token >> 43) & 0xfffff)), and
    a token read by shifts and a compare is not followed."""
    assert_verdict("rt12_arrive_token_clock", wl)


def test_an_arrival_order_read_after_a_red_is_rejected(wl):
    """Was (version 14): race lint rule 4's order form (race_lint._order_atomics) flags an atom whose result
    is read and atom.exch/.cas; a red.shared.add followed by an ld.shared of the same word observes the
    arrival order as that result would, and no rule pairs the two (no loop for rule 6, an initialised
    variable for rule 5)."""
    assert_verdict("rt12_red_order_clock", wl)


def test_a_spin_on_a_shared_flag_read_by_ldmatrix_is_rejected(wl):
    """Was (version 14): rule 6's shared form (race_lint._shared_spin_waits) and rule 1 (_spin_waits) take
    only ld/ldu/atom for reads (_shared_read, _global_read) and trace through memory from ld/ldu only
    (_through_memory): a loop whose exit depends on an ldmatrix of the shared flag waits on nothing by the
    rules."""
    assert_verdict("rt12_ldmatrix_spin_clock", wl)


def test_the_cluster_kernels_are_cluster_launches_for_rule_7():
    """Precondition of the next test: rule 7 is on for the cluster kernels (two CTAs per cluster)."""
    for parts in (rt.CLUSTER_BULK_PUSH, rt.HONEST_CLUSTER_PUSH):
        k = rt.build(parts)
        fn = k.module.function(k.entry)
        assert rl._cluster_size(k, fn) == 2 and rl._clustered(k, fn)
        assert "cp.async.bulk.shared::cluster.shared::cta" in rt.ptx(**{a: b for a, b in parts.items()
                                                                       if a != "launch"})


def test_a_dsmem_bulk_push_before_the_cluster_barrier_is_rejected(wl):
    """Was (version 14): rule 7 (race_lint._cluster_lifetimes) counts as accesses of another CTA's shared
    memory only ld/ldu/st/atom/red (_remote_access, _PLAIN_ACCESS); a cp.async.bulk.shared::cluster push to
    a mapa address (and a remote mbarrier complete_tx) is none, so the missing cluster barrier between the
    peer's mbarrier.init and the push is not seen."""
    assert_verdict("rt12_cluster_bulk_push", wl)


def test_the_callees_are_analysed():
    """Precondition of the next two tests: the provenance reaches both callees, whose pointer parameter carries
    the entry's rt12_slot and y respectively."""
    for parts, callee, root in ((rt.CALLEE_LOCAL_STATE, "rt12_peek", "s:rt12_slot"),
                                (rt.CALLEE_READBACK_CLOCK, "rt12_read", "p2")):
        prov = provenance(rt.build(parts))
        assert callee in [f.name for f in prov.functions]
        loads = [i for i in prov.instructions if i.opcode == "ld" and "param" not in i.modifiers
                 and prov._owner.get(id(i)) is not None and prov._owner[id(i)].fn.name == callee]
        assert len(loads) == 1 and prov.address_roots(loads[0]) == frozenset({root})


def test_a_local_launch_counter_read_by_a_callee_is_rejected(wl):
    """Was (version 15): rule 5's .local form (race_lint._stale_local_reads) analysed each function with the .local
    variables it may name itself (_local_variables(kernel, fn)); rt12_peek's generic ld through a pointer to the
    entry's rt12_slot was no local access of rt12_peek, and in the entry rt12_slot is only stored. Version 16:
    each callee is summarised (what it stores on every path, what it reads first, through its pointer
    parameters) and its call judged in the caller."""
    r = assert_verdict("rt12_callee_local_state", wl)
    assert "ld.u32" in r.reason


# other spellings of the kind: the helper reads through cvta.to.local and ld.local, at an offset of the pointer,
# through a second helper; the caller stores the other half of the word or only on one path first
_PEEK_LOCAL = rt._PEEK.replace("\tld.u32 %r1, [%rd1];", "\tcvta.to.local.u64 %rd1, %rd1;\n\tld.local.u32 %r1, [%rd1];")
_PEEK_OFF = (rt._PEEK.replace("\tld.u32 %r1, [%rd1];", "\tld.u32 %r1, [%rd1+4];"), "\t.local .align 4 .u32 rt12_slot[2];\n")
_INNER = (".func (.param .b32 rt12_iret) rt12_inner(.param .b64 rt12_ip)\n{\n\t.reg .b64 %rd<2>;\n\t.reg .b32 %r<2>;\n"
          "\tld.param.u64 %rd1, [rt12_ip];\n\tld.u32 %r1, [%rd1];\n\tst.param.b32 [rt12_iret], %r1;\n\tret;\n}\n")
_PEEK_NESTED = _INNER + rt._PEEK.replace("\tld.u32 %r1, [%rd1];", (
    "\t{\n\t.param .b64 q0;\n\tst.param.b64 [q0], %rd1;\n\t.param .b32 q1;\n\tcall.uni (q1), rt12_inner, (q0);\n"
    "\tld.param.b32 %r1, [q1];\n\t}"))
LOCAL_SPELLINGS = {
    "ld_local": dict(rt.CALLEE_LOCAL_STATE, globals_=_PEEK_LOCAL),
    "offset": dict(rt.CALLEE_LOCAL_STATE, globals_=_PEEK_OFF[0], decls=_PEEK_OFF[1],
                   pre=rt.CALLEE_LOCAL_STATE["pre"].replace("\tmov.u64 %rd20, rt12_slot;",
                                                            "\tst.local.u32 [rt12_slot], 0;\n\tmov.u64 %rd20, rt12_slot;")),
    "nested": dict(rt.CALLEE_LOCAL_STATE, globals_=_PEEK_NESTED),
    "one_path": dict(rt.CALLEE_LOCAL_STATE, pre=rt.CALLEE_LOCAL_STATE["pre"].replace(
        "\tmov.u64 %rd20, rt12_slot;", "\tsetp.eq.u32 %p9, %r3, 0;\n\t@%p9 bra $L_skip;\n\tst.local.u32 [rt12_slot], 0;\n"
        "$L_skip:\n\tmov.u64 %rd20, rt12_slot;")),
}


@pytest.mark.parametrize("spelling", list(LOCAL_SPELLINGS))
def test_a_local_counter_read_by_a_callee_spelled_otherwise_is_rejected(spelling, wl):
    """Other spellings of rt12_callee_local_state's kind (version 16): what matters is whether every byte a callee
    reads first was stored on every path before the call, however the callee addresses it."""
    assert_rejected(rt.build(LOCAL_SPELLINGS[spelling]), wl, *VERDICT["rt12_callee_local_state"])


def test_a_global_readback_in_a_callee_after_a_barrier_is_rejected(wl):
    """Was (version 14): rule 8 (race_lint._global_exchanges) pairs the writes and the reads of one function
    (`for f in prov.functions`); the entry writes y[r0, 0] and rt12_read, called after the barrier, reads
    it, so neither function holds both."""
    assert_verdict("rt12_callee_readback_clock", wl)


# ------------------------------------------------------------------------------------------ caught forms


@pytest.mark.parametrize("name", list(rt.CAUGHT))
def test_the_hole_one_change_away_is_rejected(name, wl):
    """Regression: each hole's nearest form that the checks catch, with the status and kind its hole should get."""
    assert_rejected(rt.build(rt.CAUGHT[name]), wl, *VERDICT[name], CAUGHT_LINE[name])


# ------------------------------------------------------------------------------------------ honest controls


def test_an_honest_red_count_after_a_zeroing_store_is_accepted(wl):
    k = rt.build(rt.HONEST_RED_COUNT)
    assert rl.race_lint(k, None, False, False, False, False).ok
    assert_accepted(k, wl)


def test_an_honest_cluster_push_between_cluster_barriers_is_accepted(wl):
    p = assert_accepted(rt.build(rt.HONEST_CLUSTER_PUSH), wl)
    assert p.resources.shared_static_bytes >= 32 + 8 + 16 + 16


def test_an_honest_out_parameter_helper_is_accepted(wl):
    """Was (version 15): input_stores() accepted a callee's write only into an output buffer or a variable of the
    module or of the callee itself, not into the caller's .local depot its pointer parameter carries; and rule 5's
    .local form rejected the entry's ld.local next (_written_on_every_path saw no store: it is in the callee).
    Version 16: a callee may write any analysed function's variables, and a call stores what its callee stores on
    every path."""
    assert_accepted(rt.build(rt.HONEST_OUT_PARAM), wl)


def test_an_out_parameter_read_where_the_helper_did_not_write_is_rejected(wl):
    """The other side: the entry reads 4 bytes past what rt12_divisor writes, or the helper writes only on one
    path."""
    past = dict(rt.HONEST_OUT_PARAM, decls="\t.local .align 4 .b8 rt12_depot[8];\n",
                mid=rt.HONEST_OUT_PARAM["mid"].replace("[rt12_depot];", "[rt12_depot+4];"))
    guarded = dict(rt.HONEST_OUT_PARAM, globals_=rt._DIVISOR.replace(
        "\tst.f32 [%rd1], %f1;", "\tsetp.eq.u32 %p1, %r1, 0;\n\t@%p1 bra $L_no;\n\tst.f32 [%rd1], %f1;\n$L_no:").replace(
        "\t.reg .f32 %f<2>;", "\t.reg .f32 %f<2>;\n\t.reg .pred %p<2>;"))
    for parts in (past, guarded):
        assert_rejected(rt.build(parts), wl, ND, "race_lint", "launch_state")
