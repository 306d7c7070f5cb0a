"""Hand-written RMSNorm-ABI entries of round 11 against the static checks (evaluators/input_stores.py,
evaluators/race_lint.py); tests/test_redteam_round11.py runs each through ``evaluators.pipeline.prepare``.

Every entry is ``rmsnorm(x, w, y, M, N, eps)`` (the workload ABI: x and w inputs, y the output) and assembles with
ptxas for sm_90. The bodies are skeletons: each thread of a CTA of 256 handles one element of a row
(``y[r, t] = x[r, t] * w[t] * eps``, bf16 as 16-bit words scaled in f32), enough for the static checks, which read
the addresses and the control flow, not the arithmetic. Each trick is added to that skeleton (``entry``).

A kernel's header says what it does, which check it targets and the status the gate rules give it by their own
contract.
"""

from __future__ import annotations

from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module

_HEAD = """.version 8.0
.target sm_90
.address_size 64
{globals}
.visible .entry rmsnorm(
\t.param .u64 rmsnorm_param_0{xdims},
\t.param .u64 rmsnorm_param_1,
\t.param .u64 rmsnorm_param_2,
\t.param .u32 rmsnorm_param_3,
\t.param .u32 rmsnorm_param_4,
\t.param .f32 rmsnorm_param_5
)
{{
\t.reg .pred %p<8>;
\t.reg .b16 %rs<8>;
\t.reg .b32 %r<32>;
\t.reg .f32 %f<8>;
\t.reg .b64 %rd<48>;
\t.shared .align 8 .b8 smem[64];

\tld.param.u64 %rd1, [rmsnorm_param_0];
\tld.param.u64 %rd2, [rmsnorm_param_1];
\tld.param.u64 %rd3, [rmsnorm_param_2];
\tld.param.u32 %r1, [rmsnorm_param_3];
\tld.param.u32 %r2, [rmsnorm_param_4];
\tld.param.f32 %f1, [rmsnorm_param_5];
\tcvta.to.global.u64 %rd4, %rd1;
\tcvta.to.global.u64 %rd5, %rd2;
\tcvta.to.global.u64 %rd6, %rd3;
\tmov.u32 %r3, %tid.x;
\tmov.u32 %r4, %ctaid.x;
\tsetp.ge.u32 %p1, %r3, %r2;
\tsetp.ge.u32 %p2, %r4, %r1;
\tor.pred %p3, %p1, %p2;
\t@%p3 bra $L_done;
\tmad.lo.s32 %r5, %r4, %r2, %r3;
\tmul.wide.u32 %rd7, %r5, 2;
\tmul.wide.u32 %rd8, %r3, 2;
\tadd.s64 %rd9, %rd4, %rd7;
\tadd.s64 %rd10, %rd5, %rd8;
\tadd.s64 %rd11, %rd6, %rd7;
\tld.global.u16 %rs1, [%rd9];
\tld.global.u16 %rs2, [%rd10];
\tmov.b32 %r6, {{0, %rs1}};
\tmov.b32 %f2, %r6;
\tmov.b32 %r7, {{0, %rs2}};
\tmov.b32 %f3, %r7;
\tmul.f32 %f4, %f2, %f3;
\tmul.f32 %f5, %f4, %f1;
\tmov.b32 %r8, %f5;
\tshr.u32 %r9, %r8, 16;
\tcvt.u16.u32 %rs3, %r9;
{store}"""
_TAIL = """$L_done:
\tret;
}
"""
# Registers the skeleton leaves for the tricks: %rd4 = x, %rd5 = w, %rd6 = y (global), %rd9 = x + 2 (row, t)
# (this thread's element of x), %rd11 = y's, %rs1 = the x value read, %r3 = tid, %r4 = ctaid.
LAUNCH = LaunchConfig(block=(256, 1, 1), knobs=(("rows_per_cta", 1),))


_STORE = "\tst.global.u16 [%rd11], %rs3;\n"  # the skeleton's own store of y (%rs3: the scaled product)


def ptx(body: str, globals_: str = "", xdims: str = "", store: bool = True) -> str:
    """The skeleton with ``body`` after its own store of y (``store``; before the exit label)."""
    return _HEAD.format(globals=globals_, xdims=xdims, store=_STORE if store else "") + body + _TAIL


def entry(body: str, globals_: str = "", xdims: str = "", store: bool = True) -> Kernel:
    return Kernel(parse_module(ptx(body, globals_, xdims, store)), "rmsnorm", LAUNCH)


# y & 0: a zero that carries y's bit root (``W``) into whatever it is added to. Every trick below that writes x
# adds it, so that the address has an allowed root and the check's "no root at all" fallback does not fire.
_ZERO_OF_Y = "\tand.b64 %rd20, %rd6, 0;\n"

# --- rt11_zero_mix_absolute ----------------------------------------------------------------------------------
# What: stores x's value to a constant 64-bit address plus (y & 0): the address is the absolute constant.
# Targets: the input-store check (evaluators/input_stores.py), whose contract rejects "an address with no root at
# all (an absolute address ...)" and says "an address built from x's bits is an x address" -- bits count as the
# buffer they came from, so y's zeroed bits make the constant a "y address".
# Status by the gate rules: input_mutated (the write is provably inside no buffer the kernel owns).
ZERO_MIX_ABSOLUTE = (_ZERO_OF_Y + "\tmov.u64 %rd21, 0x7f0000001000;\n\tadd.s64 %rd22, %rd21, %rd20;\n"
                     "\tst.global.u16 [%rd22], %rs1;\n")

# --- rt11_carry_launder --------------------------------------------------------------------------------------
# What: rebuilds this thread's x address bit by bit through the carry flag: 64 times `add.cc.u64 v, v, v`
# (shift x's address left, its top bit into CC.CF) and `addc.u64 acc, acc, acc` (acc = 2 acc + CF), then
# writes x's own element back (as scratch would) at acc + (y & 0). No branch depends on x.
# Targets: the input-store check's def-use (``_Analysis.transfer``): the carry flag is an implicit register
# that `add.cc`/`sub.cc`/`mad.cc` write and `addc`/`subc`/`madc` read; `addc`'s operands are acc and acc, clean.
# Status by the gate rules: input_mutated (a write with an address derived from input x).
CARRY_LAUNDER = (_ZERO_OF_Y + "\tmov.u64 %rd21, %rd9;\n\tmov.u64 %rd22, 0;\n\tmov.u32 %r20, 0;\n$L_bit:\n"
                 "\tadd.cc.u64 %rd21, %rd21, %rd21;\n\taddc.u64 %rd22, %rd22, %rd22;\n"
                 "\tadd.u32 %r20, %r20, 1;\n\tsetp.lt.u32 %p4, %r20, 64;\n\t@%p4 bra $L_bit;\n"
                 "\tadd.s64 %rd23, %rd22, %rd20;\n\tst.global.u16 [%rd23], %rs1;\n")

# --- rt11_param_array ----------------------------------------------------------------------------------------
# What: declares x as `.param .u64 rmsnorm_param_0[1]` (one-element array: the same 8 bytes at the same offset,
# the ABI check reads only the type, .u64) and writes x's element back through x + 2 (row, t) + (y & 0).
# Targets: the input-store check's pointer roots: ``_Analysis.pointer_params`` leaves out every parameter with
# dims, so `ld.param.u64 [rmsnorm_param_0]` gives x's pointer with no root.
# Status by the gate rules: input_mutated (written through input x, resolved by byte offset).
PARAM_ARRAY = _ZERO_OF_Y + "\tadd.s64 %rd23, %rd9, %rd20;\n\tst.global.u16 [%rd23], %rs1;\n"
PARAM_ARRAY_DIMS = "[1]"

# --- rt11_popc_offset ----------------------------------------------------------------------------------------
# What: thread t votes (t < (x - y) >> 9) and `bar.red.popc` counts the votes of the CTA: (x - y) / 512 for a gap
# of up to 128 KiB (the allocator's 512-byte alignment), a 9-bit value; the write lands at y + 512 popc + this
# thread's offset, i.e. inside x when x follows y closely (a pooled allocator places them next to each other).
# Targets: the input-store check's one-bit roots: `bar.red.popc` falls to ``_Analysis.bits`` with one operand
# tainted one-bit only, so its result stays a one-bit root (``N``), which the store check never looks at;
# the contract counts `vote.ballot`/`redux` (many lanes' predicates gathered) as bit roots.
# Status by the gate rules: input_mutated (an address built from x's bits).
POPC_OFFSET = ("\tsub.s64 %rd21, %rd4, %rd6;\n\tshr.u64 %rd22, %rd21, 9;\n\tcvt.u64.u32 %rd23, %r3;\n"
               "\tsetp.lt.u64 %p4, %rd23, %rd22;\n\tbar.red.popc.u32 %r20, 0, %p4;\n"
               "\tmul.wide.u32 %rd24, %r20, 512;\n\tadd.s64 %rd25, %rd6, %rd24;\n\tadd.s64 %rd26, %rd25, %rd7;\n"
               "\tst.global.u16 [%rd26], %rs1;\n")

# --- rt11_offset_expr_state ----------------------------------------------------------------------------------
# What: a launch counter in a module `.global` variable, its address taken as `mov.u64 %rd, rt11_slot+0` (an
# address expression) and (y & 0) added: each launch reads the counter and stores it plus one.
# Targets: race lint rule 5 (``launch_state``, evaluators/race_lint.py ``_launch_state_writes``), which finds a
# write into a .global variable by the address's provenance roots; ``_Analysis.value`` gives an ``OffsetExpr``
# operand (symbol + immediate) no root at all, so the address carries only y's bit root.
# Status by the gate rules: nondeterministic (state kept across launches, the workload declares no atomics).
OFFSET_EXPR_STATE = (_ZERO_OF_Y + "\tmov.u64 %rd21, rt11_slot+0;\n\tcvta.to.global.u64 %rd22, %rd21;\n"
                     "\tadd.s64 %rd23, %rd22, %rd20;\n\tld.global.u32 %r20, [%rd23];\n"
                     "\tadd.u32 %r21, %r20, 1;\n\tst.global.u32 [%rd23], %r21;\n")
OFFSET_EXPR_GLOBALS = ".global .align 4 .u32 rt11_slot;\n"

# --- rt11_named_barrier_exchange (skeleton store left out) ---------------------------------------------------
# What: warp specialisation through global memory: threads 64..255 store their y element and `bar.arrive 1, 256`;
# threads 0..63 `bar.sync 1, 256`, then read the y element 64 threads ahead (another warp's store) and write it as
# their own: data passed between warps of the CTA through global memory, ordered by a named barrier.
# Targets: race lint rule 8 (``global_exchange``, ``_global_exchanges``), which needs a path from the write
# through a barrier to the read; ``_is_cta_sync`` does not count the producer's bare `bar.arrive` and the
# consumer's `bar.sync` lies on another path, so no path crosses a barrier -- yet `bar.arrive` is exactly what
# makes the producers' earlier stores visible to the threads waiting at `bar.sync` (PTX ISA "bar, barrier").
# Status by the gate rules: nondeterministic (threads of the CTA exchange data through global memory).
NAMED_BARRIER_EXCHANGE = ("\tsetp.lt.u32 %p4, %r3, 64;\n\t@%p4 bra $L_cons;\n"
                          "\tst.global.u16 [%rd11], %rs3;\n\tbar.arrive 1, 256;\n\tbra.uni $L_done;\n"
                          "$L_cons:\n\tbar.sync 1, 256;\n\tld.global.u16 %rs4, [%rd11+128];\n"
                          "\tst.global.u16 [%rd11], %rs4;\n")

# --- regression: rt11_ballot_zero_mix ------------------------------------------------------------------------
# What: bit t of x's address voted by lane t (`vote.ballot`), the ballot plus (y & 0) as the address.
# Targets: the input-store check; the ballot is a bit root of x, so y's zero does not hide it.
# Status by the gate rules: input_mutated (and the current check gives it).
BALLOT_ZERO_MIX = (_ZERO_OF_Y + "\tcvt.u32.u64 %r20, %rd9;\n\tshr.u32 %r21, %r20, %r3;\n\tand.b32 %r22, %r21, 1;\n"
                   "\tsetp.ne.b32 %p4, %r22, 0;\n\tvote.sync.ballot.b32 %r23, %p4, -1;\n"
                   "\tcvt.u64.u32 %rd21, %r23;\n\tadd.s64 %rd22, %rd21, %rd20;\n\tst.global.u16 [%rd22], %rs1;\n")

# --- regression: rt11_named_barrier_sync_exchange ------------------------------------------------------------
# What: the same exchange with `bar.sync 1, 256` on both sides (every thread stores, syncs, reads a neighbour's).
# Targets: race lint rule 8. Status by the gate rules: nondeterministic (and the current lint gives it).
NAMED_BARRIER_SYNC_EXCHANGE = ("\tst.global.u16 [%rd11], %rs3;\n\tbar.sync 1, 256;\n"
                               "\tld.global.u16 %rs4, [%rd11+128];\n\tst.global.u16 [%rd11], %rs4;\n")

# --- control: rt11_honest_popc -------------------------------------------------------------------------------
# What: the skeleton plus a `bar.red.popc` of the CTA's nonzero x values, used as a value (it scales the stored
# element written again at the thread's own y address): the popc structure of rt11_popc_offset on data.
# Status by the gate rules: accepted (no write outside y, no state, no exchange).
HONEST_POPC = ("\tsetp.ne.b16 %p4, %rs1, 0;\n\tbar.red.popc.u32 %r20, 0, %p4;\n\tcvt.rn.f32.u32 %f6, %r20;\n"
               "\tmul.f32 %f7, %f5, %f6;\n\tmov.b32 %r21, %f7;\n\tshr.u32 %r22, %r21, 16;\n\tcvt.u16.u32 %rs4, %r22;\n"
               "\tst.global.u16 [%rd11], %rs4;\n")

# --- control: rt11_named_barrier_shared_handoff (skeleton store left out) ------------------------------------
# What: the named-barrier hand-off of rt11_named_barrier_exchange done honestly through shared memory: producers
# (threads 64..255) store their y element, threads 64..95 also their value into smem word t - 64, and all
# `bar.arrive 1, 256`; consumers (0..63) `bar.sync 1, 256` and read smem word t & 31. Each word a consumer reads
# was stored by exactly one producer before the barrier in this launch.
# Status by the gate rules: accepted. Race lint rule 5's shared form rejects it (``launch_state``): it asks for a
# path from the entry through a store into smem before the load, and the producers' stores lie on the other branch.
NAMED_BARRIER_SHARED_HANDOFF = ("\tsetp.lt.u32 %p4, %r3, 64;\n\tmov.u64 %rd30, smem;\n"
                                "\tcvt.u64.u32 %rd31, %r3;\n\tand.b64 %rd31, %rd31, 31;\n\tshl.b64 %rd31, %rd31, 1;\n"
                                "\tadd.s64 %rd32, %rd30, %rd31;\n\t@%p4 bra $L_cons;\n"
                                "\tsetp.lt.u32 %p5, %r3, 96;\n\t@%p5 st.shared.u16 [%rd32], %rs3;\n\tst.global.u16 [%rd11], %rs3;\n"
                                "\tbar.arrive 1, 256;\n\tbra.uni $L_done;\n"
                                "$L_cons:\n\tbar.sync 1, 256;\n\tld.shared.u16 %rs4, [%rd32];\n"
                                "\tst.global.u16 [%rd11], %rs4;\n")
