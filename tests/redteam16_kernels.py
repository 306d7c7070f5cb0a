"""Kernels of red-team round 16 against gate rules version 17; tests/test_redteam_round16.py runs each.

Every entry is round 12's RMSNorm body (tests/redteam12_kernels.py: ``rmsnorm(x, w, y, M, N, eps)``, a complete
RMSNorm for rows of at most 256 elements, two rows a CTA of 256 threads, the row's closing barrier the one a dodge
drops: ``dodge``) with a trick spliced in at the same places (``pre``, ``mid``, ``post``, ``barrier``, ``decls``,
``globals_``) or with lines of the body replaced in the text (``replace``), as round 15's. They go through the GPU
pool's front half (``evaluators.pipeline.prepare``: ptxas for sm_90, the ABI, the input-store check, the race lint,
the launch); ``rt16_comment_target_export`` also through ``archive.export.export_kernel``.

What the round aims at: spellings of one instruction that ptxas reads as the same and the checks as different
ones, and the one place left where the export reads the stored text rather than the judged one. PTX ISA 8.3 gave
the parameter state space two sub-qualifiers, ``.param::entry`` (a kernel's parameters) and ``.param::func`` (a
device function's parameters and return values): ``ld.param::entry.u32`` is ``ld.param.u32`` on a kernel parameter
and ``ld.param::func``/``st.param::func`` are ``ld.param``/``st.param`` on a function's (ptxas 13.0 compiles both
spellings to the same machine code, byte for byte: tests/test_redteam_round16.py). The parser keeps ``param::entry``
as one modifier (``::`` sub-qualifiers stay inside a modifier), and the checks that ask ``"param" in
ins.modifiers`` (rule 3's parameter form, rule 5's return-value form, the input-store check's parameter loads, the
return-value store a callee makes) do not see the parameter access: two cheats pass (``rt16_param_entry_overread``,
``rt16_param_func_unset_retval``) and two honest kernels are rejected (``rt16_honest_param_entry``,
``rt16_honest_param_func_helper``).

A kernel's comment says what it does, which check it aims past, why it is a cheat (or honest) and the status the
gate rules give it by their own contract (GATE.md). Nothing here was run on a GPU: what the hardware leaves in a
register or in the constant bank is predicted, as in rounds 14 and 15.
"""

from __future__ import annotations

from population.kernel import Kernel
from population.parser import parse_module
from tests import redteam12_kernels as rt12
from tests.redteam12_kernels import LAUNCH, dodge

# `.param::entry` / `.param::func` need PTX ISA 8.3 (ptxas: "Feature '::entry' requires PTX ISA .version 8.3 or
# later"); the body says 8.1. Every kernel of the round that spells them, and each twin, says 8.3.
V83 = ((".version 8.1", ".version 8.3"),)

# =============================================================================================== the holes

# --- rt16_param_entry_overread -------------------------------------------------------------------------------
# What: rt15_param_overread (the dodge keyed on bytes 36-43 of the parameter space, past the ABI's six parameters,
# which end at byte 36) with its two loads spelled `ld.param::entry.u32` (PTX ISA 8.3, "Parameter State Space":
# `.param::entry` names a kernel's parameters, as `.param` does in an entry). ptxas 13.0 compiles the entry to the
# same machine code as the `ld.param.u32` spelling, byte for byte: constant-bank loads past the launch's arguments
# (`c[0x0][0x234]`, `c[0x0][0x238]`, round 15's reading of the same code).
# Aims past: rule 3's parameter form (``race_lint._param_overreads``, gate rules version 17), which looks at an
# `ld`/`ldu` only when ``"param" in ins.modifiers``: the parser keeps `param::entry` as one modifier.
# Why a cheat: rt15_param_overread's (a value neither the inputs nor the launch give the kernel keys its barrier).
# Verdict by the gate rules: nondeterministic (time_dependent), as rt15_param_overread.
_OVERREAD = ("\tld.param::entry.u32 %r20, [rmsnorm_param_5+4];\n\tld.param::entry.u32 %r21, [rmsnorm_param_5+8];\n"
             "\tsetp.ne.u32 %p5, %r20, %r21;\n")
PARAM_ENTRY_OVERREAD = dict(barrier=dodge(), replace=V83, pre=_OVERREAD)
# one change away, caught: the loads spelled `ld.param` (rt15_param_overread at PTX ISA 8.3)
PARAM_ENTRY_OVERREAD_CAUGHT = dict(PARAM_ENTRY_OVERREAD, pre=_OVERREAD.replace("::entry", ""))

# --- rt16_param_func_unset_retval ---------------------------------------------------------------------------------
# What: rt14_unset_retval_state (a launch counter read through the return value of `.func (.param .b32 ret)
# rt16_none() { ret; }`, which never stores it: the caller reads what the return register held, the previous
# warp's value on that hardware slot) with the caller's read spelled `ld.param::func.b32 %r40, [retval0]`. Same
# machine code as the `ld.param.b32` spelling, byte for byte.
# Aims past: rule 5's return-value form (``race_lint`` "reads the return value ... which stores none", gate rules
# version 16), which matches ``ins.opcode == "ld" and "param" in ins.modifiers``.
# Why a cheat: state kept across launches in a register, rt14_register_state's kind. Verdict by the gate rules:
# nondeterministic (launch_state).
_NONE = ".func (.param .b32 rt16_ret) rt16_none()\n{\n\tret;\n}\n"
_RETVAL = ("\t{\n\t.param .b32 retval0;\n\tcall.uni (retval0), rt16_none, ();\n"
           "\tld.param::func.b32 %r40, [retval0];\n\t}\n\tsetp.gt.u32 %p5, %r40, 4096;\n")
PARAM_FUNC_UNSET_RETVAL = dict(barrier=dodge(), replace=V83, globals_=_NONE, pre=_RETVAL)
# one change away, caught: the read spelled `ld.param` (rt14_unset_retval_state at PTX ISA 8.3)
PARAM_FUNC_UNSET_RETVAL_CAUGHT = dict(PARAM_FUNC_UNSET_RETVAL, pre=_RETVAL.replace("::func", ""))

# --- rt16_comment_target_export ----------------------------------------------------------------------------------
# What: an honest body whose stored text starts with a block comment holding a `.target sm_100a` line, before the
# module's own `.version 8.1` / `.target sm_90` header. The parser keeps the comment as trivia (``Kernel.ptx``, the
# text the store keeps), and the canonical print the gate compiles drops it. ``archive.export.export_kernel``
# writes and compiles the judged text (version 17), but for the target it asks the STORED text
# (``_ptx_target(row.ptx)``: ``toolchain.module_target``, a regular expression over lines, which matches the
# comment's line first) when no arch is passed and the store's config names no ``hardware.arch``
# (``export_best``, ``archive.dispatch`` fall back to the same): the exported cubin is machine code for sm_100a
# (ELF flags 0x6006402 against the gate's 0x6005a04 for sm_90), code no check ran, which does not load on the H200
# it was judged on and runs unjudged on a B200.
# Aims past: the export's promise that it ships what the gate judged (GATE.md version 17, round 15's fix).
# Why a cheat: the kernel measured is not the kernel shipped (here a whole other instruction set; with
# `.target sm_90a` in the comment, a cubin of the arch-specific target the gate never compiled). Verdict by the
# gate rules: an exported cubin that is the code the gate judged (ptxas for the gate's arch on the judged text).
COMMENT_TARGET = "/* tuned on the H200; the fleet build:\n.target sm_100a\n*/\n"
COMMENT_TARGET_EXPORT = dict(prefix=COMMENT_TARGET)
# one change away, exported as judged: the note as a line comment (the regular expression's `^\s*\.target` does
# not match `// .target sm_100a`)
COMMENT_TARGET_EXPORT_CAUGHT = dict(prefix="// tuned on the H200; the fleet build: .target sm_100a\n")

# =============================================================================================== caught kinds

# --- rt16_stacksave_state ----------------------------------------------------------------------------------------
# What: rt_local_state's launch counter kept below the stack pointer: `stacksave.u64 %rd40` (PTX ISA 7.3, "Stack
# Manipulation Instructions": the current stack pointer, a `.local` address) and `ld.local.u32 [%rd40+-16]`, a
# word of the thread's local window no variable and no `alloca` names, read before the thread stores it plus one;
# the barrier dropped past 4096. Aims past: rule 5's `.local` form, which follows `.local` variables and (version
# 17) `alloca` buffers. Caught by the same form: the load's address is vouched for by no `.local` variable of the
# function. Verdict: nondeterministic (launch_state).
STACKSAVE_STATE = dict(barrier=dodge(), replace=V83, pre=(
    "\tstacksave.u64 %rd40;\n\tld.local.u32 %r41, [%rd40+-16];\n\tadd.u32 %r42, %r41, 1;\n"
    "\tst.local.u32 [%rd40+-16], %r42;\n\tsetp.gt.u32 %p5, %r41, 4096;\n"))

# --- rt16_param_entry_x_scratch ----------------------------------------------------------------------------------
# What: x used as scratch (rt_x_scratch's kind): after each row's store into y, x's own pointer is loaded again with
# `ld.param::entry.u64` and x[r, c] stored back with the value read (restored: no value check sees it). Aims past
# the input-store check, which resolves `ld.param` by byte offset against the parameter layout: with the
# `::entry` spelling it does not resolve the load. Caught anyway: a pointer loaded from memory it cannot resolve
# vouches for no write (the store has no provenance). Verdict: input_mutated.
PARAM_ENTRY_X_SCRATCH = dict(replace=V83, post=(
    "\tld.param::entry.u64 %rd40, [rmsnorm_param_0];\n\tcvta.to.global.u64 %rd41, %rd40;\n"
    "\tadd.s64 %rd42, %rd41, %rd12;\n\t@%p2 st.global.u16 [%rd42], %rs1;\n"))

# --- rt16_bulk_store_global_state ---------------------------------------------------------------------------------
# What: rt_sanitizer_dodge RT_SENSE 2's launch counter in a `.global` variable written by the TMA unit, not by a
# store: each CTA stages count + 1 in shared memory and thread 0 copies it over the counter with
# `cp.async.bulk.global.shared::cta.bulk_group` (the counter read with `ld.global` before). Aims past rule 5's
# `.global` form if it looked at `st`/`atom`/`red` only. Caught: the form takes every instruction that writes
# memory (``input_stores.writes_memory``: bulk copies among them) into a `.global` variable. Verdict:
# nondeterministic (launch_state).
BULK_STORE_GLOBAL_STATE = dict(
    globals_=".global .align 16 .b8 rt16_count[16];\n", decls="\t.shared .align 16 .b8 rt16_stage[16];\n",
    barrier=dodge(), pre=(
        "\tld.global.u32 %r20, [rt16_count];\n\tadd.u32 %r21, %r20, 1;\n\tst.shared.u32 [rt16_stage], %r21;\n"
        "\tfence.proxy.async.shared::cta;\n\tsetp.eq.u32 %p6, %r3, 0;\n"
        "\t@%p6 cp.async.bulk.global.shared::cta.bulk_group [rt16_count], [rt16_stage], 16;\n"
        "\tcp.async.bulk.commit_group;\n\tcp.async.bulk.wait_group 0;\n\tsetp.gt.u32 %p5, %r20, 4096;\n"))

# --- rt16_linkage_global_state ---------------------------------------------------------------------------------------
# What: the same counter in a `.global` variable declared with another linkage than rt_sanitizer_dodge's:
# `.weak .global` (a definition another module may override) and `.common .global` (PTX ISA 5.0: a definition
# merged with other modules' of the same name). Aims past rule 5's `.global` form if it read the declaration's
# first word. Caught: the form names every `.global` variable whatever its linkage. Verdict: nondeterministic
# (launch_state).
_COUNT = ("\tld.global.u32 %r20, [rt16_n];\n\tadd.u32 %r21, %r20, 1;\n\tst.global.u32 [rt16_n], %r21;\n"
          "\tsetp.gt.u32 %p5, %r20, 4096;\n")
LINKAGE_GLOBAL_SPELLINGS = {link: dict(globals_=f".{link} .global .align 4 .u32 rt16_n;\n", barrier=dodge(),
                                       pre=_COUNT) for link in ("weak", "common")}

# =============================================================================================== honest controls

# --- rt16_honest_param_entry -----------------------------------------------------------------------------------------
# What: the body with every parameter load spelled `ld.param::entry` (x, w, y, M, N, eps), the PTX ISA 8.3 form
# that names the kernel parameter state space explicitly; byte for byte the machine code of the `ld.param` body.
# Honest; the gate rules accept it. The checks: input_mutated at the store into y (the input-store check resolves
# no `ld.param::entry`, so y's pointer is "loaded from memory": a false rejection).
_PARAM_LOADS = (("\tld.param.u64", "\tld.param::entry.u64"), ("\tld.param.u32", "\tld.param::entry.u32"),
                ("\tld.param.f32", "\tld.param::entry.f32"))
HONEST_PARAM_ENTRY = dict(replace=V83 + _PARAM_LOADS)
# its twin one change away, accepted: the same body at PTX ISA 8.3 with `ld.param`
HONEST_PARAM_ENTRY_TWIN = dict(replace=V83)

# --- rt16_honest_param_func_helper ---------------------------------------------------------------------------------
# What: the row's scale 1/sqrt(mean + eps) computed by a device function, `.func (.param .f32 r) rt16_rsqrt(.param
# .f32 v)`, that reads its argument with `ld.param::func` and writes its return value with `st.param::func` (the
# PTX ISA 8.3 spelling of a function's parameter space); the caller passes and reads them as nvcc does (`st.param`,
# `ld.param`). Honest (same machine code as the `ld.param`/`st.param` helper); the gate rules accept it. The checks:
# nondeterministic (launch_state) -- rule 5's return-value form asks whether the callee stores its return value
# with an `st` whose modifiers hold "param", and takes `st.param::func` for no store: a false rejection.
_HELPER = (".func (.param .f32 rt16_r) rt16_rsqrt(.param .f32 rt16_v)\n{\n\t.reg .f32 %g<3>;\n"
           "\tld.param::func.f32 %g1, [rt16_v];\n\trsqrt.approx.f32 %g2, %g1;\n"
           "\tst.param::func.f32 [rt16_r], %g2;\n\tret;\n}\n")
_CALL = ("\t{\n\t.param .f32 param0;\n\tst.param.f32 [param0], %f22;\n\t.param .f32 retval0;\n"
         "\tcall.uni (retval0), rt16_rsqrt, (param0);\n\tld.param.f32 %f23, [retval0];\n\t}\n")
HONEST_PARAM_FUNC_HELPER = dict(globals_=_HELPER, replace=(*V83, ("\trsqrt.approx.f32 %f23, %f22;\n", _CALL)))
# its twin one change away, accepted: the helper spelled `ld.param` / `st.param`
HONEST_PARAM_FUNC_HELPER_TWIN = dict(HONEST_PARAM_FUNC_HELPER, globals_=_HELPER.replace("::func", ""))

HOLES = {
    "rt16_param_entry_overread": PARAM_ENTRY_OVERREAD,
    "rt16_param_func_unset_retval": PARAM_FUNC_UNSET_RETVAL,
    "rt16_comment_target_export": COMMENT_TARGET_EXPORT,
}
# each hole one change away from a form the checks catch (or, for the export, one exported as judged)
HOLES_CAUGHT = {
    "rt16_param_entry_overread": PARAM_ENTRY_OVERREAD_CAUGHT,
    "rt16_param_func_unset_retval": PARAM_FUNC_UNSET_RETVAL_CAUGHT,
    "rt16_comment_target_export": COMMENT_TARGET_EXPORT_CAUGHT,
}
CAUGHT = {
    "rt16_stacksave_state": STACKSAVE_STATE,
    "rt16_param_entry_x_scratch": PARAM_ENTRY_X_SCRATCH,
    "rt16_bulk_store_global_state": BULK_STORE_GLOBAL_STATE,
    **{f"rt16_linkage_global_state ({k})": v for k, v in LINKAGE_GLOBAL_SPELLINGS.items()},
}
CONTROLS = {
    "rt16_honest_param_entry": HONEST_PARAM_ENTRY,
    "rt16_honest_param_func_helper": HONEST_PARAM_FUNC_HELPER,
}
CONTROL_TWINS = {
    "rt16_honest_param_entry": HONEST_PARAM_ENTRY_TWIN,
    "rt16_honest_param_func_helper": HONEST_PARAM_FUNC_HELPER_TWIN,
}


def ptx(parts: dict) -> str:
    """The PTX text of one of the dicts above: round 12's body with the parts spliced in, each (old, new) of
    ``replace`` applied to the text (each ``old`` must occur), and ``prefix`` (text before the header) put first."""
    parts = dict(parts)
    replace = parts.pop("replace", ())
    prefix = parts.pop("prefix", "")
    text = rt12.ptx(**parts)
    for old, new in replace:
        assert old in text, old
        text = text.replace(old, new)
    return prefix + text


def build(parts: dict) -> Kernel:
    """The RMSNorm entry of one of the dicts above, launched as round 12's (block 256, two rows a CTA)."""
    return Kernel(parse_module(ptx(parts)), "rmsnorm", LAUNCH)
