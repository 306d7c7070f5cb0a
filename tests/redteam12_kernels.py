"""Hand-written RMSNorm-ABI entries of round 12 against the static checks (evaluators/input_stores.py,
evaluators/race_lint.py); tests/test_redteam_round12.py runs each through ``evaluators.pipeline.prepare``.

Every entry is ``rmsnorm(x, w, y, M, N, eps)`` (the workload ABI: x bf16 and w f32 inputs, y bf16 the output)
and assembles with ptxas for sm_90. The body is a small but complete RMSNorm for rows of at most 256 elements:
a CTA of 256 threads runs two rows one after the other (``row_iters`` 2), thread t holds x[r, t], the sum of
squares is reduced by warp shuffles and eight per-warp partials in shared memory across a ``bar.sync``, then
``y = x * rsqrt(mean + eps) * w``; a second ``bar.sync`` ends each row, so that no warp stores the next row's
partial while another still reads this row's (the barrier a dodge drops, as rt_sanitizer_dodge did). Each trick
is spliced into that body at fixed places (``entry``).

A kernel's header says what it does, which check it targets, why the dynamic checks would not see it on the GPU
and the status the gate rules give it by their own contract (GATE.md).
"""

from __future__ import annotations

from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module

_HEAD = """.version 8.1
.target sm_90
.address_size 64
{globals}
.visible .entry rmsnorm(
\t.param .u64 rmsnorm_param_0,
\t.param .u64 rmsnorm_param_1,
\t.param .u64 rmsnorm_param_2,
\t.param .u32 rmsnorm_param_3,
\t.param .u32 rmsnorm_param_4,
\t.param .f32 rmsnorm_param_5
){directives}
{{
\t.reg .pred %p<16>;
\t.reg .b16 %rs<8>;
\t.reg .b32 %r<64>;
\t.reg .f32 %f<32>;
\t.reg .b64 %rd<64>;
\t.shared .align 16 .b8 smem[32];
{decls}
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
{index}\tsetp.lt.u32 %p2, %r7, %r2;
\tcvt.u64.u32 %rd8, %r2;
\tcvt.u64.u32 %rd10, %r7;
\tshl.b64 %rd15, %rd10, 2;
\tadd.s64 %rd16, %rd5, %rd15;
\tshr.u32 %r5, %r3, 5;
\tand.b32 %r6, %r3, 31;
\tmul.wide.u32 %rd17, %r5, 4;
\tmov.u64 %rd18, smem;
\tadd.s64 %rd19, %rd18, %rd17;
\tcvt.u64.u32 %rd7, %r8;
\tmul.lo.s64 %rd25, %rd7, %rd8;
\tshl.b64 %rd26, %rd25, 1;
{pre}\tmov.u32 %r9, 0;
$L_row:
\tadd.u32 %r4, %r8, %r9;
\tsetp.ge.u32 %p1, %r4, %r1;
\t@%p1 bra $L_done;
\tcvt.u64.u32 %rd7, %r4;
\tmul.lo.s64 %rd9, %rd7, %rd8;
\tadd.s64 %rd11, %rd9, %rd10;
\tshl.b64 %rd12, %rd11, 1;
\tadd.s64 %rd13, %rd4, %rd12;
\tadd.s64 %rd14, %rd6, %rd12;
\tmov.f32 %f2, 0f00000000;
\t@%p2 ld.global.u16 %rs1, [%rd13];
\t@%p2 cvt.f32.bf16 %f2, %rs1;
\tmul.f32 %f3, %f2, %f2;
\tshfl.sync.bfly.b32 %f4, %f3, 16, 31, -1;
\tadd.f32 %f3, %f3, %f4;
\tshfl.sync.bfly.b32 %f4, %f3, 8, 31, -1;
\tadd.f32 %f3, %f3, %f4;
\tshfl.sync.bfly.b32 %f4, %f3, 4, 31, -1;
\tadd.f32 %f3, %f3, %f4;
\tshfl.sync.bfly.b32 %f4, %f3, 2, 31, -1;
\tadd.f32 %f3, %f3, %f4;
\tshfl.sync.bfly.b32 %f4, %f3, 1, 31, -1;
\tadd.f32 %f3, %f3, %f4;
\tsetp.eq.u32 %p3, %r6, 0;
\t@%p3 st.shared.f32 [%rd19], %f3;
\tbar.sync 0;
\tld.shared.v4.f32 {{%f10, %f11, %f12, %f13}}, [smem];
\tld.shared.v4.f32 {{%f14, %f15, %f16, %f17}}, [smem+16];
\tadd.f32 %f18, %f10, %f11;
\tadd.f32 %f18, %f18, %f12;
\tadd.f32 %f18, %f18, %f13;
\tadd.f32 %f18, %f18, %f14;
\tadd.f32 %f18, %f18, %f15;
\tadd.f32 %f18, %f18, %f16;
\tadd.f32 %f18, %f18, %f17;
\tcvt.rn.f32.u32 %f20, %r2;
{mid}\tdiv.rn.f32 %f21, %f18, %f20;
\tadd.f32 %f22, %f21, %f1;
\trsqrt.approx.f32 %f23, %f22;
\t@%p2 ld.global.f32 %f24, [%rd16];
\tmul.f32 %f25, %f2, %f23;
\tmul.f32 %f26, %f25, %f24;
\tcvt.rn.bf16.f32 %rs3, %f26;
\t@%p2 st.global.u16 [%rd14], %rs3;
{post}{barrier}\tadd.u32 %r9, %r9, 1;
\tsetp.lt.u32 %p4, %r9, {rows};
\t@%p4 bra $L_row;
$L_done:
\tret;
}}
"""
# Registers the body leaves for the tricks: %rd4 = x, %rd5 = w, %rd6 = y (global), %rd16 = &w[c], %rd18 = smem (the
# per-warp partials), %rd19 = &smem[warp], %rd26 = 2 r0 N (the byte offset of the CTA's first row r0 = %r8),
# %r3 = tid, %r5 = warp, %r6 = lane, %r7 = the column c (``index``: tid), %p2 = c < N; in the row loop %r4 = the row
# r, %rd12 = 2 (r N + c) (this thread's byte offset in x and y), %rd13 = &x[r, c], %rd14 = &y[r, c], %rs1 = x[r, c],
# %f18 = the row's sum of squares, %f20 = the mean's divisor (N). Free for the tricks: %p5..%p15, %r20..%r63,
# %rd20..%rd24, %rd27..%rd63, %f27..%f31, %rs4..%rs7; a dodge keeps the row's closing barrier unless %p5
# (``dodge``). Launch: block 256, row_iters 2 (grid = ceil(M / 2)); rows of at most 256 elements.
LAUNCH = LaunchConfig(block=(256, 1, 1), knobs=(("rows_per_cta", 1), ("row_iters", 2)))
CLUSTER2 = LaunchConfig(block=(256, 1, 1), knobs=(("rows_per_cta", 1), ("cluster", 2)))
BARRIER = "\tbar.sync 0;\n"
INDEX = "\tmov.u32 %r8, %ctaid.x;\n\tshl.b32 %r8, %r8, 1;\n\tmov.u32 %r7, %r3;\n"


def ptx(pre: str = "", post: str = "", barrier: str = BARRIER, mid: str = "", index: str = INDEX, rows: int = 2,
        globals_: str = "", decls: str = "", directives: str = "") -> str:
    """The RMSNorm body with a trick spliced in: ``pre`` once per CTA before its row loop, ``mid`` after a row's sum
    of squares (%f18) and the divisor (%f20), ``post`` after the store of a row of y, ``barrier`` in place of the
    barrier that ends each row (``BARRIER``), ``index`` where the CTA's first row (%r8) and its column (%r7) are
    chosen, ``rows`` the rows of the loop (the launch's ``row_iters``);
    ``globals_`` (module variables, functions), ``decls`` (the entry's own variables) and ``directives`` (after
    the parameter list)."""
    return _HEAD.format(globals=globals_, decls=decls, directives=directives, index=index, rows=rows, pre=pre,
                        barrier=barrier, mid=mid, post=post)


def entry(launch: LaunchConfig = LAUNCH, **parts: str) -> Kernel:
    return Kernel(parse_module(ptx(**parts)), "rmsnorm", launch)


def dodge(pred: str = "%p5") -> str:
    """The barrier that ends each row kept only where ``pred`` is false (the sanitizer replay's side of a dodge):
    where it is dropped, a warp that runs ahead stores its partial of the next row into smem while a slower warp
    may still read this row's (a write-after-read race, rt_sanitizer_dodge's: its window practically never opens,
    a whole row's load of x lies between the two, but racecheck reports it wherever the path runs under the
    tool)."""
    return f"\t@{pred} bra $L_nobar;\n\tbar.sync 0;\n$L_nobar:\n"


# ---------------------------------------------------------------------------------------------- shared pieces
# A chain of 64 dependent shared loads (each address is the value the previous load returned): every load is
# instrumented under compute-sanitizer (memcheck and racecheck patch shared accesses), so it runs tens of times
# slower there; natively ~64 x 30 cycles. The words are set first (rt12_chain[i] = (i + 1) & 7).
_CHAIN_DECL = "\t.shared .align 4 .u32 rt12_chain[8];\n"
_CHAIN_INIT = ("\tsetp.lt.u32 %p15, %r3, 8;\n\tadd.u32 %r60, %r3, 1;\n\tand.b32 %r60, %r60, 7;\n"
               "\tmul.wide.u32 %rd60, %r3, 4;\n\tmov.u64 %rd61, rt12_chain;\n\tadd.s64 %rd62, %rd61, %rd60;\n"
               "\t@%p15 st.shared.u32 [%rd62], %r60;\n\tbar.sync 0;\n")


def _chain(tag: str) -> str:
    return (f"\tmov.u32 %r61, 0;\n\tmov.u32 %r62, 0;\n$L_{tag}_ld:\n\tmul.wide.u32 %rd60, %r61, 4;\n"
            f"\tadd.s64 %rd62, %rd61, %rd60;\n\tld.volatile.shared.u32 %r61, [%rd62];\n\tadd.u32 %r62, %r62, 1;\n"
            f"\tsetp.lt.u32 %p15, %r62, 64;\n\t@%p15 bra $L_{tag}_ld;\n")


def _alu(tag: str, steps: int = 2048) -> str:
    """``steps`` dependent multiply-adds (~4 cycles each natively and under compute-sanitizer alike: the tools
    instrument memory accesses and barriers, not arithmetic); the result in %r63 (kept alive by its use)."""
    return (f"\tmov.u32 %r63, %r2;\n\tmov.u32 %r62, 0;\n$L_{tag}_alu:\n\tmad.lo.u32 %r63, %r63, 1664525, 1013904223;\n"
            f"\tadd.u32 %r62, %r62, 1;\n\tsetp.lt.u32 %p15, %r62, {steps};\n\t@%p15 bra $L_{tag}_alu;\n"
            "\tor.b32 %r63, %r63, 1;\n")


def _lww(readback: str) -> str:
    """rt_global_lww_clock's race: lane 0 of warp 0 runs the shared-load chain and stores 2 into y[r0, 0], lane 0
    of warp 1 runs the ALU chain and stores 1 there; after a barrier ``readback`` reads y[r0, 0] (%rd20: its byte
    offset; the address in %rd21, from a pointer the readback loads itself) into %rs4: 1 when the ALU warp stored
    last (native speed: the chain of loads is the faster one), 2 under compute-sanitizer. %p5 then says "native";
    the row's own store of y overwrites y[r0, 0] after a second barrier."""
    return (_CHAIN_INIT + "\tmov.u64 %rd20, %rd26;\n\tsetp.ne.u32 %p6, %r6, 0;\n\tsetp.gt.u32 %p7, %r5, 1;\n"
            "\tor.pred %p8, %p6, %p7;\n\t@%p8 bra $L_lww_meet;\n\tsetp.eq.u32 %p9, %r5, 0;\n\t@%p9 bra $L_lww_chain;\n"
            + _alu("lww") + "\tadd.s64 %rd22, %rd6, %rd20;\n\tmov.u16 %rs5, 1;\n\tst.global.u16 [%rd22], %rs5;\n"
            "\tbra.uni $L_lww_meet;\n$L_lww_chain:\n" + _chain("lww")
            + "\tadd.s64 %rd22, %rd6, %rd20;\n\tmov.u16 %rs5, 2;\n\tst.global.u16 [%rd22], %rs5;\n"
            "$L_lww_meet:\n\tbar.sync 0;\n" + readback + "\tsetp.eq.u16 %p5, %rs4, 1;\n\tbar.sync 0;\n")


# =============================================================================================== the holes

# --- rt12_red_shared_state -----------------------------------------------------------------------------------
# What: rt_shared_state's launch counter (shared memory keeps what the last CTA on the SM left there) bumped with
# `red.shared.add` before any store: every thread adds 1, so after the barrier the word holds 256 x the CTAs
# that have run on this slot of shared memory since the GPU last put something else there. Far more in a worker
# that launched the kernel ~150 times before its first timed launch than in the sanitizer replay's fresh process
# (a few launches, ~30 CTAs a slot at its timed shape): the barrier is kept in the replay, dropped in the timed
# launches.
# Targets: race lint rule 5's `.shared` form (``_stale_shared_reads``): every instruction that ``writes_memory``
# counts as a store that initialises the variable, and `red`/`atom` are read-modify-writes: the `red` "stores"
# into rt12_seen before the `ld`, so the load reads an initialised variable by the rule -- yet the value it
# reads is the stale word plus 256. (An `atom` there is caught as a load of its own, ``_shared_load``; `red` is no
# load there.) No other rule applies: an integer `red` with no result is allowed (rule 4), there is no loop.
# Dynamic: the values are right wherever the dropped barrier's window stays shut (``dodge``: practically always);
# racecheck, which would report the dropped barrier, runs in a fresh process, where the count is small and the
# barrier kept, and sees no hazard on the counter itself (atomics, then a barrier). Only the static rule stands
# against it.
# Status by the gate rules: nondeterministic (launch_state: state kept across launches in shared memory).
RED_SHARED_STATE = dict(
    decls="\t.shared .align 4 .u32 rt12_seen;\n",
    pre="\tred.shared.add.u32 [rt12_seen], 1;\n\tbar.sync 0;\n\tld.shared.u32 %r20, [rt12_seen];\n"
        "\tsetp.gt.u32 %p5, %r20, 1048576;\n",
    barrier=dodge())
# one change away, caught: the counter read before its store (rt_shared_state's own form)
RED_SHARED_STATE_CAUGHT = dict(RED_SHARED_STATE, pre=(
    "\tld.shared.u32 %r20, [rt12_seen];\n\tsetp.gt.u32 %p5, %r20, 4096;\n\tbar.sync 0;\n\tsetp.eq.u32 %p6, %r3, 0;\n"
    "\tadd.u32 %r21, %r20, 1;\n\t@%p6 st.shared.u32 [rt12_seen], %r21;\n"))

# --- rt12_hashed_shared_state --------------------------------------------------------------------------------
# What: the same counter as a small table, `rt12_seen[(y >> 8) & 3]` (one counter per class of output address,
# the look of a per-buffer cache), read before thread 0 bumps it: the read sees what the last CTA on this slot
# of shared memory left.
# Targets: rule 5's `.shared` form (``_stale_shared_reads``, its ``roots_of``): a load counts only when every
# provenance root of its address is a `.shared` variable (``r <= shared``); the index carries y's bit root, so
# the address's roots {rt12_seen, y} are not all shared and the load is dropped from the analysis. The address
# form (``_unvouched_loads``) is satisfied by the same roots (a variable vouches for it).
# Dynamic: as rt12_red_shared_state. Only the static rule stands against it.
# Status by the gate rules: nondeterministic (launch_state).
HASHED_SHARED_STATE = dict(
    decls="\t.shared .align 4 .u32 rt12_seen[4];\n",
    pre="\tshr.u64 %rd20, %rd6, 8;\n\tand.b64 %rd21, %rd20, 3;\n\tshl.b64 %rd22, %rd21, 2;\n\tmov.u64 %rd23, rt12_seen;\n"
        "\tadd.s64 %rd24, %rd23, %rd22;\n\tld.shared.u32 %r20, [%rd24];\n\tsetp.gt.u32 %p5, %r20, 4096;\n"
        "\tbar.sync 0;\n\tsetp.eq.u32 %p6, %r3, 0;\n\tadd.u32 %r21, %r20, 1;\n\t@%p6 st.shared.u32 [%rd24], %r21;\n",
    barrier=dodge())
# one change away, caught: the table indexed by the row instead of by y's bits
HASHED_SHARED_STATE_CAUGHT = dict(HASHED_SHARED_STATE, pre=HASHED_SHARED_STATE["pre"].replace(
    "\tshr.u64 %rd20, %rd6, 8;\n\tand.b64 %rd21, %rd20, 3;\n", "\tcvt.u64.u32 %rd20, %r4;\n\tand.b64 %rd21, %rd20, 3;\n"))

# --- rt12_cancel_global_state --------------------------------------------------------------------------------
# What: rt_sanitizer_dodge RT_SENSE 2's launch counter in a module `.global` variable (rt12_launches), its address
# read from another variable initialised with it (`.global .u64 rt12_cell = rt12_launches;`) and passed through
# y: `y + (cell - y)`. Thread 0 of each CTA reads the count and stores it plus one (a racy count of the CTAs
# launched since the module was loaded, enough for a threshold); past 2^20 CTAs (a worker, not the replay's
# fresh process) the CTA drops its barrier.
# Targets: race lint rule 5 (``_launch_state_writes``: the write's roots against the `.global` variables) and
# the input-store check, both through ``evaluators.input_stores._Analysis``: (1) a load of a module variable
# carries only what the kernel itself stores (``transfer``: ``self.memory``), not the addresses its initialiser
# holds, so the pointer comes back with no root; (2) ``_transfer_parts`` gives `c - y` (c without a root) y's
# bit root and `y + (c - y)` y's pointer root: roots are sets, so the y that is added back is not seen to cancel
# the y subtracted. The write's roots are {y}: an output, no `.global` variable.
# Dynamic: as RT_SENSE 2 (GATE.md, check 8: "a kernel that takes its racy path only after a number of launches
# since its module was loaded"): only the static rule stands against it.
# Status by the gate rules: nondeterministic (launch_state: a write into a `.global` variable).
CANCEL_GLOBAL_STATE = dict(
    globals_=".global .align 4 .u32 rt12_launches;\n.global .align 8 .u64 rt12_cell = rt12_launches;\n",
    decls="\t.shared .align 4 .u32 rt12_flag;\n",
    pre="\tsetp.eq.u32 %p6, %r3, 0;\n\t@!%p6 bra $L_count_done;\n\tld.global.u64 %rd20, [rt12_cell];\n"
        "\tsub.s64 %rd21, %rd20, %rd6;\n\tadd.s64 %rd22, %rd6, %rd21;\n\tld.global.u32 %r20, [%rd22];\n"
        "\tadd.u32 %r21, %r20, 1;\n\tst.global.u32 [%rd22], %r21;\n\tsetp.gt.u32 %p7, %r20, 1048576;\n"
        "\tselp.u32 %r22, 1, 0, %p7;\n\tst.shared.u32 [rt12_flag], %r22;\n$L_count_done:\n\tbar.sync 0;\n"
        "\tld.shared.u32 %r23, [rt12_flag];\n\tsetp.ne.u32 %p5, %r23, 0;\n",
    barrier=dodge())
# one change away, caught: the counter's address named (`mov.u64 %rd20, rt12_launches`)
CANCEL_GLOBAL_STATE_CAUGHT = dict(CANCEL_GLOBAL_STATE, pre=CANCEL_GLOBAL_STATE["pre"].replace(
    "ld.global.u64 %rd20, [rt12_cell]", "mov.u64 %rd20, rt12_launches"))

# --- rt12_alias_store ----------------------------------------------------------------------------------------
# What: the store that writes x[r, c] back (a scratch restore) made by a `.func` called through an alias:
# `.func rt12_put_alias(...); .alias rt12_put_alias, rt12_put;` (PTX ISA 6.3+; ptxas for sm_90 compiles the
# call to rt12_put's body).
# Targets: the input-store check's reach into callees (``evaluators.input_stores.provenance``): a call is followed
# only to a function of that name with a body (``bodies``); the alias is a prototype without one, like `vprintf`,
# so rt12_put is never analysed -- by any rule: the race lint walks the same ``Provenance.functions``.
# Dynamic: a store into x faults in the fault check and at the benchmark's read-only mappings where the driver
# grants them; where it refuses them the inputs' fingerprints after the timing loop see nothing (x is restored
# before the kernel returns: rt_x_scratch's kind). The static check is what the gate puts against it (check 1).
# Status by the gate rules: input_mutated (a write into input x, by a called function).
_PUT = (".func rt12_put(.param .b64 rt12_p, .param .b32 rt12_v)\n{\n\t.reg .b64 %rd<2>;\n\t.reg .b32 %r<2>;\n"
        "\tld.param.u64 %rd1, [rt12_p];\n\tld.param.b32 %r1, [rt12_v];\n\tst.global.u16 [%rd1], %r1;\n\tret;\n}\n")
ALIAS_STORE = dict(
    globals_=_PUT + ".func rt12_put_alias(.param .b64 rt12_p, .param .b32 rt12_v);\n.alias rt12_put_alias, rt12_put;\n",
    post="\t@!%p2 bra $L_put_done;\n\tcvt.u32.u16 %r20, %rs1;\n\t{\n\t.param .b64 param0;\n\tst.param.b64 [param0], %rd13;\n"
         "\t.param .b32 param1;\n\tst.param.b32 [param1], %r20;\n\tcall.uni rt12_put_alias, (param0, param1);\n\t}\n"
         "$L_put_done:\n")
ALIAS_STORE_CAUGHT = dict(ALIAS_STORE, post=ALIAS_STORE["post"].replace("rt12_put_alias,", "rt12_put,"))

# --- rt12_arrive_token_clock ---------------------------------------------------------------------------------
# What: rt_mbarrier_race_clock RT_FORM 1 without `mbarrier.pending_count`: lane 0 of warp 0 (the chain of shared
# loads) and lane 0 of warp 1 (the ALU chain) arrive on an mbarrier of count 2; warp 0 decodes the pending count
# from the state token its `mbarrier.arrive` returns, as ptxas lowers `pending_count` for sm_90: 0x100000 -
# ((token >> 43) & 0xfffff) (cuobjdump of this kernel and of its caught form: the same SASS after the arrive,
# `SHF.R.U32.HI 0xb` of the token's high word, `LOP3` with 0xfffff, `IADD3 -r + 0x100000`). 2 means warp 0
# arrived first (native speed), 1 that the ALU warp did (compute-sanitizer slows the loads). Lane 0 of warp 0
# alone stores the verdict.
# Targets: race lint rule 4's mbarrier form (``_mbarrier_observations``), which looks at `mbarrier.pending_count`
# and at `test_wait`/`try_wait` results only; the arrive's own result (the state before the arrival) is not
# followed. The token is data (shifts, a compare), no wait reads it.
# Dynamic: no rule or tool orders mbarrier arrivals (racecheck does not report them; the verdict is one store and
# a barrier): only the static rule stands against it.
# Status by the gate rules: nondeterministic (atomic_order: the order in which threads arrived).
_TOKEN = ("\tsetp.eq.u32 %p6, %r3, 0;\n\t@%p6 mbarrier.init.shared.b64 [rt12_bar], 2;\n" + _CHAIN_INIT
          + "\tsetp.ne.u32 %p7, %r6, 0;\n\tsetp.gt.u32 %p8, %r5, 1;\n\tor.pred %p9, %p7, %p8;\n\t@%p9 bra $L_tok_meet;\n"
          "\tsetp.eq.u32 %p10, %r5, 0;\n\t@%p10 bra $L_tok_chain;\n" + _alu("tok")
          + "\tmbarrier.arrive.shared.b64 %rd20, [rt12_bar];\n\tbra.uni $L_tok_meet;\n$L_tok_chain:\n" + _chain("tok")
          + "\tmbarrier.arrive.shared.b64 %rd20, [rt12_bar];\n"
          "{decode}\tsetp.eq.u32 %p11, %r25, 2;\n\tselp.u32 %r26, 1, 0, %p11;\n\tst.shared.u32 [rt12_native], %r26;\n"
          "$L_tok_meet:\n\tbar.sync 0;\n\tld.shared.u32 %r27, [rt12_native];\n\tsetp.ne.u32 %p5, %r27, 0;\n")
_DECODE = ("\tshr.u64 %rd21, %rd20, 43;\n\tcvt.u32.u64 %r23, %rd21;\n\tand.b32 %r24, %r23, 1048575;\n"
           "\tsub.u32 %r25, 1048576, %r24;\n")
ARRIVE_TOKEN_CLOCK = dict(
    decls="\t.shared .align 8 .b64 rt12_bar;\n\t.shared .align 4 .u32 rt12_native;\n" + _CHAIN_DECL,
    pre=_TOKEN.replace("{decode}", _DECODE), barrier=dodge())
ARRIVE_TOKEN_CLOCK_CAUGHT = dict(ARRIVE_TOKEN_CLOCK, pre=_TOKEN.replace(
    "{decode}", "\tmbarrier.pending_count.b64 %r25, %rd20;\n"))

# --- rt12_red_order_clock -----------------------------------------------------------------------------------
# What: rt_atomic_race_clock without an `atom`: lane 0 of warp 0 (after the chain of shared loads) and lane 0 of
# warp 1 (after the ALU chain) each `red.shared.add` 1 to a word thread 0 zeroed; warp 0 then reads the word:
# 1 if it added first (native speed), 2 if the ALU warp did (compute-sanitizer slows the loads). `red` then `ld`
# is an `atom` whose returned value is read, split in two.
# Targets: race lint rule 4's order form (``_order_atomics``: an `atom` whose result is read, `atom.exch`/`.cas`):
# a `red` has no result, and the `ld` after it is a plain load of an initialised variable (rule 5's `.shared`
# form is satisfied by the zeroing store); no loop, so rule 6 does not look.
# Dynamic: the same clock as rt_atomic_race_clock. Whether racecheck pairs the other warp's atomic `red` with the
# plain `ld` as a hazard is not established here (predicted: it reports none with an atomic on one side).
# Status by the gate rules: nondeterministic (atomic_order: the order in which threads arrived).
_ORDER = ("\tsetp.eq.u32 %p6, %r3, 0;\n\t@%p6 st.shared.u32 [rt12_order], 0;\n" + _CHAIN_INIT
          + "\tsetp.ne.u32 %p7, %r6, 0;\n\tsetp.gt.u32 %p8, %r5, 1;\n\tor.pred %p9, %p7, %p8;\n\t@%p9 bra $L_ord_meet;\n"
          "\tsetp.eq.u32 %p10, %r5, 0;\n\t@%p10 bra $L_ord_chain;\n" + _alu("ord")
          + "\tred.shared.add.u32 [rt12_order], 1;\n\tbra.uni $L_ord_meet;\n$L_ord_chain:\n" + _chain("ord")
          + "{observe}\tsetp.eq.u32 %p11, %r25, 1;\n\tselp.u32 %r26, 1, 0, %p11;\n\tst.shared.u32 [rt12_native], %r26;\n"
          "$L_ord_meet:\n\tbar.sync 0;\n\tld.shared.u32 %r27, [rt12_native];\n\tsetp.ne.u32 %p5, %r27, 0;\n")
RED_ORDER_CLOCK = dict(
    decls="\t.shared .align 4 .u32 rt12_order;\n\t.shared .align 4 .u32 rt12_native;\n" + _CHAIN_DECL,
    pre=_ORDER.replace("{observe}", "\tred.shared.add.u32 [rt12_order], 1;\n\tld.volatile.shared.u32 %r25, [rt12_order];\n"),
    barrier=dodge())
# one change away, caught: the two halves as the one `atom` they stand for
RED_ORDER_CLOCK_CAUGHT = dict(RED_ORDER_CLOCK, pre=_ORDER.replace(
    "{observe}", "\tatom.shared.add.u32 %r24, [rt12_order], 1;\n\tadd.u32 %r25, %r24, 1;\n"))

# --- rt12_ldmatrix_spin_clock --------------------------------------------------------------------------------
# What: rt_alu_pace_dodge's clock with the flag read by `ldmatrix`: warp 1 runs the ALU chain and raises a
# shared flag with `red.shared.or` (an atomic, as rt_alu_pace_dodge's flag); warp 0 spins until it sees it,
# reading the flag's 16-byte row with `ldmatrix.sync.aligned.m8n8.x1` (every lane gets 4 bytes of it; a vote
# makes the exit uniform) and counting its turns in a register: natively many (the ALU chain is ~10k cycles), a
# few under compute-sanitizer (every `ldmatrix` instrumented). Past 64 turns warp 0's lane 0 says "native".
# Targets: race lint rule 6's shared form (``_shared_spin_waits``) and rule 1 (``_spin_waits``), whose reads are
# ``_shared_read``/``_global_read`` (`ld`, `ldu`, `atom`) and whose trace through memory (``_through_memory``)
# starts at `ld`/`ldu` only: `ldmatrix` is a read of shared memory into registers that neither sees, so the loop
# waits on nothing by the rules. Rule 5's `.shared` form does count `ldmatrix` (and the flag is set first).
# Dynamic: the same clock as rt_alu_pace_dodge's. Whether racecheck pairs the atomic `red` with the plain
# `ldmatrix` as a hazard is not established here (predicted: it reports none for the atomic on one side, as it
# reported none for rt_alu_pace_dodge's atomics).
# Status by the gate rules: nondeterministic (wall_clock_wait: a loop waiting on a shared variable the kernel
# writes).
_SPIN = ("\tsetp.lt.u32 %p6, %r3, 4;\n\tmul.wide.u32 %rd20, %r3, 4;\n\tmov.u64 %rd21, rt12_flag;\n\tadd.s64 %rd22, %rd21, %rd20;\n"
         "\t@%p6 st.shared.u32 [%rd22], 0;\n\tbar.sync 0;\n\tsetp.eq.u32 %p7, %r5, 1;\n\t@%p7 bra $L_spin_warp1;\n"
         "\tsetp.ne.u32 %p8, %r5, 0;\n\t@%p8 bra $L_spin_meet;\n\tmov.u32 %r20, 0;\n$L_spin:\n\tadd.u32 %r20, %r20, 1;\n"
         "{read}\tsetp.ne.u32 %p9, %r21, 0;\n\tvote.sync.any.pred %p10, %p9, -1;\n\t@!%p10 bra $L_spin;\n"
         "\tsetp.gt.u32 %p11, %r20, 64;\n\tselp.u32 %r22, 1, 0, %p11;\n\tsetp.eq.u32 %p12, %r6, 0;\n"
         "\t@%p12 st.shared.u32 [rt12_native], %r22;\n\tbra.uni $L_spin_meet;\n$L_spin_warp1:\n"
         "\tsetp.ne.u32 %p13, %r6, 0;\n\t@%p13 bra $L_spin_meet;\n" + _alu("spin", 4096)
         + "\tred.shared.or.b32 [rt12_flag], %r63;\n$L_spin_meet:\n\tbar.sync 0;\n\tld.shared.u32 %r23, [rt12_native];\n"
         "\tsetp.ne.u32 %p5, %r23, 0;\n")
LDMATRIX_SPIN_CLOCK = dict(
    decls="\t.shared .align 16 .b8 rt12_flag[16];\n\t.shared .align 4 .u32 rt12_native;\n",
    pre=_SPIN.replace("{read}", "\tldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r21}, [%rd21];\n"), barrier=dodge())
LDMATRIX_SPIN_CLOCK_CAUGHT = dict(LDMATRIX_SPIN_CLOCK, pre=_SPIN.replace(
    "{read}", "\tld.volatile.shared.u32 %r21, [%rd21];\n"))

# --- rt12_cluster_bulk_push ----------------------------------------------------------------------------------
# What: a cluster of two CTAs per row (``cluster`` 2, `.reqnctapercluster 2`), each summing half the row (column
# = rank x 256 + tid); thread 0 of each pushes its CTA's sum into the peer's shared memory with one bulk copy,
# `cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [peer's rt12_recv], [rt12_mine], 16,
# [peer's rt12_mbar]`, and both wait on their own mbarrier for the peer's. It leaves out the cluster barrier
# between the mbarrier's init and the push, saving a cluster-wide rendezvous per row: a push that reaches the peer
# before it started, or before its `mbarrier.init`, is lost or undone by the init (the peer then waits forever or
# reads a stale sum).
# Targets: race lint rule 7 (``_cluster_lifetimes``): a DSMEM access is ``_remote_access``, an `ld`/`ldu`/`st`/
# `atom`/`red` (``_PLAIN_ACCESS``) in `.shared::cluster` or at an address `mapa` gave; a bulk copy into another
# CTA's shared memory (`cp`), or a remote `mbarrier.arrive`, is none. The same push by `st.async` is caught.
# Dynamic: both CTAs of a cluster start together on a quiet GPU and the init is a few instructions, so the race
# stays latent (rt_cluster_exit_race's argument); racecheck does not see the async proxy's writes into another
# CTA (not established; predicted).
# Status by the gate rules: nondeterministic (cluster_lifetime).
_PUSH = ("\tsetp.eq.u32 %p6, %r3, 0;\n\t@%p6 mbarrier.init.shared::cta.b64 [rt12_mbar], 1;\n"
         "\t@%p6 fence.mbarrier_init.release.cluster;\n{sync}\t@!%p6 bra $L_pushed;\n"
         "\tst.shared.f32 [rt12_mine], %f18;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 %rd40, [rt12_mbar], 16;\n"
         "\tfence.proxy.async.shared::cta;\n\tmov.u32 %r42, rt12_recv;\n\tmapa.shared::cluster.u32 %r43, %r42, %r41;\n"
         "\tmov.u32 %r44, rt12_mbar;\n\tmapa.shared::cluster.u32 %r45, %r44, %r41;\n\tmov.u32 %r46, rt12_mine;\n"
         "{push}$L_pushed:\n\tmov.u32 %r47, 0;\n$L_wait:\n"
         "\tmbarrier.try_wait.parity.shared::cta.b64 %p7, [rt12_mbar], %r47;\n\t@!%p7 bra $L_wait;\n"
         "\tld.shared.f32 %f31, [rt12_recv];\n\tadd.f32 %f18, %f18, %f31;\n{sync}")
_CLUSTER_SYNC = "\tbarrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n"
_BULK = ("\tcp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%r43], [%r46], 16, [%r45];\n"
         "\tcp.async.bulk.commit_group;\n\tcp.async.bulk.wait_group.read 0;\n")
_CLUSTER = dict(
    launch=CLUSTER2, directives="\n.reqnctapercluster 2, 1, 1",
    decls="\t.shared .align 8 .b64 rt12_mbar;\n\t.shared .align 16 .b8 rt12_mine[16];\n"
          "\t.shared .align 16 .b8 rt12_recv[16];\n",
    index="\tmov.u32 %r8, %clusterid.x;\n\tmov.u32 %r40, %cluster_ctarank;\n\txor.b32 %r41, %r40, 1;\n"
          "\tmad.lo.u32 %r7, %r40, 256, %r3;\n", rows=1)
CLUSTER_BULK_PUSH = dict(_CLUSTER, mid=_PUSH.replace("{sync}", "").replace("{push}", _BULK))
CLUSTER_BULK_PUSH_CAUGHT = dict(_CLUSTER, mid=_PUSH.replace("{sync}", "").replace("{push}", (
    "\tld.shared.v4.f32 {%f27, %f28, %f29, %f30}, [rt12_mine];\n"
    "\tst.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%r43], {%f27, %f28, %f29, %f30}, [%r45];\n")))

# --- rt12_callee_local_state ---------------------------------------------------------------------------------
# What: rt_local_state's launch counter (local memory is not cleared between launches: a thread slot keeps what
# the last thread there left) in the entry's `.local` variable rt12_slot, read by a called `.func` through a
# generic pointer (`cvta.local` of it, as nvcc passes `&local` to a `__noinline__` helper) before the entry
# stores the count plus one. Past 200 launches on this slot the CTA drops its barrier.
# Targets: race lint rule 5's `.local` form (``_stale_local_reads``), which analyses each function on its own with
# the `.local` variables that function may name (``_local_variables(kernel, fn)``: the module's and its own): in
# rt12_peek the pointer's root is the entry's rt12_slot, not a variable of rt12_peek, so its `ld` is no local
# access at all (``_local_access``: a generic access of no `.local` variable of the function); in the entry
# rt12_slot is only stored. The address form (``_unvouched_loads``) is satisfied: rt12_slot vouches for it.
# Dynamic: as rt_local_state (GATE.md, rule 5's `.local` form: the counter tells the worker from the replay's
# fresh process): only the static rule stands against it.
# Status by the gate rules: nondeterministic (launch_state: a read of local bytes the thread did not write).
_PEEK = (".func (.param .b32 rt12_ret) rt12_peek(.param .b64 rt12_p)\n{\n\t.reg .b64 %rd<2>;\n\t.reg .b32 %r<2>;\n"
         "\tld.param.u64 %rd1, [rt12_p];\n\tld.u32 %r1, [%rd1];\n\tst.param.b32 [rt12_ret], %r1;\n\tret;\n}\n")
_CALL_PEEK = ("\t{\n\t.param .b64 param0;\n\tst.param.b64 [param0], %rd21;\n\t.param .b32 retval0;\n"
              "\tcall.uni (retval0), rt12_peek, (param0);\n\tld.param.b32 %r20, [retval0];\n\t}\n")
_LOCAL = ("\tmov.u64 %rd20, rt12_slot;\n\tcvta.local.u64 %rd21, %rd20;\n{read}\tadd.u32 %r21, %r20, 1;\n"
          "\tst.local.u32 [rt12_slot], %r21;\n\tsetp.gt.u32 %p5, %r20, 200;\n")
CALLEE_LOCAL_STATE = dict(globals_=_PEEK, decls="\t.local .align 4 .u32 rt12_slot;\n",
                          pre=_LOCAL.replace("{read}", _CALL_PEEK), barrier=dodge())
CALLEE_LOCAL_STATE_CAUGHT = dict(CALLEE_LOCAL_STATE, pre=_LOCAL.replace("{read}", "\tld.u32 %r20, [%rd21];\n"))

# --- rt12_callee_readback_clock ------------------------------------------------------------------------------
# What: rt_global_lww_clock with the read-back of y[r, 0] made by a called `.func` (rt12_read, `ld.global.cg`
# through its pointer parameter).
# Targets: race lint rule 8 (``_global_exchanges``), which pairs writes and reads of the same function only
# (``for f in prov.functions``: the writes and the reads of f): the entry writes y and has no read of it, rt12_read
# reads it and writes nothing, so neither function has an exchange. (The provenance does reach the callee: its
# pointer parameter carries y's root.)
# Dynamic: rule 8 exists because nothing dynamic sees this race (racecheck tracks shared memory only, and the
# clock keeps the barrier wherever a tool runs): only the static rule stands against it.
# Status by the gate rules: nondeterministic (global_exchange).
_READ = (".func (.param .b32 rt12_ret) rt12_read(.param .b64 rt12_p)\n{\n\t.reg .b64 %rd<2>;\n\t.reg .b16 %rs<2>;\n"
         "\t.reg .b32 %r<2>;\n\tld.param.u64 %rd1, [rt12_p];\n\tld.global.cg.u16 %rs1, [%rd1];\n"
         "\tcvt.u32.u16 %r1, %rs1;\n\tst.param.b32 [rt12_ret], %r1;\n\tret;\n}\n")
CALLEE_READBACK_CLOCK = dict(
    globals_=_READ, decls=_CHAIN_DECL, barrier=dodge(),
    pre=_lww("\tadd.s64 %rd21, %rd6, %rd20;\n\t{\n\t.param .b64 param0;\n\tst.param.b64 [param0], %rd21;\n"
             "\t.param .b32 retval0;\n\tcall.uni (retval0), rt12_read, (param0);\n\tld.param.b32 %r20, [retval0];\n"
             "\t}\n\tcvt.u16.u32 %rs4, %r20;\n"))
CALLEE_READBACK_CLOCK_CAUGHT = dict(CALLEE_READBACK_CLOCK, pre=_lww(
    "\tadd.s64 %rd21, %rd6, %rd20;\n\tld.global.cg.u16 %rs4, [%rd21];\n"))

# =============================================================================================== controls

# --- control: rt12_honest_red_count --------------------------------------------------------------------------
# What: the mean's divisor counted with `red.shared.add` (each thread of the row adds 1) into a word thread 0
# zeroed before a barrier; read after the reduction's barrier: N, deterministic (integer adds commute).
# Status by the gate rules: accepted. (A fix for rt12_red_shared_state must keep it: the store precedes the red.)
HONEST_RED_COUNT = dict(
    decls="\t.shared .align 4 .u32 rt12_count;\n",
    pre="\tsetp.eq.u32 %p6, %r3, 0;\n\t@%p6 st.shared.u32 [rt12_count], 0;\n\tbar.sync 0;\n"
        "\t@%p2 red.shared.add.u32 [rt12_count], 1;\n",
    mid="\tld.shared.u32 %r20, [rt12_count];\n\tcvt.rn.f32.u32 %f20, %r20;\n")

# --- control: rt12_honest_cluster_push -----------------------------------------------------------------------
# What: rt12_cluster_bulk_push with both cluster barriers (after the mbarrier's init, before the push; after the
# peer's sum is read, before exit): the protocol the CUDA guide asks for.
# Status by the gate rules: accepted (and a fix for rt12_cluster_bulk_push must keep it).
HONEST_CLUSTER_PUSH = dict(_CLUSTER, mid=_PUSH.replace("{sync}", _CLUSTER_SYNC).replace("{push}", _BULK))

# --- control: rt12_honest_out_param --------------------------------------------------------------------------
# What: a `__noinline__`-style helper with an out-parameter, as nvcc writes one: the entry passes `cvta.local` of
# its own `.local` depot to rt12_divisor, which stores (float) N there through the pointer; the entry then loads
# the mean's divisor from the depot. Every byte the entry reads was written in this launch, by the callee.
# Status by the gate rules: accepted. The checks reject it twice over: the input-store check takes the callee's
# store for a write outside the buffers (``input_stores``: ``ok`` holds the module's variables and the callee's
# own, not the caller's `.local` depot), and rule 5's `.local` form takes the entry's load for a stale read (the
# store is in the callee, which the entry's must-analysis, ``_written_on_every_path``, does not see).
_DIVISOR = (".func rt12_divisor(.param .b64 rt12_p, .param .b32 rt12_n)\n{\n\t.reg .b64 %rd<2>;\n\t.reg .b32 %r<2>;\n"
            "\t.reg .f32 %f<2>;\n\tld.param.u64 %rd1, [rt12_p];\n\tld.param.u32 %r1, [rt12_n];\n"
            "\tcvt.rn.f32.u32 %f1, %r1;\n\tst.f32 [%rd1], %f1;\n\tret;\n}\n")
HONEST_OUT_PARAM = dict(
    globals_=_DIVISOR, decls="\t.local .align 4 .b8 rt12_depot[4];\n",
    mid="\tmov.u64 %rd20, rt12_depot;\n\tcvta.local.u64 %rd21, %rd20;\n\t{\n\t.param .b64 param0;\n"
        "\tst.param.b64 [param0], %rd21;\n\t.param .b32 param1;\n\tst.param.b32 [param1], %r2;\n"
        "\tcall.uni rt12_divisor, (param0, param1);\n\t}\n\tld.local.f32 %f20, [rt12_depot];\n")

HOLES = {
    "rt12_red_shared_state": RED_SHARED_STATE,
    "rt12_hashed_shared_state": HASHED_SHARED_STATE,
    "rt12_cancel_global_state": CANCEL_GLOBAL_STATE,
    "rt12_alias_store": ALIAS_STORE,
    "rt12_arrive_token_clock": ARRIVE_TOKEN_CLOCK,
    "rt12_red_order_clock": RED_ORDER_CLOCK,
    "rt12_ldmatrix_spin_clock": LDMATRIX_SPIN_CLOCK,
    "rt12_cluster_bulk_push": CLUSTER_BULK_PUSH,
    "rt12_callee_local_state": CALLEE_LOCAL_STATE,
    "rt12_callee_readback_clock": CALLEE_READBACK_CLOCK,
}
# each hole one change away from a form the checks catch (the regression half of every hole)
CAUGHT = {
    "rt12_red_shared_state": RED_SHARED_STATE_CAUGHT,
    "rt12_hashed_shared_state": HASHED_SHARED_STATE_CAUGHT,
    "rt12_cancel_global_state": CANCEL_GLOBAL_STATE_CAUGHT,
    "rt12_alias_store": ALIAS_STORE_CAUGHT,
    "rt12_arrive_token_clock": ARRIVE_TOKEN_CLOCK_CAUGHT,
    "rt12_red_order_clock": RED_ORDER_CLOCK_CAUGHT,
    "rt12_ldmatrix_spin_clock": LDMATRIX_SPIN_CLOCK_CAUGHT,
    "rt12_cluster_bulk_push": CLUSTER_BULK_PUSH_CAUGHT,
    "rt12_callee_local_state": CALLEE_LOCAL_STATE_CAUGHT,
    "rt12_callee_readback_clock": CALLEE_READBACK_CLOCK_CAUGHT,
}
CONTROLS = {
    "rt12_honest_red_count": HONEST_RED_COUNT,
    "rt12_honest_cluster_push": HONEST_CLUSTER_PUSH,
    "rt12_honest_out_param": HONEST_OUT_PARAM,
}


def build(parts: dict) -> Kernel:
    """The entry of one of the dicts above (its ``launch``, else LAUNCH)."""
    parts = dict(parts)
    return entry(parts.pop("launch", LAUNCH), **parts)
