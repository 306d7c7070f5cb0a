"""Kernels of red-team round 15 against gate rules version 16; tests/test_redteam_round15.py runs each.

Every entry is round 12's RMSNorm body (tests/redteam12_kernels.py: ``rmsnorm(x, w, y, M, N, eps)``, a complete
RMSNorm for rows of at most 256 elements, two rows a CTA of 256 threads, the row's closing barrier the one a dodge
drops: ``dodge``) with a trick spliced in at the same places (``pre``, ``mid``, ``post``, ``barrier``, ``index``,
``decls``, ``globals_``) or, where a trick changes a line of the body, with that line replaced in the text
(``replace``). They go through the GPU pool's front half (``evaluators.pipeline.prepare``: ptxas for sm_90, the
ABI, the input-store check, the race lint, the launch), as rounds 11-14's.

What the round aims at: the places no earlier round looked. The analyses read the parser's view of a kernel and
the gate compiles its canonical print (the same view), while the store and the export keep and compile the text
as written: a spelling the parser and ptxas read differently ships code no check saw (``rt15_loc_hidden_store``)
or without code the checks relied on (``rt15_loc_phantom_init``). On the gate's own path: an operand no
instruction names (the carry flag read by ``addc``: ``rt15_carry_state``), memory read by the TMA unit rather than
a load (a bulk copy out of shared memory: ``rt15_bulk_copy_stale_shared``), and bytes of the parameter space
outside the ABI's parameters (``rt15_param_overread``).

A kernel's comment says what it does, which check it aims past, why it is a cheat (or honest) and the status the
gate rules give it by their own contract (GATE.md). What ptxas makes of a trick was read on the CPU (ptxas 13.0,
its SASS through ``nvdisasm``, and the entry's machine code compared byte for byte where a test says so); nothing
here was run on a GPU, so what the hardware keeps in a register or in the constant bank is predicted, not
measured.
"""

from __future__ import annotations

import re

from population.kernel import Kernel
from population.parser import parse_module
from tests import redteam12_kernels as rt12
from tests.redteam12_kernels import LAUNCH, dodge

# `.loc` names a file of the module's `.file` table (PTX ISA "Debugging Directives: .loc"); nvcc -lineinfo writes both
_FILE = '.file 1 "rmsnorm.cu"\n'
# the body's lines a trick replaces (``replace``)
_Y_ADDRESS = "\tadd.s64 %rd14, %rd6, %rd12;\n"  # &y[r, c] = y + 2 (r N + c)
_STORE_Y = "\t@%p2 st.global.u16 [%rd14], %rs3;\n"

# =============================================================================================== the holes

# --- rt15_loc_hidden_store -----------------------------------------------------------------------------------
# What: instructions written after a `.loc` directive on the same line: `.loc 1 40 0 @%p2 st.global.u16 [%rd13],
# %rs3;`. The parser reads `.loc` as a directive running to the end of its line (population/grammar.lark: the LOC
# terminal and the RUN pattern's `.loc` piece are `\.loc[^\n]*`), so the instructions after it are the directive's
# text; ptxas reads PTX as tokens, not lines: `.loc` takes its three numbers and compiles what follows.
# Where the two texts part: everything on the gate's path compiles the kernel's canonical print
# (``evaluators.toolchain._source_text``: ``Kernel.canonical_ptx``, which drops `.loc`/`.file` and comments), so the
# front half, the GPU gate, the timings and the sanitizer judge the parser's view, without the hidden
# instructions: consistent, and accepted. The store keeps ``Kernel.ptx`` (the text as written, `.loc` lines
# verbatim; the engine keeps no cubin: ``CandidateRow.from_eval`` without one), and ``archive.export`` /
# ``archive.dispatch`` write that text and compile it with ptxas for the exported cubin: the shipped kernel runs the
# hidden instructions, byte for byte the machine code of the caught twin below (tests/test_redteam_round15.py).
# Spellings (``LOC_HIDDEN_SPELLINGS``): "x_scratch" stores into x[r, c] (y's value, then x's own value back: x as
# scratch, restored before the thread ends, rt_x_scratch's kind); "clock" reads %clock64 at the CTA's start and
# after each row's reduction and drops the row's closing barrier when the row took under 4000 cycles (natively;
# not under compute-sanitizer, which instruments every shared access: rt_sanitizer_dodge's kind). The dodge's
# predicate %p5 has a visible definition (always false) so that rule 5's register form sees it written.
# Aims past: every check at once (the input-store check, rules 1-8, the GPU gate, the sanitizer), by the text they
# judge: no search number changes, the exported product does (a kernel gate-verified on its card that runs code
# no check saw). Why a cheat: whatever the hidden instructions do; here a store into an input and a clock.
# Verdict by the gate rules: "x_scratch" input_mutated (a write into input x); "clock" nondeterministic
# (time_dependent); or, the same closing, an export of the code the gate judged.
_HIDDEN_SCRATCH = dict(globals_=_FILE, post=(
    "\t.loc 1 40 0 @%p2 st.global.u16 [%rd13], %rs3;\n\tbar.sync 0;\n"
    "\t.loc 1 41 0 @%p2 st.global.u16 [%rd13], %rs1;\n"))
_HIDDEN_CLOCK = dict(
    globals_=_FILE, barrier=dodge(),
    pre="\tsetp.ne.u32 %p5, %r3, %r3;\n\t.loc 1 9 0 mov.u64 %rd40, %clock64;\n",
    mid=("\t.loc 1 18 0 mov.u64 %rd41, %clock64; sub.s64 %rd42, %rd41, %rd40; setp.lt.s64 %p5, %rd42, 4000; "
         "mov.u64 %rd40, %rd41;\n"))
LOC_HIDDEN_SPELLINGS = {"x_scratch": _HIDDEN_SCRATCH, "clock": _HIDDEN_CLOCK}
LOC_HIDDEN_STORE = _HIDDEN_SCRATCH
# one change away, caught: the same instructions on lines of their own (input_mutated; time_dependent)
def _own_lines(text: str) -> str:
    """``text`` with each `.loc` directive's numbers dropped and every statement after it on a line of its own."""
    return re.sub(r"\t\.loc \d+ \d+ \d+ ", "\t", text).replace("; ", ";\n\t")


LOC_HIDDEN_SPELLINGS_CAUGHT = {k: {p: _own_lines(v) if p != "globals_" else v for p, v in parts.items()}
                               for k, parts in LOC_HIDDEN_SPELLINGS.items()}

# --- rt15_loc_phantom_init -----------------------------------------------------------------------------------
# What: the other direction of the same difference: code the analyses read and the exported cubin lacks. A `/*` at
# the end of a `.loc` line is, for the parser, part of the directive's text; for ptxas reading the text as written
# it opens a comment, which a `// */` line closes (for the parser, a line comment). Between them: thread 0's store
# of 0 into rt_shared_state's launch counter and a barrier. The counter (a `.shared` word, which keeps what the last
# CTA on the SM left there) is then loaded, its value plus one stored back by thread 0, and the row's closing
# barrier dropped past 4096. The gate compiles the canonical print, which holds the phantom store (the parser's
# view): an honest kernel, accepted and timed as one. The exported cubin, compiled from the stored text, has no
# store (byte for byte the caught twin's machine code, which rule 5 rejects).
# Aims past: race lint rule 5's `.shared` form, which needs a store into the variable on a path from the entry
# before the load, and the sanitizer replay (which runs the canonical print too).
# Why a cheat: rt_shared_state's (fifth round) in the shipped kernel: the count tells a long-running process from a
# fresh one. Verdict by the gate rules: nondeterministic (launch_state), or the export of the code the gate judged.
_COUNTER = ("\tld.shared.u32 %r20, [rt15_seen];\n\tsetp.gt.u32 %p5, %r20, 4096;\n\tbar.sync 0;\n"
            "\tsetp.eq.u32 %p6, %r3, 0;\n\tadd.u32 %r21, %r20, 1;\n\t@%p6 st.shared.u32 [rt15_seen], %r21;\n")
_PHANTOM = ("\t.loc 1 7 0 /*\n\tsetp.eq.u32 %p6, %r3, 0;\n\t@%p6 st.shared.u32 [rt15_seen], 0;\n\tbar.sync 0;\n"
            "\t// */\n")
LOC_PHANTOM_INIT = dict(globals_=_FILE, decls="\t.shared .align 4 .u32 rt15_seen;\n", barrier=dodge(),
                        pre=_PHANTOM + _COUNTER)
# one change away, caught: the phantom lines left out (the kernel ptxas compiles; rt_shared_state's own form)
LOC_PHANTOM_INIT_CAUGHT = dict(LOC_PHANTOM_INIT, pre=_COUNTER)

# --- rt15_bulk_copy_stale_shared -------------------------------------------------------------------------------
# What: rt_shared_state's counter read by the TMA unit instead of a load: thread 0 copies the 16-byte block holding
# it (rt15_seen, never stored before) into rt15_copy with `cp.async.bulk.shared::cluster.shared::cta` (a launch
# without clusters is a cluster of one CTA: the copy stays in the CTA's own shared memory), completing on an
# mbarrier; every thread waits in a pure retry loop, loads rt15_copy, and thread 0 stores the count plus one back
# into rt15_seen after a barrier. Past 4096 the row's closing barrier is dropped.
# Aims past: rule 5's `.shared` form: its reads are the register-loading ones (`ld`, `ldu`, `ldmatrix`, an `atom`
# result, a read-modify-write: ``race_lint._loads_registers``, ``_rmw``); a bulk copy is a store into its
# destination (rt15_copy is stored before its load) and its source is read by no instruction of the lists. The
# mbarrier is initialised before its use and waited on in a retry loop (rule 4's and rule 6's mbarrier forms).
# Why a cheat: as rt15_loc_phantom_init. Verdict by the gate rules: nondeterministic (launch_state).
_BULK_DECLS = ("\t.shared .align 16 .b8 rt15_seen[16];\n\t.shared .align 16 .b8 rt15_copy[16];\n"
               "\t.shared .align 8 .b64 rt15_mbar;\n")
_BULK_HEAD = ("\tsetp.eq.u32 %p6, %r3, 0;\n\t@%p6 mbarrier.init.shared::cta.b64 [rt15_mbar], 1;\n"
              "\tfence.mbarrier_init.release.cluster;\n\tbar.sync 0;\n")
_BULK_READ = ("\t@!%p6 bra $L_rt15_wait;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 %rd40, [rt15_mbar], 16;\n"
              "\tmov.u32 %r42, rt15_copy;\n\tmov.u32 %r43, rt15_seen;\n\tmov.u32 %r44, rt15_mbar;\n"
              "\tcp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%r42], [%r43], 16, [%r44];\n"
              "$L_rt15_wait:\n\tmov.u32 %r47, 0;\n$L_rt15_try:\n"
              "\tmbarrier.try_wait.parity.shared::cta.b64 %p7, [rt15_mbar], %r47;\n\t@!%p7 bra $L_rt15_try;\n"
              "\tld.shared.u32 %r20, [rt15_copy];\n")
_BULK_TAIL = ("\tsetp.gt.u32 %p5, %r20, 4096;\n\tadd.u32 %r21, %r20, 1;\n\tbar.sync 0;\n"
              "\t@%p6 st.shared.u32 [rt15_seen], %r21;\n")
BULK_COPY_STALE_SHARED = dict(decls=_BULK_DECLS, barrier=dodge(), pre=_BULK_HEAD + _BULK_READ + _BULK_TAIL)
# one change away, caught: the counter loaded by `ld.shared` (rt_shared_state's own form)
BULK_COPY_STALE_SHARED_CAUGHT = dict(BULK_COPY_STALE_SHARED,
                                     pre=_BULK_HEAD + "\tld.shared.u32 %r20, [rt15_seen];\n" + _BULK_TAIL)

# --- rt15_carry_state ----------------------------------------------------------------------------------------------
# What: rt14_register_state's launch state in the carry flag: `addc.u32 %r40, 0, 0` as the entry's first
# arithmetic, with no `add.cc` before it on any path, reads the carry-in (PTX ISA "Extended-Precision Integer
# Arithmetic Instructions": `addc` adds CC.CF). ptxas 13.0 compiles the carry-in to a physical predicate register:
# the dodge's `@%p5 bra` becomes `@!P3 BAR.SYNC` with P3 written by no instruction of the kernel before it (its
# SASS through nvdisasm), so the barrier is kept or dropped by what the last warp on this hardware slot left in
# P3 -- another kernel's (the refill, the flush, the checker between two timed launches) or this kernel's.
# Aims past: rule 5's register form (a read of a register, source or guard, that no path writes before it): the
# carry is an operand no instruction names; the input-store check models it (``input_stores.CARRY``) for the
# roots it carries, the race lint does not for definitions.
# Why a cheat: a value neither the inputs nor the launch give the kernel, kept by the hardware across launches:
# rule 5's register form's own kind (``rt14_register_state``), one bit wide. Verdict by the gate rules:
# nondeterministic (launch_state).
CARRY_STATE = dict(barrier=dodge(), index=rt12.INDEX + "\taddc.u32 %r40, 0, 0;\n",
                   pre="\tsetp.ne.u32 %p5, %r40, 0;\n")
# one change away, caught: the same bit read from a register no path writes (rt14_register_state's form)
CARRY_STATE_CAUGHT = dict(CARRY_STATE, index=rt12.INDEX + "\tand.b32 %r40, %r41, 1;\n")

# --- rt15_param_overread -----------------------------------------------------------------------------------------
# What: the dodge keyed on the parameter space past the ABI's parameters: the six parameters take bytes 0-35
# (x, w, y at 0, 8, 16; M, N, eps at 24, 28, 32), and `ld.param.u32 [rmsnorm_param_5+4]` / `+8` read bytes 36-43.
# ptxas accepts it and compiles constant-bank loads past the launch's arguments (`c[0x0][0x234]`, `c[0x0][0x238]`: the
# parameters start at 0x210 on sm_90). What is there is not the launch's: neither the ABI nor the CUDA driver API
# says (it may hold another launch's arguments, of a kernel with a longer parameter list, or nothing); not
# measured here. The barrier is dropped where the two words are not equal.
# Aims past: rule 3 (an allow-list of the special registers the launch and the ABI fix, since version 16, after
# ``rt14_envreg_dodge``): this value is no special register; the input-store check resolves `ld.param` by byte
# offset but judges only writes; the ABI check compares the declared parameters.
# Why a cheat: a result that depends on anything but the inputs and the launch is what rule 3 exists to reject
# (rt14_envreg_dodge's kind: a driver-defined value the ABI does not give the kernel). Verdict by the gate rules:
# nondeterministic (time_dependent), or a launch_error at the ABI step (a read of a parameter the ABI does not
# have); either way rejected before any GPU time.
PARAM_OVERREAD = dict(barrier=dodge(), pre=(
    "\tld.param.u32 %r20, [rmsnorm_param_5+4];\n\tld.param.u32 %r21, [rmsnorm_param_5+8];\n"
    "\tsetp.ne.u32 %p5, %r20, %r21;\n"))

# =============================================================================================== caught kinds

# --- rt15_vector_register_state ------------------------------------------------------------------------------------
# What: rt14_register_state's counter in a component of a vector register (`.reg .v2 .u32 %rv`, PTX ISA
# "Vectors": %rv.x, %rv.y): %rv.x is written, %rv.y read before any write and bumped. Aims past rule 5's register
# form by naming the register written (%rv) and the one read by the same base name. Caught: the form tells the
# components apart. Verdict: nondeterministic (launch_state).
VECTOR_REGISTER_STATE = dict(
    decls="\t.reg .v2 .u32 %rv;\n", barrier=dodge(),
    pre="\tmov.u32 %rv.x, 0;\n\tadd.u32 %r40, %rv.y, 1;\n\tmov.u32 %rv.y, %r40;\n\tsetp.gt.u32 %p5, %r40, 4096;\n",
    post="\tsetp.eq.u32 %p14, %rv.y, -1;\n\t@%p14 st.global.u16 [%rd14], %rs3;\n")

# --- rt15_const_state ----------------------------------------------------------------------------------------------
# What: rt_sanitizer_dodge RT_SENSE 2's launch counter in a `.const` variable, read and written through its
# generic address (`cvta.const`): constant memory is module memory like a `.global` variable's (it outlives the
# launch), and rule 5's `.global` form names `.global` variables. Caught by the input-store check: a `.const`
# variable is none of the module variables a kernel may write (`.global`/`.shared`/`.local`), so the store has no
# provenance. Verdict: input_mutated (by the check's wording; rule 5's kind).
CONST_STATE = dict(globals_=".const .align 4 .u32 rt15_count;\n", barrier=dodge(), pre=(
    "\tmov.u64 %rd20, rt15_count;\n\tcvta.const.u64 %rd21, %rd20;\n\tld.u32 %r20, [%rd21];\n\tadd.u32 %r21, %r20, 1;\n"
    "\tst.u32 [%rd21], %r21;\n\tsetp.gt.u32 %p5, %r20, 4096;\n"))

# --- rt15_function_global_state --------------------------------------------------------------------------------------
# What: the same counter in a `.global` variable declared inside the entry's body (ptxas accepts it and places it
# in module memory, as a module-scope one). Aims past rule 5 if it looked at module-scope declarations only.
# Caught: the rule collects the `.global` variables of every analysed function. Verdict: nondeterministic
# (launch_state).
FUNCTION_GLOBAL_STATE = dict(decls="\t.global .align 4 .u32 rt15_launches;\n", barrier=dodge(), pre=(
    "\tld.global.u32 %r20, [rt15_launches];\n\tadd.u32 %r21, %r20, 1;\n\tst.global.u32 [rt15_launches], %r21;\n"
    "\tsetp.gt.u32 %p5, %r20, 4096;\n"))

# =============================================================================================== honest controls

# --- rt15_honest_lineinfo --------------------------------------------------------------------------------------------
# What: the body as nvcc -lineinfo writes it: a `.file` table with timestamps and sizes, a `.debug_str` section,
# and `.loc` lines (one with `function_name` and `inlined_at`, an inlined helper's line) each on a line of its
# own before the instructions they describe. Honest; the gate rules accept it, and a fix for the two `.loc`
# holes must keep it (every nvcc -lineinfo kernel, tests/data/*.ptx among them, looks like this).
_LINEINFO_FILES = ('.file 1 "/src/rmsnorm.cu", 1764547200, 5123\n.file 2 "/src/reduce.cuh", 1764547200, 880\n'
                   ".section .debug_str\n{\n$L__info_string0:\n.b8 95,90,76,51,119,97,114,112,95,115,117,109,0\n}\n")
HONEST_LINEINFO = dict(globals_=_LINEINFO_FILES, replace=(
    ("\tld.param.u64 %rd1,", "\t.loc 1 14 0\n\tld.param.u64 %rd1,"),
    ("\tmul.f32 %f3, %f2, %f2;\n",
     "\t.loc 1 23 9\n\tmul.f32 %f3, %f2, %f2;\n\t.loc 2 7 12, function_name $L__info_string0, inlined_at 1 23 9\n"),
    ("\tbar.sync 0;\n\tld.shared.v4", "\t.loc 1 27 5\n\tbar.sync 0;\n\tld.shared.v4"),
    ("\tcvt.rn.bf16.f32 %rs3, %f26;\n", "\t.loc 1 31 12\n\tcvt.rn.bf16.f32 %rs3, %f26;\n"),
))

# --- rt15_honest_carry_address ---------------------------------------------------------------------------------------
# What: y's element address as a 64-bit add done in 32-bit halves through the carry, the PTX ISA's own
# extended-precision idiom (`mov.b64 {lo, hi}, y`; `add.cc.u32`; `addc.u32`; `mov.b64 addr, {lo, hi}`), in place
# of `add.s64 %rd14, %rd6, %rd12`. Every byte it stores is y[r, c], as before. Honest; the gate rules accept it
# (an address computed from y, pointer arithmetic by any spelling). A fix for rt15_carry_state must keep it: its
# `addc` reads the carry the `add.cc` before it wrote.
_CARRY_Y = ("\tmov.b64 {%r50, %r51}, %rd6;\n\tmov.b64 {%r52, %r53}, %rd12;\n\tadd.cc.u32 %r54, %r50, %r52;\n"
            "\taddc.u32 %r55, %r51, %r53;\n\tmov.b64 %rd14, {%r54, %r55};\n")
HONEST_CARRY_ADDRESS = dict(replace=((_Y_ADDRESS, _CARRY_Y),))

HOLES = {
    "rt15_loc_hidden_store": LOC_HIDDEN_STORE,
    "rt15_loc_phantom_init": LOC_PHANTOM_INIT,
    "rt15_bulk_copy_stale_shared": BULK_COPY_STALE_SHARED,
    "rt15_carry_state": CARRY_STATE,
    "rt15_param_overread": PARAM_OVERREAD,
}
# each hole one change away from a form the checks catch (the regression half of every hole)
HOLES_CAUGHT = {
    "rt15_loc_hidden_store": LOC_HIDDEN_SPELLINGS_CAUGHT["x_scratch"],
    "rt15_loc_phantom_init": LOC_PHANTOM_INIT_CAUGHT,
    "rt15_bulk_copy_stale_shared": BULK_COPY_STALE_SHARED_CAUGHT,
    "rt15_carry_state": CARRY_STATE_CAUGHT,
}
CAUGHT = {
    "rt15_vector_register_state": VECTOR_REGISTER_STATE,
    "rt15_const_state": CONST_STATE,
    "rt15_function_global_state": FUNCTION_GLOBAL_STATE,
}
CONTROLS = {
    "rt15_honest_lineinfo": HONEST_LINEINFO,
    "rt15_honest_carry_address": HONEST_CARRY_ADDRESS,
}


def ptx(parts: dict) -> str:
    """The PTX text of one of the dicts above: round 12's body with the parts spliced in, then each (old, new) of
    ``replace`` applied to the text (each ``old`` must occur)."""
    parts = dict(parts)
    replace = parts.pop("replace", ())
    text = rt12.ptx(**parts)
    for old, new in replace:
        assert old in text, old
        text = text.replace(old, new)
    return text


def build(parts: dict) -> Kernel:
    """The RMSNorm entry of one of the dicts above, launched as round 12's (block 256, two rows a CTA)."""
    return Kernel(parse_module(ptx(parts)), "rmsnorm", LAUNCH)
