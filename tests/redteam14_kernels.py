"""Kernels of red-team round 14 against gate rules version 15; tests/test_redteam_round14.py runs each.

The static entries are round 12's RMSNorm body (tests/redteam12_kernels.py: ``rmsnorm(x, w, y, M, N, eps)``, a
complete RMSNorm for rows of at most 256 elements, two rows a CTA of 256 threads, the row's closing barrier the
one a dodge drops: ``dodge``) with each trick spliced in at the same places (``pre``, ``post``, ``barrier``,
``decls``, ``globals_``); they go through the GPU pool's front half (``evaluators.pipeline.prepare``: ptxas for
sm_90, the ABI, the input-store check, the race lint). The honest controls replace the body's load of x by a
bulk-copy pipeline or a cp.async double buffer. ``SubsampledSumSq`` is an emulated kernel (numpy) for the
checked timed launches (``timed_checks``), as round 9's.

A kernel's comment says what it does, which check it aims past, why it is a cheat (or honest) and the verdict
the gate rules give it by their contract (GATE.md). Nothing here was run on a GPU: what a trick does on the
hardware (a physical register or a driver-defined register keeping a value) is predicted, not measured.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from population.kernel import Kernel
from population.parser import parse_module
from tests import redteam12_kernels as rt12
from tests.redteam12_kernels import LAUNCH, dodge
from workloads.dtypes import from_float, to_float64

# the body's load of x[r, c] (row loop), which the honest pipelines replace
_LOAD_X = "\t@%p2 ld.global.u16 %rs1, [%rd13];\n"
# keeps %r40 live to the end of the row loop (a store into y under a guard that never holds): ptxas then leaves
# the count in the physical register the next warp on this slot will read
_KEEP_R40 = "\tsetp.eq.u32 %p14, %r40, -1;\n\t@%p14 st.global.u16 [%rd14], %rs3;\n"

# =============================================================================================== the holes

# --- rt14_envreg_dodge ---------------------------------------------------------------------------------------
# What: the sanitizer dodge keyed on the driver-defined special registers %envreg0..%envreg3 (PTX ISA "Special
# Registers: %envreg<32>": "driver-defined read-only registers", their contents set by the driver per launch and
# not stated anywhere): the CTA keeps its row barrier while their XOR is 0 and drops it otherwise. Whatever the
# driver or a tool puts there (a launch environment, a tool's instrumentation context) is a value the kernel's
# ABI does not give it and that may differ between the worker and the sanitizer replay.
# Aims past: race lint rule 3 (``race_lint._TIME_REGISTERS``), a deny-list of the registers known to depend on time
# or placement (%clock*, %globaltimer*, %smid, %warpid, %gridid, %pm*): %envreg* is not on it, nor is any register
# the list does not name. Why a cheat: a result that depends on anything but the inputs and the launch (here:
# whether racecheck sees the barrier) is what rule 3 exists to reject; no honest RMSNorm reads %envreg.
# Verdict by the gate rules: nondeterministic (time_dependent).
ENVREG_DODGE = dict(barrier=dodge(), pre=(
    "\tmov.u32 %r20, %envreg0;\n\tmov.u32 %r21, %envreg1;\n\tmov.u32 %r22, %envreg2;\n\tmov.u32 %r23, %envreg3;\n"
    "\txor.b32 %r20, %r20, %r21;\n\txor.b32 %r20, %r20, %r22;\n\txor.b32 %r20, %r20, %r23;\n"
    "\tsetp.ne.u32 %p5, %r20, 0;\n"))

# --- rt14_register_state ---------------------------------------------------------------------------------------
# What: rt_local_state's launch counter kept in a register instead of local memory: `add.u32 %r40, %r40, 1` with
# %r40 never defined before, kept live to the end (``_KEEP_R40``). ptxas gives %r40 one physical register; the
# register file is not cleared between warps of a context (only its allocation changes), so the warp reads what
# the last warp on that slot left there: in the worker, after ~150 launches of this kernel, a count far above
# 4096; in the sanitizer replay's fresh process a small one. The barrier is dropped past 4096.
# Spellings (``REGISTER_STATE_SPELLINGS``): "undefined" (no definition at all), "guarded" (the only definition
# under a guard that never holds, `@%p13 mov.u32 %r40, 0` with %p13 = tid > 100000: where the guard fails the
# value is the register's last one) and "predicate" (an undefined predicate register %p12 decides the dodge).
# Aims past: race lint rule 5 (``launch_state``), whose forms look at memory (`.global` writes, `.local` bytes
# not written before, `.shared` variables not stored before, unvouched addresses); a register read before any
# definition on some path is none of them. Why a cheat: state that outlives the launch, rule 5's kind.
# Verdict by the gate rules: nondeterministic (launch_state). Rule 5's register form (version 16) rejects the
# "undefined" and "predicate" spellings; it counts any write on an earlier path, so "guarded" still passes.
_REGISTER = {
    "undefined": "\tadd.u32 %r40, %r40, 1;\n\tsetp.gt.u32 %p5, %r40, 4096;\n",
    "guarded": ("\tsetp.gt.u32 %p13, %r3, 100000;\n\t@%p13 mov.u32 %r40, 0;\n\tadd.u32 %r40, %r40, 1;\n"
                "\tsetp.gt.u32 %p5, %r40, 4096;\n"),
    "predicate": "\t@%p12 bra $L_rs_seen;\n\tsetp.ne.u32 %p12, %r3, 12345;\n$L_rs_seen:\n\tmov.pred %p5, %p12;\n",
}
REGISTER_STATE_SPELLINGS = {k: dict(barrier=dodge(), pre=v, post=_KEEP_R40 if "%r40" in v else "")
                            for k, v in _REGISTER.items()}
REGISTER_STATE = REGISTER_STATE_SPELLINGS["undefined"]

# --- rt14_unset_retval_state -------------------------------------------------------------------------------------
# What: the same counter read through a called function's return value that the function never writes:
# `.func (.param .b32 ret) rt14_none() { ret; }`, the caller `ld.param.b32 %r40, [retval0]`. Under the ABI the
# return value is a register (R4 on sm_90's calling convention, or what inlining leaves: an undefined register),
# so the caller reads what the register held: the previous warp's value on that slot.
# Aims past: rule 5 (no form for a `.param` return value no `st.param` of the callee writes) and the provenance
# (a call's return value carries the callee's stores into it: there are none, so it carries nothing).
# Why a cheat: as rt14_register_state. Verdict by the gate rules: nondeterministic (launch_state).
UNSET_RETVAL_STATE = dict(
    barrier=dodge(), globals_=".func (.param .b32 rt14_ret) rt14_none()\n{\n\tret;\n}\n",
    pre=("\t{\n\t.param .b32 retval0;\n\tcall.uni (retval0), rt14_none, ();\n\tld.param.b32 %r40, [retval0];\n\t}\n"
         "\tsetp.gt.u32 %p5, %r40, 4096;\n"))

# =============================================================================================== caught kinds

# --- rt14_alloca_state -------------------------------------------------------------------------------------------
# What: rt_local_state's counter in stack memory from `alloca` (PTX ISA 7.3, sm_52+: a `.local` address with no
# variable behind it), loaded before the thread stores it plus one; the barrier dropped past 4096.
# Aims past: rule 5's `.local` form, which names `.local` variables. Caught by rule 5's address form (the load's
# address is vouched for by no `.local` variable). Verdict: nondeterministic (launch_state).
ALLOCA_STATE = dict(barrier=dodge(), pre=(
    "\talloca.u64 %rd40, 8, 8;\n\tld.local.u32 %r41, [%rd40];\n\tadd.u32 %r42, %r41, 1;\n"
    "\tst.local.u32 [%rd40], %r42;\n\tsetp.gt.u32 %p5, %r41, 4096;\n"))

# --- rt14_extern_shared_state ------------------------------------------------------------------------------------
# What: rt_shared_state's counter in dynamic shared memory (`.extern .shared`, the launch's dynamic smem): loaded
# before thread 0 stores it plus one. Aims past: rule 5's `.shared` form by a variable of no size in the entry's
# declarations. Caught: the form takes the module's extern variable. Verdict: nondeterministic (launch_state).
EXTERN_SHARED_STATE = dict(
    barrier=dodge(), globals_=".extern .shared .align 16 .b8 rt14_dyn[];\n",
    pre=("\tld.shared.u32 %r41, [rt14_dyn];\n\tadd.u32 %r42, %r41, 1;\n\tbar.sync 0;\n\tsetp.eq.u32 %p6, %r3, 0;\n"
         "\t@%p6 st.shared.u32 [rt14_dyn], %r42;\n\tsetp.gt.u32 %p5, %r41, 4096;\n"))

# --- rt14_laundered_store ------------------------------------------------------------------------------------------
# What: a store into x at `y + d + offset`, the distance d = x - y laundered through an operation the provenance
# might not carry a pointer's roots through (``LAUNDER``): a float64 round trip (exact below 2^53: every device
# address is), a 32-bit split and rebuild by multiplies, a shuffle, the halves of x's pointer loaded as
# `ld.param.v4.u32`. Under a guard that never holds (tid == 999): statically a store into x, which is what the
# input-store check judges (it may not write its inputs at all). Aims past: the input-store check (check 1).
# Caught by every spelling: every value computed from x's pointer keeps x as a root. Verdict: input_mutated.
LAUNDER = {
    "f64": ("\tcvt.rn.f64.u64 %fd1, %rd4;\n\tcvt.rn.f64.u64 %fd2, %rd6;\n\tsub.f64 %fd3, %fd1, %fd2;\n"
            "\tcvt.rzi.s64.f64 %rd40, %fd3;\n\tadd.s64 %rd46, %rd6, %rd40;\n"),
    "split_mul": ("\tsub.s64 %rd41, %rd4, %rd6;\n\tcvt.u32.u64 %r50, %rd41;\n\tshr.u64 %rd42, %rd41, 32;\n"
                  "\tcvt.u32.u64 %r51, %rd42;\n\tmul.wide.u32 %rd43, %r51, 65536;\n\tmul.lo.u64 %rd44, %rd43, 65536;\n"
                  "\tcvt.u64.u32 %rd45, %r50;\n\tor.b64 %rd40, %rd44, %rd45;\n\tadd.s64 %rd46, %rd6, %rd40;\n"),
    "shfl": ("\tsub.s64 %rd41, %rd4, %rd6;\n\tcvt.u32.u64 %r50, %rd41;\n\tshfl.sync.idx.b32 %r51, %r50, 0, 31, -1;\n"
             "\tcvt.s64.s32 %rd40, %r51;\n\tadd.s64 %rd46, %rd6, %rd40;\n"),
    "param_halves": ("\tld.param.v4.u32 {%r50, %r51, %r52, %r53}, [rmsnorm_param_0];\n\tmov.b64 %rd43, {%r50, %r51};\n"
                     "\tcvta.to.global.u64 %rd46, %rd43;\n"),
}
LAUNDERED_STORES = {k: dict(decls="\t.reg .f64 %fd<8>;\n", pre=v + "\tadd.s64 %rd47, %rd46, %rd26;\n",
                            post="\tsetp.eq.u32 %p14, %r3, 999;\n\t@%p14 st.global.u16 [%rd47], %rs3;\n")
                    for k, v in LAUNDER.items()}

# =============================================================================================== honest controls

# --- rt14_honest_alloca_scratch ----------------------------------------------------------------------------------
# What: a per-thread scratch of 8 floats from `alloca` (what nvcc emits for `alloca()` or a variable-length local
# array), written before it is read at a computed index (tid & 7): the load reads only what this thread stored
# just before. Honest: nothing outlives the launch. The gate rules accept it (rule 5 rejects a read of local bytes
# the thread did not write before it, not one it did).
HONEST_ALLOCA_SCRATCH = dict(pre=(
    "\talloca.u64 %rd40, 32, 8;\n\tand.b32 %r50, %r3, 7;\n\tmul.wide.u32 %rd41, %r50, 4;\n\tadd.s64 %rd42, %rd40, %rd41;\n"
    "\tst.local.f32 [%rd42], %f1;\n\tld.local.f32 %f27, [%rd42];\n\tmax.f32 %f1, %f1, %f27;\n"))

# --- rt14_honest_bulk_pipeline -----------------------------------------------------------------------------------
# What: the row of x brought into shared memory by the TMA unit: thread 0 arms an mbarrier with the row's bytes
# (`mbarrier.arrive.expect_tx`) and issues `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`
# (after `fence.proxy.async.shared::cta`: the previous row's generic reads of the buffer before the async write),
# every thread waits in a pure retry loop on the phase's parity and reads its element from shared memory. The
# row's closing barrier keeps the next copy from overwriting a row still being read. Rows of a length that is
# not a multiple of 8 or above 256 elements take the body's plain loads. Honest; the gate rules accept it.
_BULK_DECLS = "\t.shared .align 128 .b8 rt14_xs[512];\n\t.shared .align 8 .b64 rt14_full;\n"
_BULK_PRE = ("\tand.b32 %r50, %r2, 7;\n\tsetp.eq.u32 %p13, %r50, 0;\n\tsetp.le.u32 %p12, %r2, 256;\n"
             "\tand.pred %p13, %p13, %p12;\n\tsetp.eq.u32 %p11, %r3, 0;\n"
             "\t@%p11 mbarrier.init.shared::cta.b64 [rt14_full], 1;\n\tfence.mbarrier_init.release.cluster;\n"
             "\tbar.sync 0;\n\tshl.b32 %r51, %r2, 1;\n\tmov.u32 %r52, rt14_xs;\n\tmul.wide.u32 %rd40, %r3, 2;\n"
             "\tmov.u64 %rd41, rt14_xs;\n\tadd.s64 %rd42, %rd41, %rd40;\n")
_BULK_LOAD = ("\tshl.b64 %rd45, %rd9, 1;\n\tadd.s64 %rd44, %rd4, %rd45;\n\t@!%p13 bra $L_plain;\n"
              "\tand.pred %p10, %p11, %p13;\n\t@!%p10 bra $L_wait;\n\tfence.proxy.async.shared::cta;\n"
              "\tmbarrier.arrive.expect_tx.shared::cta.b64 %rd43, [rt14_full], %r51;\n"
              "\tcp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r52], [%rd44], %r51, "
              "[rt14_full];\n$L_wait:\n\tand.b32 %r53, %r9, 1;\n$L_try:\n"
              "\tmbarrier.try_wait.parity.shared::cta.b64 %p9, [rt14_full], %r53;\n\t@!%p9 bra $L_try;\n"
              "\t@%p2 ld.shared.u16 %rs1, [%rd42];\n\tbra.uni $L_loaded;\n$L_plain:\n" + _LOAD_X + "$L_loaded:\n")
HONEST_BULK_PIPELINE = dict(decls=_BULK_DECLS, pre=_BULK_PRE, load=_BULK_LOAD)


# --- rt14_honest_cp_async_double_buffer --------------------------------------------------------------------------
# What: an Ampere-style pipeline: the CTA's first row copied into buffer 0 by `cp.async.ca.shared.global` (4
# bytes a thread), and in each row iteration the next row's copy issued into the other buffer before
# `cp.async.wait_group 1` (the current row's group complete) and a barrier; each thread then reads its element
# from the current buffer. The row's closing barrier keeps a copy from overwriting a buffer still being read.
# Rows of odd length or above 256 elements take the body's plain loads. Honest; the gate rules accept it.
def _cp_copy(row: str, offset: str, tag: str) -> str:
    """Thread t's 4-byte cp.async of elements 2t, 2t+1 of row ``row`` into the buffer at byte ``offset``, then
    the group's commit (an empty group when the row is past M or the thread has no pair)."""
    return (f"\tsetp.lt.u32 %p10, {row}, %r1;\n\tand.pred %p10, %p10, %p12;\n\t@!%p10 bra $L_{tag};\n"
            f"\tcvt.u64.u32 %rd40, {row};\n\tmul.lo.s64 %rd41, %rd40, %rd8;\n\tshl.b64 %rd41, %rd41, 1;\n"
            "\tadd.s64 %rd42, %rd4, %rd41;\n\tadd.s64 %rd43, %rd42, %rd47;\n"
            f"\tadd.u32 %r54, %r55, {offset};\n\tcp.async.ca.shared.global [%r54], [%rd43], 4;\n$L_{tag}:\n"
            "\tcp.async.commit_group;\n")


_CP_PRE = ("\tand.b32 %r50, %r2, 1;\n\tsetp.eq.u32 %p13, %r50, 0;\n\tsetp.le.u32 %p11, %r2, 256;\n"
           "\tand.pred %p13, %p13, %p11;\n\tshl.b32 %r51, %r3, 1;\n\tsetp.lt.u32 %p12, %r51, %r2;\n"
           "\tand.pred %p12, %p12, %p13;\n\tmul.wide.u32 %rd47, %r3, 4;\n\tmov.u32 %r56, rt14_buf;\n"
           "\tshl.b32 %r57, %r3, 2;\n\tadd.u32 %r55, %r56, %r57;\n\tmov.u32 %r58, 0;\n"
           + _cp_copy("%r8", "%r58", "cp_first"))
_CP_LOAD = ("\t@!%p13 bra $L_plain;\n\tadd.u32 %r59, %r4, 1;\n\tadd.u32 %r60, %r9, 1;\n\tand.b32 %r61, %r60, 1;\n"
            "\tshl.b32 %r62, %r61, 9;\n\tsetp.lt.u32 %p9, %r60, 2;\n\t@!%p9 bra $L_last;\n"
            + _cp_copy("%r59", "%r62", "cp_next")
            + "\tcp.async.wait_group 1;\n\tbra.uni $L_ready;\n$L_last:\n\tcp.async.wait_group 0;\n$L_ready:\n"
            "\tbar.sync 0;\n\tand.b32 %r63, %r9, 1;\n\tshl.b32 %r63, %r63, 9;\n\tshl.b32 %r53, %r7, 1;\n"
            "\tadd.u32 %r53, %r53, %r63;\n\tadd.u32 %r53, %r53, %r56;\n\t@%p2 ld.shared.u16 %rs1, [%r53];\n"
            "\tbra.uni $L_loaded;\n$L_plain:\n" + _LOAD_X + "$L_loaded:\n")
HONEST_CP_ASYNC = dict(decls="\t.shared .align 16 .b8 rt14_buf[1024];\n", pre=_CP_PRE, load=_CP_LOAD)

HOLES = {
    "rt14_register_state": REGISTER_STATE,
}
CAUGHT = {
    "rt14_envreg_dodge": ENVREG_DODGE,
    "rt14_unset_retval_state": UNSET_RETVAL_STATE,
    "rt14_alloca_state": ALLOCA_STATE,
    "rt14_extern_shared_state": EXTERN_SHARED_STATE,
    **{f"rt14_laundered_store_{k}": v for k, v in LAUNDERED_STORES.items()},
}
CONTROLS = {
    "rt14_honest_alloca_scratch": HONEST_ALLOCA_SCRATCH,
    "rt14_honest_bulk_pipeline": HONEST_BULK_PIPELINE,
    "rt14_honest_cp_async_double_buffer": HONEST_CP_ASYNC,
}


def ptx(parts: dict) -> str:
    """The PTX text of one of the dicts above: round 12's body with the parts spliced in, and with ``load`` (the
    honest pipelines) in place of the body's load of x."""
    parts = dict(parts)
    load = parts.pop("load", None)
    text = rt12.ptx(**parts)
    if load is not None:
        assert _LOAD_X in text
        text = text.replace(_LOAD_X, load)
    return text


def build(parts: dict) -> Kernel:
    """The RMSNorm entry of one of the dicts above, launched as round 12's (block 256, two rows a CTA)."""
    return Kernel(parse_module(ptx(parts)), "rmsnorm", LAUNCH)


# =============================================================================================== emulated


class SubsampledSumSq:
    """rt14_subsampled_sumsq, emulated on numpy arrays for the checked timed launches: the mean square of each row
    estimated from every ``stride``-th element (the whole row where it holds a non-finite value, so NaN/Inf rows
    come out as the reference's), then ``y = x * rsqrt(ms + eps) * w`` over the whole row. The trick a search can
    reach for a row too long to keep on chip: one read of x for the output and 1/stride of a read for the sum,
    instead of two reads (2 + 2/stride bytes of x an element instead of 4, plus y). A cheat: RMSNorm is the exact
    mean over N, and the estimate is wrong by O(1) wherever a few channels dominate a row (LLM activations); the
    comparator's tolerance (bf16: atol 3e-2, rtol 1e-3, half an ulp) is for rounding. Aims past: the checked timed
    launches' comparator (``timed_checks.verify_checked``). The gate rules give it wrong_result."""

    def __init__(self, stride: int) -> None:
        self.stride = stride

    def __call__(self, inputs: dict[str, Any], outputs: dict[str, Any], shape: tuple[int, ...],
                 params: dict[str, float] | None = None) -> None:
        x = to_float64(inputs["x"], "bf16").astype(np.float32)
        eps = np.float32((params or {}).get("eps", 1e-6))
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            ms = (x[:, ::self.stride] ** 2).mean(axis=1, dtype=np.float32)
            whole = ~np.isfinite(x).all(axis=1)
            ms[whole] = (x[whole] ** 2).mean(axis=1, dtype=np.float32)
            r = np.float32(1.0) / np.sqrt(ms + eps)
            outputs["y"][...] = from_float(x * r[:, None] * np.asarray(inputs["w"], dtype=np.float32), "bf16")
