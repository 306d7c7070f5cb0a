"""REWRITE async_copy: a row's 16-byte global loads become cp.async.cg copies into per-thread shared-memory
slots, reloaded after cp.async.wait_all at the point every path passes before the first use."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from evaluators.pipeline import prepare
from evolve.operators.async_copy import AsyncCopyOperator, candidate_groups, candidate_lines, plan
from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.registry import build_operators
from population.edit_script import parse_edit_script
from population.edits import EditApplyError, apply_script, rewrite_names
from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module
from targets.spec import get_gpu
from workloads.rmsnorm import RMSNorm

WL = RMSNorm()
NAIVE, TEMPLATE = WL.seeds()  # template at the default knobs: 256 threads, vec 8, 8 chunks kept in registers
FIRST = 202  # canonical line of the template's first kept-chunk load: ld.global.nc.v4.u32 {%r792, ...}, [%rd6]
OFFSETS = [0, 4096, 8192, 12288, 16384, 20480, 24576, 28672]


def flat(k: Kernel) -> list[str]:
    return [" ".join(ln.split()) for ln in k.ptx.splitlines() if ln.strip()]


def rewrite(k: Kernel, text: str) -> Kernel:
    return apply_script(k, parse_edit_script(text), operator="async_copy")


def test_template_chunks_become_async_copies_with_one_wait_before_the_first_use():
    parent = flat(TEMPLATE)
    assert parent[next(i for i, x in enumerate(parent) if x.startswith("ld.global.nc.v4.u32 {%r792"))] == \
        "ld.global.nc.v4.u32 {%r792, %r791, %r790, %r789}, [%rd6];"
    child = rewrite(TEMPLATE, f"REWRITE async_copy {FIRST}\n")
    lines = flat(child)
    copies = [x for x in lines if x.startswith("cp.async.cg")]
    assert copies == [f"cp.async.cg.shared.global [%ac_s0{f'+{o}' if o else ''}], [%rd6{f'+{o}' if o else ''}], 16;"
                      for o in OFFSETS]
    assert not any(x.startswith("ld.global.nc.v4.u32 {%r792") for x in lines)
    # the wait and the eight reloads sit right before the guard of the first kept-chunk use, after every copy
    w = lines.index("cp.async.wait_all;")
    assert lines.count("cp.async.wait_all;") == 1
    regs = ["%r792, %r791, %r790, %r789", "%r788, %r787, %r786, %r785", "%r784, %r783, %r782, %r781",
            "%r780, %r779, %r778, %r777", "%r776, %r775, %r774, %r773", "%r772, %r771, %r770, %r769",
            "%r768, %r767, %r766, %r765", "%r764, %r763, %r762, %r761"]
    assert lines[w + 1:w + 9] == [f"ld.shared.v4.u32 {{{r}}}, [%ac_s0{f'+{o}' if o else ''}];"
                                  for r, o in zip(regs, OFFSETS, strict=True)]
    assert lines[w + 9] == "@%p45 bra $L__BB0_27;"
    assert lines.index(copies[-1]) < w < lines.index("mov.b32 {%rs25, %rs26}, %r792;")
    # no CTA barrier is added (per-thread slots), and the slot is tid.x * 16 bytes into a 8 x 256 x 16 B buffer
    assert sum(x.startswith("bar.sync") for x in lines) == sum(x.startswith("bar.sync") for x in parent)
    assert ".shared .align 16 .b8 __async_copy_buf0[32768];" in lines
    setup = lines[lines.index(".shared .align 16 .b8 __async_copy_buf0[32768];") + 1:][:9]
    assert setup == ["mov.u32 %ac_t0, %tid.y;", "mov.u32 %ac_u0, %tid.z;", "or.b32 %ac_u0, %ac_u0, %ac_t0;",
                     "mov.u32 %ac_t0, %tid.x;", "setp.ne.u32 %ac_p0, %ac_u0, 0;",
                     "setp.ge.or.u32 %ac_p0, %ac_t0, 256, %ac_p0;", "@%ac_p0 trap;",
                     "mov.u32 %ac_s0, __async_copy_buf0;", "mad.lo.u32 %ac_s0, %ac_t0, 16, %ac_s0;"]
    assert child.edit_text == f"REWRITE async_copy {FIRST}\n"


def test_rewritten_template_passes_ptxas_and_the_static_gate_checks():
    for text, smem in ((f"REWRITE async_copy {FIRST}\n", 64 + 32768), (f"REWRITE async_copy {FIRST} count=2\n",
                                                                      64 + 8192)):
        child = rewrite(TEMPLATE, text)
        # prepare = ptxas, ABI, input-store check, race lint, launch rule, occupancy (raises Rejected otherwise)
        prep = prepare(child, WL, get_gpu("h200"), [(4096, 4096)], arch="sm_90")
        assert prep.resources.shared_static_bytes == smem
        assert sum(x.startswith("cp.async.cg") for x in flat(child)) == (8 if "count" not in text else 2)


def test_every_candidate_of_the_template_compiles():
    lines = candidate_lines(TEMPLATE)
    # the kept chunks, then groups of the other paths (the streaming loop's x, w's float4 pairs per chunk)
    assert lines[0] == FIRST and len(lines) == 15
    for ln in lines[::4]:
        prepare(rewrite(TEMPLATE, f"REWRITE async_copy {ln}\n"), WL, get_gpu("h200"), [(4096, 4096)], arch="sm_90")


def test_refuses_what_it_cannot_rewrite():
    # the naive seed loads 2-byte elements: nothing to copy
    with pytest.raises(NoProposal, match="no group of 2 or more 16-byte"):
        AsyncCopyOperator().propose(NAIVE, OperatorContext(workload=WL), np.random.default_rng(0))
    from population.printer import listing

    ld = next(n for n, li in enumerate(listing(NAIVE.module).lines, 1) if "ld.global.nc.u16" in li.text)
    with pytest.raises(EditApplyError, match=r"not an unpredicated 16-byte ld\.global"):
        rewrite(NAIVE, f"REWRITE async_copy {ld}\n")
    # 512 threads x 8 copies x 16 B = 64 KiB: beyond the 48 KiB a static .shared array may take on sm_90
    wide = replace(TEMPLATE, launch=replace(TEMPLATE.launch, block=(512, 1, 1)))
    with pytest.raises(EditApplyError, match=r"65536 B of shared memory.*49152 B per block"):
        rewrite(wide, f"REWRITE async_copy {FIRST}\n")
    assert len(plan(wide, FIRST, 5).copies) == 5  # 40 KiB + the kernel's 64 B fit
    with pytest.raises(EditApplyError, match="count=0"):
        rewrite(TEMPLATE, f"REWRITE async_copy {FIRST} count=0\n")
    with pytest.raises(EditApplyError, match="unknown parameter"):
        rewrite(TEMPLATE, f"REWRITE async_copy {FIRST} width=4\n")


LOOP = """.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1)
{{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<12>;
	.reg .b64 	%rd<6>;
	ld.param.u64 	%rd1, [k_param_0];
	ld.param.u64 	%rd2, [k_param_1];
	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	mov.u32 	%r9, 0;
$L__loop:
	ld.global.nc.v4.u32 	{{%r1, %r2, %r3, %r4}}, [%rd3];
	{between}
	add.s32 	%r5, %r1, %r2;
	add.s32 	%r9, %r9, 1;
	setp.lt.s32 	%p1, %r9, 4;
	{back}
	st.global.u32 	[%rd4], %r5;
	ret;
}}
"""


def loop_kernel(between: str = "", back: str = "") -> Kernel:
    return Kernel(module=parse_module(LOOP.format(between=between, back=back)), entry="k",
                  launch=LaunchConfig(block=(128, 1, 1)))


def test_control_flow_and_memory_conditions():
    from population.printer import listing

    def line(k: Kernel) -> int:
        return next(n for n, li in enumerate(listing(k.module).lines, 1) if "ld.global.nc.v4" in li.text)

    ok = loop_kernel()
    p = plan(ok, line(ok))
    assert [c.dests for c in p.copies] == [("%r1", "%r2", "%r3", "%r4")]
    assert p.use_site.line == line(ok) + 1  # add.s32 %r5, %r1, %r2: the first use
    from evaluators.toolchain import compile_ptx
    child = rewrite(ok, f"REWRITE async_copy {line(ok)}\n")
    assert compile_ptx(child, "sm_90").resources["k"].shared_static_bytes == 128 * 16
    # a store between the copy and the use: the wait would come after it
    st = loop_kernel(between="st.global.u32 \t[%rd4+4], %r9;")
    p2 = plan(st, line(st))
    assert p2.use_site.line == line(st) + 1  # the reload moves up to the store, before it
    # a second definition of a loaded register
    redef = loop_kernel(between="mov.u32 \t%r11, 0;\n\tmov.u32 \t%r3, 7;")
    with pytest.raises(ValueError, match="another definition"):
        plan(redef, line(redef))
    # the reload may sit on a loop's back branch: every path from the copy passes it before the next copy
    back = loop_kernel(back="@%p1 bra \t$L__loop;")
    assert plan(back, line(back)).use_site.line == line(back) + 1


TWO = """.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1, .param .u32 k_param_2)
{{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<16>;
	.reg .b64 	%rd<6>;
	ld.param.u64 	%rd1, [k_param_0];
	ld.param.u64 	%rd2, [k_param_1];
	ld.param.u32 	%r12, [k_param_2];
	setp.eq.s32 	%p1, %r12, 0;
	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
$L__top:
	ld.global.nc.v4.u32 	{{%r1, %r2, %r3, %r4}}, [%rd3];
	{jump}
	ld.global.nc.v4.u32 	{{%r5, %r6, %r7, %r8}}, [%rd3+16];
	add.s32 	%r10, %r1, %r5;
$L__out:
	add.s32 	%r11, %r1, %r10;
	st.global.u32 	[%rd4], %r11;
	ret;
}}
"""


@pytest.mark.parametrize("jump, why", [
    ("@%p1 bra \t$L__out;", "reads a loaded register on a path that skips the first use"),
    ("@%p1 bra \t$L__top;", "the load can run again before the first use"),
])
def test_refuses_when_a_path_skips_the_reload(jump, why):
    k = Kernel(module=parse_module(TWO.format(jump=jump)), entry="k", launch=LaunchConfig(block=(64, 1, 1)))
    with pytest.raises(EditApplyError, match=why):
        rewrite(k, "REWRITE async_copy 22\n")
    # the second load alone is fine: its only path reaches its use
    assert [c.site.line for c in plan(k, 24).copies] == [24]


def test_registered_as_operator_and_rewrite():
    assert "async_copy" in rewrite_names()
    (op,) = build_operators([{"name": "async_copy", "counts": [0, 2]}], WL)
    script = op.propose(TEMPLATE, OperatorContext(workload=WL), np.random.default_rng(3))
    (edit,) = script.edits
    assert edit.name == "async_copy" and edit.line in candidate_lines(TEMPLATE, dict(edit.args).get("count"))
    rewrite(TEMPLATE, script.to_text())
    with pytest.raises(ValueError, match="counts"):
        AsyncCopyOperator(counts=(-1,))
    # groups of the template: the 8 kept chunks, w's float4 pairs of the store phase, the streaming path's
    # triples, and lone loads (never proposed: a copy waited for at once gains nothing)
    groups = candidate_groups(TEMPLATE)
    assert groups[FIRST] == 8 and sorted(groups.values()).count(1) == 3 and max(groups.values()) == 8
    picks = [AsyncCopyOperator().propose(TEMPLATE, OperatorContext(workload=WL), np.random.default_rng(s)).edits[0].line
             for s in range(12)]
    assert all(groups[ln] >= 2 for ln in picks)
    assert FIRST in picks  # drawn with probability 8 / 33 (its copies over those of the groups of 2 or more)


def test_offered_to_the_llm_as_an_edit_kind():
    from evolve.llm.constrained import GrammarSpec, focused_edit_grammar
    from evolve.llm.prompts import FORMAT_HELP

    g = focused_edit_grammar(GrammarSpec(lines=(3, 4), instruction_lines=(4,), entries=("k",), kinds=("REWRITE",)))
    assert '"async_copy " rwln (" count=" [1-8])?' in g
    assert "REWRITE async_copy n count=8" in FORMAT_HELP
    script = parse_edit_script(f"REWRITE async_copy {FIRST} count=8\n")
    assert script.to_text() == f"REWRITE async_copy {FIRST} count=8\n"
    assert sum(x.startswith("cp.async.cg") for x in flat(rewrite(TEMPLATE, script.to_text()))) == 8
