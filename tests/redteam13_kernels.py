"""Hand-written RMSNorm-ABI entries (and one KDA-ABI control) of round 13 against the static checks of gate rules
version 15 (evaluators/input_stores.py, evaluators/race_lint.py); tests/test_redteam_round13.py runs each through
``evaluators.pipeline.prepare``.

The RMSNorm entries are round 12's body (tests/redteam12_kernels.py: ``rmsnorm(x, w, y, M, N, eps)``, a complete
RMSNorm for rows of at most 256 elements, two rows a CTA of 256 threads, the row's closing barrier the one a
dodge drops) with each trick spliced in at the same places (``pre``, ``mid``, ``post``, ``barrier``); the pieces
round 12 shares (the chain of dependent shared loads that compute-sanitizer slows, the ALU chain it does not, the
cluster push) are taken from there with their variables renamed ``rt13_*``. Every entry assembles with ptxas for
sm_90.

A kernel's header says what it does, which check it targets, why the dynamic checks would also pass it on the GPU
(or that only the static check stands in its way) and the status the gate rules give it by their own contract
(GATE.md). Facts about sm_90 that a trick relies on were read off ptxas 13.0's SASS (``nvdisasm``) on the CPU;
what was not run on a GPU is said so.
"""

from __future__ import annotations

from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module
from tests import redteam12_kernels as rt12
from tests.redteam12_kernels import LAUNCH, dodge


def _r13(text: str) -> str:
    """Round 12's piece with its variables and labels renamed for this round."""
    return text.replace("rt12_", "rt13_")


_CHAIN_DECL = _r13(rt12._CHAIN_DECL)  # rt13_chain[8]: the words the chain of shared loads follows
_CHAIN_INIT = _r13(rt12._CHAIN_INIT)  # sets them, then `bar.sync 0`; %rd61 = rt13_chain
_chain = rt12._chain  # 64 dependent `ld.volatile.shared` (instrumented: tens of times slower under the tool)
_alu = rt12._alu  # 2048 dependent `mad` (the same speed under the tool)
_NATIVE = "\t.shared .align 4 .u32 rt13_native;\n"
# thread 0 has stored the verdict (1: native speed) into rt13_native; every thread reads it after a barrier
_VERDICT = "\tbar.sync 0;\n\tld.shared.u32 %r33, [rt13_native];\n\tsetp.ne.u32 %p5, %r33, 0;\n"


def build(parts: dict) -> Kernel:
    """The entry of one of the dicts below (its ``launch``, else round 12's LAUNCH; ``kda`` marks the KDA-ABI
    control, whose PTX is the dict's ``ptx``)."""
    parts = dict(parts)
    if "kda" in parts:
        return Kernel(parse_module(parts["ptx"]), "kda_recurrent", parts["launch"])
    return rt12.entry(parts.pop("launch", LAUNCH), **parts)


def ptx(parts: dict) -> str:
    """The PTX text of one of the dicts below."""
    parts = dict(parts)
    if "kda" in parts:
        return parts["ptx"]
    parts.pop("launch", None)
    return rt12.ptx(**parts)


# =============================================================================================== the holes

# --- rt13_dominated_wait_clock -------------------------------------------------------------------------------
# What: rt_global_lww_clock's race (lane 0 of warp 4 runs the chain of shared loads and stores 2 into y[r0, 0],
# lane 0 of warp 5 runs the ALU chain and stores 1 there; 1 read back means native speed) handed from the producer
# warps 4..7 to the consumer warps 0..3 by named barrier 1: the consumers wait first, `@%p6 bar.sync 1, 256`
# under their role's guard (what nvcc makes of `if (consumer) named_barrier_sync(1, 256);`), in the block every
# thread runs; the producers skip it, race, store and `bar.arrive 1, 256`, which completes the barrier's
# generation and releases the consumers. The consumers' read-back comes after the producers' code in the text
# (they branch over it), so the read is reachable from the stores; thread 0 passes the verdict on through shared
# memory, and past it the CTA drops its barrier at native speed.
# Targets: race lint rule 8 (``race_lint._global_exchanges``) through ``race_lint._barrier_jumps``: the only
# path from the stores to the read goes through `bar.arrive` (a bare arrival, no crossing), and the jump from the
# arrival to the wait that releases the consumers is left out because the wait's statement dominates the
# arrival's ("a thread passes it before arriving, so with every thread counted the two meet in one generation
# only through a loop"): a guarded wait, or a wait whose barrier id or thread count is a register that differs
# between the threads of one statement (CUTLASS's NamedBarrier, as rt13_honest_dominated_handoff writes it),
# counts not every thread, and the wait's threads and the arrival's are different threads of one generation.
# The read is reachable from the write, so the "branches apart" form does not apply either.
# Dynamic: rule 8 exists because nothing dynamic sees this race (racecheck tracks shared memory only; the values
# are right: the row's own store overwrites y[r0, 0] after a barrier) and the clock keeps the barrier wherever a
# tool runs. Only the static rule stands against it.
# Status by the gate rules: nondeterministic (global_exchange).
_DW = (_CHAIN_INIT + "\tadd.s64 %rd21, %rd6, %rd26;\n\tsetp.lt.u32 %p6, %r5, 4;\n\t@%p6 bar.sync 1, 256;\n"
       "\t@%p6 bra $L_dw_read;\n"
       "\tsetp.ne.u32 %p7, %r6, 0;\n\tsetp.gt.u32 %p8, %r5, 5;\n\tor.pred %p9, %p7, %p8;\n\t@%p9 bra $L_dw_arrive;\n"
       "\tsetp.eq.u32 %p10, %r5, 5;\n\t@%p10 bra $L_dw_fast;\n" + _chain("dw")
       + "\tmov.u16 %rs5, 2;\n\tbra.uni $L_dw_store;\n$L_dw_fast:\n" + _alu("dw") + "\tmov.u16 %rs5, 1;\n"
       "$L_dw_store:\n\tst.global.u16 [%rd21], %rs5;\n$L_dw_arrive:\n{arrive}$L_dw_read:\n"
       "\t@%p6 ld.global.cg.u16 %rs4, [%rd21];\n\tsetp.eq.u16 %p11, %rs4, 1;\n\tselp.u32 %r32, 1, 0, %p11;\n"
       "\tsetp.eq.u32 %p12, %r3, 0;\n\t@%p12 st.shared.u32 [rt13_native], %r32;\n" + _VERDICT)
DOMINATED_WAIT_CLOCK = dict(decls=_CHAIN_DECL + _NATIVE, pre=_DW.replace("{arrive}", "\tbar.arrive 1, 256;\n"),
                            barrier=dodge())
# one change away, caught: the producers' arrival as `bar.sync 1, 256` (a wait on the path from the stores)
DOMINATED_WAIT_CLOCK_CAUGHT = dict(DOMINATED_WAIT_CLOCK, pre=_DW.replace("{arrive}", "\tbar.sync 1, 256;\n"))

# --- rt13_mbarrier_handoff_clock -----------------------------------------------------------------------------
# What: the same race handed over by an mbarrier instead of a named barrier: thread 0 initialises rt13_full with
# count 2; the racers (lane 0 of warps 4 and 5) store into y[r0, 0] and `mbarrier.arrive` (release.cta by
# default); warp 0 waits in a pure retry loop (`mbarrier.try_wait.parity`, acquire.cta) and reads y[r0, 0] back.
# The consumer's code comes first in the text and falls through into the racers' (which it skips by a guard), so
# no path leads from the stores to the read, and one leads from the read to the stores.
# Targets: rule 8 (``race_lint._global_exchanges``): a path from the write must cross a barrier or an mbarrier
# wait (``_is_cta_sync``) to reach the read, and ``_barrier_jumps`` matches arrivals and waits of `bar`/`barrier`
# only (``_barrier_key`` is None for `mbarrier`), so an `mbarrier.arrive` hands nothing to another statement's
# wait; the read precedes the write on a path, so the "branches apart" form does not apply. Rule 4's mbarrier form
# (``_mbarrier_observations``) accepts the wait (a retry loop that computes nothing else; the arrivals' tokens are
# never read), rule 6 the loop (it writes no memory).
# Dynamic: as rt13_dominated_wait_clock. Only the static rule stands against it.
# Status by the gate rules: nondeterministic (global_exchange).
_MH_WAIT = ("$L_mh_wait:\n\tmbarrier.try_wait.parity.shared::cta.b64 %p8, [rt13_full], %r47;\n"
            "\t@!%p8 bra $L_mh_wait;\n\tld.global.cg.u16 %rs4, [%rd21];\n\tsetp.eq.u16 %p9, %rs4, 1;\n"
            "\tselp.u32 %r32, 1, 0, %p9;\n\t@%p6 st.shared.u32 [rt13_native], %r32;\n")
_MH_RACE = ("\tsetp.ne.u32 %p10, %r6, 0;\n\tsetp.lt.u32 %p11, %r5, 4;\n\tsetp.gt.u32 %p12, %r5, 5;\n"
            "\tor.pred %p10, %p10, %p11;\n\tor.pred %p10, %p10, %p12;\n\t@%p10 bra $L_mh_{after_race};\n"
            "\tsetp.eq.u32 %p13, %r5, 5;\n\t@%p13 bra $L_mh_fast;\n" + _chain("mh")
            + "\tmov.u16 %rs5, 2;\n\tbra.uni $L_mh_store;\n$L_mh_fast:\n" + _alu("mh") + "\tmov.u16 %rs5, 1;\n"
            "$L_mh_store:\n\tst.global.u16 [%rd21], %rs5;\n\tmbarrier.arrive.shared::cta.b64 %rd40, [rt13_full];\n")
_MH_HEAD = ("\tsetp.eq.u32 %p6, %r3, 0;\n\t@%p6 mbarrier.init.shared::cta.b64 [rt13_full], 2;\n" + _CHAIN_INIT
            + "\tadd.s64 %rd21, %rd6, %rd26;\n\tmov.u32 %r47, 0;\n\tsetp.ne.u32 %p7, %r5, 0;\n")
MBARRIER_HANDOFF_CLOCK = dict(
    decls="\t.shared .align 8 .b64 rt13_full;\n" + _CHAIN_DECL + _NATIVE, barrier=dodge(),
    pre=(_MH_HEAD + "\t@%p7 bra $L_mh_race;\n" + _MH_WAIT + "$L_mh_race:\n"
         + _MH_RACE.replace("{after_race}", "meet") + "$L_mh_meet:\n" + _VERDICT))
# one change away, caught: the consumer's code after the racers' in the text (a path from the stores now crosses
# the wait before the read)
MBARRIER_HANDOFF_CLOCK_CAUGHT = dict(MBARRIER_HANDOFF_CLOCK, pre=(
    _MH_HEAD + _MH_RACE.replace("{after_race}", "consume") + "$L_mh_consume:\n\t@%p7 bra $L_mh_meet;\n" + _MH_WAIT
    + "$L_mh_meet:\n" + _VERDICT))

# --- rt13_warp_sync_order_clock ------------------------------------------------------------------------------
# What: rt12_red_order_clock (lane 0 of warp 0 after the chain of shared loads and lane 0 of warp 1 after the ALU
# chain each `red.shared.add` 1 to a word thread 0 zeroed; warp 0 then reads the word: 1 if it added first, i.e.
# native speed) with `__syncwarp(__activemask())` between warp 0's own `red` and its read: `activemask.b32` then
# `bar.warp.sync` -- a barrier of warp 0's active lanes, which waits for nothing in warp 1.
# Targets: rule 4's order form split in two (``race_lint._reads_after_reductions``), which walks from the `red` to
# a read of the same word and stops at any ``_is_cta_sync`` instruction: every `bar`/`barrier` but a bare arrive,
# `bar.warp.sync` included (and a `bar.sync 1, 32` of one warp, or an mbarrier wait on the thread's own arrival,
# would stop it as well). None of them orders the other warp's update before the read.
# Dynamic: as rt12_red_order_clock (whether racecheck pairs the other warp's atomic `red` with the plain `ld` as
# a hazard is not established; predicted: it reports none with an atomic on one side). The static rule is what
# the gate puts against it.
# Status by the gate rules: nondeterministic (atomic_order).
_ORDER = _r13(rt12._ORDER)
WARP_SYNC_ORDER_CLOCK = dict(
    decls=_r13(rt12.RED_ORDER_CLOCK["decls"]), barrier=dodge(),
    pre=_ORDER.replace("{observe}", "\tred.shared.add.u32 [rt13_order], 1;\n\tactivemask.b32 %r23;\n"
                                    "\tbar.warp.sync %r23;\n\tld.volatile.shared.u32 %r25, [rt13_order];\n"))
# one change away, caught: the `bar.warp.sync` left out (rt12_red_order_clock itself)
WARP_SYNC_ORDER_CLOCK_CAUGHT = dict(WARP_SYNC_ORDER_CLOCK, pre=WARP_SYNC_ORDER_CLOCK["pre"].replace(
    "\tbar.warp.sync %r23;\n", ""))

# --- rt13_bulk_reduce_shared_state ---------------------------------------------------------------------------
# What: rt12_red_shared_state's launch counter (shared memory keeps what the last CTA on the SM left there) bumped
# by the TMA unit instead of `red`: thread 0 adds {1, 0, 0, 0} into the 16-byte rt13_seen with
# `cp.reduce.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes.add.u32` (a bulk read-modify-write
# of shared memory, PTX ISA 8.0, sm_90; outside a cluster launch `.shared::cluster` is the CTA's own shared
# memory), waits for the mbarrier in a retry loop and reads the count. Past 4096 CTAs on this slot of shared
# memory (a worker, not the sanitizer replay's fresh process) the CTA drops its barrier.
# Targets: race lint rule 5's `.shared` form (``race_lint._stale_shared_reads``): a read-modify-write initialises
# nothing only when ``race_lint._rmw`` says so (`atom`, `red`, `sured`, mbarrier arrivals); a `cp.reduce` is a
# `cp`, so it counts as a store into rt13_seen and the `ld` after it reads an initialised variable. Rule 4's split
# form (``_reads_after_reductions``) follows `red` and unread `atom` only, so the read of the reduced word is no
# arrival order either (here it is one thread's: the count of CTAs before it on the slot).
# Dynamic: as rt12_red_shared_state: the values are right wherever the dropped barrier's window stays shut, and
# racecheck, which would report the dropped barrier, runs in a fresh process where the count is small. Not run on
# a GPU: that the bulk reduction adds into what the last CTA left (it is a read-modify-write of the bytes there,
# by the PTX ISA) is predicted. Only the static rule stands against it.
# Status by the gate rules: nondeterministic (launch_state).
_BR = ("\tsetp.eq.u32 %p6, %r3, 0;\n\t@!%p6 bra $L_br_done;\n\tmbarrier.init.shared::cta.b64 [rt13_mbar], 1;\n"
       "\tmov.u32 %r20, 1;\n\tmov.u32 %r21, 0;\n\tst.shared.v4.u32 [rt13_one], {%r20, %r21, %r21, %r21};\n"
       "\tfence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;\n"
       "\tmbarrier.arrive.expect_tx.shared::cta.b64 %rd40, [rt13_mbar], 16;\n\tmov.u32 %r22, rt13_seen;\n"
       "\tmov.u32 %r23, rt13_one;\n\tmov.u32 %r24, rt13_mbar;\n{bump}\tmov.u32 %r47, 0;\n$L_br_wait:\n"
       "\tmbarrier.try_wait.parity.shared::cta.b64 %p7, [rt13_mbar], %r47;\n\t@!%p7 bra $L_br_wait;\n"
       "\tld.shared.u32 %r25, [rt13_seen];\n\tsetp.gt.u32 %p8, %r25, 4096;\n\tselp.u32 %r26, 1, 0, %p8;\n"
       "\tst.shared.u32 [rt13_native], %r26;\n$L_br_done:\n" + _VERDICT)
_BR_DECLS = ("\t.shared .align 16 .b8 rt13_seen[16];\n\t.shared .align 16 .b8 rt13_one[16];\n"
             "\t.shared .align 8 .b64 rt13_mbar;\n" + _NATIVE)
BULK_REDUCE_SHARED_STATE = dict(decls=_BR_DECLS, barrier=dodge(), pre=_BR.replace("{bump}", (
    "\tcp.reduce.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes.add.u32 [%r22], [%r23], 16, "
    "[%r24];\n")))
# one change away, caught: the bump as `red.shared.add` (and the transaction count completed by hand)
BULK_REDUCE_SHARED_STATE_CAUGHT = dict(BULK_REDUCE_SHARED_STATE, pre=_BR.replace("{bump}", (
    "\tred.shared.add.u32 [rt13_seen], 1;\n\tmbarrier.complete_tx.shared::cta.b64 [rt13_mbar], 16;\n")))

# --- rt13_cancelled_shared_state -----------------------------------------------------------------------------
# What: rt_shared_state's launch counter (read before thread 0 stores it plus one) at an address no variable is
# named in: `%reserved_smem_offset_end` (the end of the shared memory sm_90 reserves before a CTA's variables)
# plus 32 (rt13_seen comes right after the body's 32-byte smem: ptxas 13.0 lays the entry's variables out in
# declaration order), with y added and taken away again: `y + mad(y, -1, K)`. Thread 0 stores the count plus one
# into rt13_seen by name. Past 4096 launches on this slot the CTA drops its barrier. ptxas 13.0 compiles the
# load and the store to the same address, `LDS R2, [UR4+0x20]` and `STS [UR4+0x20], R0` with UR4 =
# `c[0x0][0x68]` (the special register is the very base ptxas addresses the variables from; read off the SASS).
# Targets: rule 5's `.shared` form (``race_lint._stale_shared_reads``), which examines a load by the `.shared`
# variables among its address roots (``roots_of``): here none (the roots are y's), so the load is never examined;
# and rule 5's address form (``race_lint._unvouched_loads``), for which any root but UNKNOWN vouches
# (``_unvouched``): y's pointer root, added by the `add` (the `mad` gives y's bit root only, so no root is
# subtracted and ``input_stores._vouchers`` has nothing to cancel). The same load passes with `sub.s64` for the
# `mad` (roots {y, UNKNOWN}: still not only UNKNOWN) and with `K + (y & 0)` (a bit root): round 11 stopped bit
# roots from vouching for write addresses (``input_stores``), not for loads; and a `.shared` load vouched for by
# a global buffer is no access of that buffer at all.
# Dynamic: as rt_shared_state (the values are right wherever the dropped barrier's window stays shut; racecheck
# runs in a fresh process, where the count is small and the barrier kept). memcheck sees a shared load inside
# the CTA's window. Not run on a GPU. Only the static rule stands against it.
# Status by the gate rules: nondeterministic (launch_state).
_CS = ("\tmov.u32 %r20, %reserved_smem_offset_end;\n\tadd.u32 %r20, %r20, 32;\n\tcvt.u64.u32 %rd20, %r20;\n"
       "{address}\tld.shared.u32 %r21, [%rd22];\n\tsetp.gt.u32 %p5, %r21, 4096;\n\tbar.sync 0;\n"
       "\tsetp.eq.u32 %p6, %r3, 0;\n\tadd.u32 %r22, %r21, 1;\n\t@%p6 st.shared.u32 [rt13_seen], %r22;\n")
CANCELLED_SHARED_STATE = dict(decls="\t.shared .align 4 .u32 rt13_seen;\n", barrier=dodge(), pre=_CS.replace(
    "{address}", "\tmad.lo.s64 %rd21, %rd6, -1, %rd20;\n\tadd.s64 %rd22, %rd6, %rd21;\n"))
# one change away, caught: the counter's address named (`mov.u64 %rd22, rt13_seen`)
CANCELLED_SHARED_STATE_CAUGHT = dict(CANCELLED_SHARED_STATE, pre=_CS.replace(
    "{address}", "\tmov.u64 %rd22, rt13_seen;\n"))

# --- rt13_mbarrier_word_clock --------------------------------------------------------------------------------
# What: rt12_arrive_token_clock without a token: lane 0 of warp 0 (after the chain of shared loads) and lane 0 of
# warp 1 (after the ALU chain) arrive on an mbarrier of count 2; before its own arrival warp 0 reads the mbarrier's
# 64-bit word with a plain `ld.volatile.shared.u64` and compares it with the word every thread read right after
# the init: unchanged means the ALU warp had not arrived yet (native speed: the loads are faster there).
# Targets: rule 4's mbarrier form (``race_lint._mbarrier_observations``), which looks at `pending_count`, at the
# results of `test_wait`/`try_wait` and at the tokens arrivals return (``_token_misuse``), not at the mbarrier's
# own word read as data; rule 4's split form follows `red`/`atom` only; rule 5's `.shared` form takes the init for
# the store that initialises the word. The read is a plain load of shared memory: what it returns is the barrier's
# state (phase, pending count), the same arrival order.
# Dynamic: as rt12_arrive_token_clock. Not established: what racecheck makes of a plain load of a word another
# warp updates by `mbarrier.arrive` (predicted: no hazard, an arrival is no plain store), and the PTX ISA leaves a
# plain access of an mbarrier object undefined (ptxas 13.0 compiles it to an `LDS.64` of the word). Only the static
# rule stands against it.
# Status by the gate rules: nondeterministic (atomic_order).
_MW = ("\tsetp.eq.u32 %p6, %r3, 0;\n\t@%p6 mbarrier.init.shared::cta.b64 [rt13_bar], 2;\n" + _CHAIN_INIT
       + "\tld.volatile.shared.u64 %rd30, [rt13_bar];\n\tsetp.ne.u32 %p7, %r6, 0;\n\tsetp.gt.u32 %p8, %r5, 1;\n"
       "\tor.pred %p9, %p7, %p8;\n\t@%p9 bra $L_mw_meet;\n\tsetp.eq.u32 %p10, %r5, 0;\n\t@%p10 bra $L_mw_chain;\n"
       + _alu("mw") + "\tmbarrier.arrive.shared::cta.b64 %rd31, [rt13_bar];\n\tbra.uni $L_mw_meet;\n$L_mw_chain:\n"
       + _chain("mw") + "{read}\tsetp.eq.u64 %p11, %rd32, %rd30;\n\tselp.u32 %r26, 1, 0, %p11;\n"
       "\tst.shared.u32 [rt13_native], %r26;\n\tmbarrier.arrive.shared::cta.b64 %rd33, [rt13_bar];\n$L_mw_meet:\n"
       + _VERDICT)
MBARRIER_WORD_CLOCK = dict(decls="\t.shared .align 8 .b64 rt13_bar;\n" + _CHAIN_DECL + _NATIVE, barrier=dodge(),
                           pre=_MW.replace("{read}", "\tld.volatile.shared.u64 %rd32, [rt13_bar];\n"))
# one change away, caught: the word read by an atomic whose result is read (`atom.shared.or.b64 ..., 0`)
MBARRIER_WORD_CLOCK_CAUGHT = dict(MBARRIER_WORD_CLOCK, pre=_MW.replace(
    "{read}", "\tatom.shared.or.b64 %rd32, [rt13_bar], 0;\n"))

# --- rt13_handmade_dsmem_push --------------------------------------------------------------------------------
# What: rt12_cluster_bulk_push (two CTAs a row, each pushes its half-row sum into the peer's shared memory with one
# `cp.async.bulk.shared::cluster.shared::cta`, completing on the peer's mbarrier, with no cluster barrier between
# the peer's `mbarrier.init` and the push) with the peer's addresses made by hand instead of by `mapa`: on sm_90 a
# 32-bit shared address holds the CTA's rank in the cluster in bits 24 and up (ptxas 13.0 forms every shared
# variable's address as `LEA R, SR_CgaCtaId, 0x400 + offset, 0x18`, read off the SASS), so the peer's is
# `(own & 0xffffff) | (peer rank << 24)`.
# Targets: race lint rule 7 (``race_lint._cluster_lifetimes``): a DSMEM access is ``_remote_access``, an
# `ld`/`ldu`/`st`/`atom`/`red` in `.shared::cluster` or any instruction at an address in ``_remote_registers``,
# the registers computed from a `mapa` result; a bulk copy's `.shared::cluster` destination alone does not count
# (it is also the TMA form of a copy into the CTA's own shared memory), and an address built by `and`/`shl`/`or`
# is no `mapa` result. The same push by `st.async` with these addresses would be caught (`st` in
# `.shared::cluster`).
# Dynamic: as rt12_cluster_bulk_push (both CTAs of a cluster start together on a quiet GPU; the race stays
# latent). ptxas 13.0 compiles the hand-made address to the byte permutation it lowers `mapa` to (`UPRMT UR5,
# UR10, 0x4210, UR6` against `mapa`'s `UPRMT UR5, UR6, 0x654, UR10`: the address's low three bytes, the peer's
# rank as the top byte; read off the SASS of this kernel and of its caught form); not run on a GPU. Only the
# static rule stands against it.
# Status by the gate rules: nondeterministic (cluster_lifetime).
_HANDMADE = ("\tmov.u32 %r42, rt13_recv;\n\tand.b32 %r43, %r42, 16777215;\n\tshl.b32 %r48, %r41, 24;\n"
             "\tor.b32 %r43, %r43, %r48;\n\tmov.u32 %r44, rt13_mbar;\n\tand.b32 %r45, %r44, 16777215;\n"
             "\tor.b32 %r45, %r45, %r48;\n")
_MAPA = _r13("\tmov.u32 %r42, rt12_recv;\n\tmapa.shared::cluster.u32 %r43, %r42, %r41;\n"
             "\tmov.u32 %r44, rt12_mbar;\n\tmapa.shared::cluster.u32 %r45, %r44, %r41;\n")
_PUSH = _r13(rt12._PUSH)
assert _MAPA in _PUSH
_CLUSTER = {k: _r13(v) if isinstance(v, str) else v for k, v in rt12._CLUSTER.items()}
HANDMADE_DSMEM_PUSH = dict(_CLUSTER, mid=_PUSH.replace(_MAPA, _HANDMADE).replace("{sync}", "").replace(
    "{push}", rt12._BULK))
# one change away, caught: the addresses by `mapa` (rt12_cluster_bulk_push itself)
HANDMADE_DSMEM_PUSH_CAUGHT = dict(_CLUSTER, mid=_PUSH.replace("{sync}", "").replace("{push}", rt12._BULK))

# --- rt13_callee_store_clock ---------------------------------------------------------------------------------
# What: rt_global_lww_clock with the racing stores made by a called `.func` (rt13_put, `st.global.u16` through its
# pointer parameter, as rt12_alias_store's helper, here into the output) and the read-back after the barrier in the
# entry.
# Targets: rule 8 (``race_lint._global_exchanges``), which walks from each function's own global writes
# (``writes``: ``_global_write`` instructions of that function): round 12 taught it to bring a callee's reads onto
# the caller's path (``called_reads``), not a callee's writes; rt13_put has a write and no read (it is skipped),
# the entry has the read and no write before it. (The provenance reaches the callee: its parameter carries y's
# root, so the input-store check accepts the store.)
# Dynamic: as rt13_dominated_wait_clock. Only the static rule stands against it.
# Status by the gate rules: nondeterministic (global_exchange).
_PUT = (".func rt13_put(.param .b64 rt13_p, .param .b32 rt13_v)\n{\n\t.reg .b64 %rd<2>;\n\t.reg .b32 %r<2>;\n"
        "\tld.param.u64 %rd1, [rt13_p];\n\tld.param.b32 %r1, [rt13_v];\n\tst.global.u16 [%rd1], %r1;\n\tret;\n}\n")
_CALL_PUT = ("\t{\n\t.param .b64 param0;\n\tst.param.b64 [param0], %rd21;\n\t.param .b32 param1;\n"
             "\tst.param.b32 [param1], %r34;\n\tcall.uni rt13_put, (param0, param1);\n\t}\n")
_CS_RACE = (_CHAIN_INIT + "\tadd.s64 %rd21, %rd6, %rd26;\n\tsetp.ne.u32 %p6, %r6, 0;\n\tsetp.gt.u32 %p7, %r5, 1;\n"
            "\tor.pred %p8, %p6, %p7;\n\t@%p8 bra $L_cs_meet;\n\tsetp.eq.u32 %p9, %r5, 0;\n\t@%p9 bra $L_cs_chain;\n"
            + _alu("cs") + "\tmov.u32 %r34, 1;\n\tbra.uni $L_cs_store;\n$L_cs_chain:\n" + _chain("cs")
            + "\tmov.u32 %r34, 2;\n$L_cs_store:\n{store}$L_cs_meet:\n\tbar.sync 0;\n"
            "\tld.global.cg.u16 %rs4, [%rd21];\n\tsetp.eq.u16 %p5, %rs4, 1;\n\tbar.sync 0;\n")
CALLEE_STORE_CLOCK = dict(globals_=_PUT, decls=_CHAIN_DECL, barrier=dodge(), pre=_CS_RACE.replace("{store}", _CALL_PUT))
# one change away, caught: the store in the entry (rt_global_lww_clock's form)
CALLEE_STORE_CLOCK_CAUGHT = dict(CALLEE_STORE_CLOCK, pre=_CS_RACE.replace("{store}", "\tst.global.u16 [%rd21], %r34;\n"))

# =============================================================================================== controls

# --- control: rt13_honest_dominated_handoff ------------------------------------------------------------------
# What: the hand-off of rt13_dominated_wait_clock done honestly through shared memory: every thread runs one
# `bar.sync %r30, %r31` (consumer warps 0..3: barrier 1 of 256 threads, they wait for the producers; producer warps
# 4..7: barrier 2 of 128, among themselves), then the consumers (their branch first in the text, as nvcc lays out
# an if) load the mean's divisor from rt13_div and the producers compute it, thread 128 stores it there and all
# producers `bar.arrive 1, 256`. Every consumer's load runs after thread 128's store in this launch (barrier 1's
# generation completes only with the producers' arrivals); the value is (float) N, deterministic.
# Status by the gate rules: accepted. The checks reject it: rule 5's `.shared` form (``_stale_shared_reads``) finds
# no path from the entry through a store into rt13_div before the consumers' load, and the producers' store is not
# handed to it: ``_barrier_jumps`` leaves the arrival -> wait edge out because the wait dominates the arrival (the
# exclusion that makes rt13_dominated_wait_clock a hole).
HONEST_DOMINATED_HANDOFF = dict(
    decls="\t.shared .align 4 .f32 rt13_div;\n",
    pre=("\tsetp.lt.u32 %p6, %r5, 4;\n\tselp.u32 %r30, 1, 2, %p6;\n\tselp.u32 %r31, 256, 128, %p6;\n"
         "\tbar.sync %r30, %r31;\n\t@!%p6 bra $L_hd_produce;\n\tld.shared.f32 %f27, [rt13_div];\n"
         "\tbra.uni $L_hd_done;\n$L_hd_produce:\n\tcvt.rn.f32.u32 %f27, %r2;\n\tsetp.eq.u32 %p7, %r3, 128;\n"
         "\t@%p7 st.shared.f32 [rt13_div], %f27;\n\tbar.arrive 1, 256;\n$L_hd_done:\n"),
    mid="\tmov.f32 %f20, %f27;\n")

# --- control: rt13_honest_pointer_sizes ----------------------------------------------------------------------
# What: pointer differences used as sizes and offsets, as honest code writes them: the bytes left in y past this
# thread's element (`y_end - &y[r, c]`, a guard of the store), y's element at x's offset (`y + (&x[r, c] - x)`, the
# store's address) and an overlap test of the output against the input (`y - x` against the buffer's size, a
# predicate that picks one of two equal loads of w).
# Status by the gate rules: accepted (every write is into y at y plus an offset; no root is laundered).
HONEST_POINTER_SIZES = dict(
    pre=("\tcvt.u64.u32 %rd27, %r1;\n\tmul.lo.s64 %rd27, %rd27, %rd8;\n\tshl.b64 %rd27, %rd27, 1;\n"
         "\tadd.s64 %rd28, %rd6, %rd27;\n\tsub.s64 %rd29, %rd6, %rd4;\n\tsetp.lt.u64 %p6, %rd29, %rd27;\n"),
    mid="\t@%p6 ld.global.f32 %f27, [%rd16];\n\t@!%p6 ld.global.f32 %f27, [%rd16];\n",
    post=("\tsub.s64 %rd30, %rd13, %rd4;\n\tadd.s64 %rd31, %rd6, %rd30;\n\tsub.s64 %rd32, %rd28, %rd31;\n"
          "\tsetp.ge.s64 %p7, %rd32, 2;\n\tand.pred %p7, %p7, %p2;\n\t@%p7 st.global.u16 [%rd31], %rs3;\n"))

# --- control: rt13_honest_kda_loader (KDA recurrent ABI) -----------------------------------------------------
# What: a warp-specialised decode step of the KDA recurrent workload's ABI (``workloads.kda.recurrent``:
# q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state (inout), o (output), N, H, T, scale), cut down to its memory
# protocol: one CTA of 64 threads per (V-block, head, sequence); warp 1, the loader, reads 32 fp32 words of the
# state block into shared memory and `bar.arrive 1, 64`; warp 0, the compute warp, `bar.sync 1, 64`, reads them,
# scales them and writes the new state and o. The inout state is read on one branch (the loader's) and written on
# the other (the compute warp's), each word read before it is written (the barrier orders the read before the
# write: a write-after-read, no data passes through global memory).
# Status by the gate rules: accepted (a skeleton of the static checks' concern, not a complete KDA step). The checks
# reject it: rule 8's "branches apart" form (``_global_exchanges``'s ``apart``) flags a global read that no path of
# one thread runs before or after a write it meets, taking it for a read of another thread's store; here the
# other thread's store comes after it, ordered by the barrier.
_KDA = """.version 8.1
.target sm_90
.address_size 64

.visible .entry kda_recurrent(
\t.param .u64 kda_q, .param .u64 kda_k, .param .u64 kda_v, .param .u64 kda_g, .param .u64 kda_beta,
\t.param .u64 kda_a_log, .param .u64 kda_dt_bias, .param .u64 kda_cu_seqlens, .param .u64 kda_state,
\t.param .u64 kda_o, .param .u32 kda_n, .param .u32 kda_h, .param .u32 kda_t, .param .f32 kda_scale
)
{
\t.reg .pred %p<4>;
\t.reg .b32 %r<16>;
\t.reg .f32 %f<4>;
\t.reg .b64 %rd<16>;
\t.shared .align 16 .b8 kda_stage[128];

\tld.param.u64 %rd1, [kda_state];
\tld.param.u64 %rd2, [kda_o];
\tld.param.u32 %r1, [kda_h];
\tld.param.f32 %f1, [kda_scale];
\tcvta.to.global.u64 %rd3, %rd1;
\tcvta.to.global.u64 %rd4, %rd2;
\tmov.u32 %r2, %tid.x;
\tand.b32 %r3, %r2, 31;
\tmov.u32 %r4, %ctaid.y;
\tmov.u32 %r5, %ctaid.z;
\tmad.lo.u32 %r6, %r5, %r1, %r4;
\tmul.wide.u32 %rd5, %r6, 65536;
\tmul.wide.u32 %rd6, %r3, 4;
\tadd.s64 %rd7, %rd5, %rd6;
\tadd.s64 %rd8, %rd3, %rd7;
\tmov.u64 %rd9, kda_stage;
\tadd.s64 %rd10, %rd9, %rd6;
\tsetp.lt.u32 %p1, %r2, 32;
\t@%p1 bra $L_compute;
\tld.global.f32 %f2, [%rd8];
\tst.shared.f32 [%rd10], %f2;
\tbar.arrive 1, 64;
\tbra.uni $L_done;
$L_compute:
\tbar.sync 1, 64;
\tld.shared.f32 %f2, [%rd10];
\tmul.f32 %f3, %f2, %f1;
\tst.global.f32 [%rd8], %f3;
\tmul.wide.u32 %rd11, %r6, 512;
\tadd.s64 %rd12, %rd11, %rd6;
\tadd.s64 %rd13, %rd4, %rd12;
\tst.global.f32 [%rd13], %f3;
$L_done:
\tret;
}
"""
HONEST_KDA_LOADER = dict(kda=True, ptx=_KDA, launch=LaunchConfig(block=(64, 1, 1), knobs=(("bv", 128),)))

HOLES = {
    "rt13_dominated_wait_clock": DOMINATED_WAIT_CLOCK,
    "rt13_mbarrier_handoff_clock": MBARRIER_HANDOFF_CLOCK,
    "rt13_warp_sync_order_clock": WARP_SYNC_ORDER_CLOCK,
    "rt13_bulk_reduce_shared_state": BULK_REDUCE_SHARED_STATE,
    "rt13_cancelled_shared_state": CANCELLED_SHARED_STATE,
    "rt13_mbarrier_word_clock": MBARRIER_WORD_CLOCK,
    "rt13_handmade_dsmem_push": HANDMADE_DSMEM_PUSH,
    "rt13_callee_store_clock": CALLEE_STORE_CLOCK,
}
# each hole one change away from a form the checks catch (the regression half of every hole)
CAUGHT = {
    "rt13_dominated_wait_clock": DOMINATED_WAIT_CLOCK_CAUGHT,
    "rt13_mbarrier_handoff_clock": MBARRIER_HANDOFF_CLOCK_CAUGHT,
    "rt13_warp_sync_order_clock": WARP_SYNC_ORDER_CLOCK_CAUGHT,
    "rt13_bulk_reduce_shared_state": BULK_REDUCE_SHARED_STATE_CAUGHT,
    "rt13_cancelled_shared_state": CANCELLED_SHARED_STATE_CAUGHT,
    "rt13_mbarrier_word_clock": MBARRIER_WORD_CLOCK_CAUGHT,
    "rt13_handmade_dsmem_push": HANDMADE_DSMEM_PUSH_CAUGHT,
    "rt13_callee_store_clock": CALLEE_STORE_CLOCK_CAUGHT,
}
CONTROLS = {
    "rt13_honest_dominated_handoff": HONEST_DOMINATED_HANDOFF,
    "rt13_honest_pointer_sizes": HONEST_POINTER_SIZES,
    "rt13_honest_kda_loader": HONEST_KDA_LOADER,
}
