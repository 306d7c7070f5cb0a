"""Structural rewrites for bandwidth-bound kernels: load/store vectorisation and load hoisting, as operators and
as the named REWRITE edits every edit script (and the LLM operator) can use."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evaluators.toolchain import compile_ptx
from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.common import entry_sites
from evolve.operators.hoist import HoistLoadsOperator, hoist_edit
from evolve.operators.registry import build_operators
from evolve.operators.schedule import blocks
from evolve.operators.vectorize import find_runs
from population.edit_script import Rewrite, parse_edit_script
from population.edits import EditApplyError, EditScript, apply_script, rewrite_names
from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module

DATA = Path(__file__).parent / "data" / "vectorize_f32.ptx"


def kernel(text: str | None = None) -> Kernel:
    return Kernel(module=parse_module(text or DATA.read_text()), entry="scale4", launch=LaunchConfig(block=(32, 1, 1)))


def body_lines(k: Kernel) -> list[str]:
    return [ln.strip() for ln in k.ptx.splitlines() if ln.strip().startswith(("ld.", "st.", "mul.", "fma."))]


def line_of(k: Kernel, text: str) -> int:
    """The canonical listing line (what edit scripts refer to) of the statement printed as ``text``."""
    from population.ast import Instruction
    from population.printer import print_statement

    return next(s.line for s in entry_sites(k)
                if isinstance(s.node, Instruction) and " ".join(print_statement(s.node).split()) == text)


def runs_of(k: Kernel) -> list[list[tuple[str, int, str]]]:
    out = []
    for block in blocks(entry_sites(k)):
        out += [[(a.opcode, a.offset, a.data.name) for a in r] for r in find_runs([s.node for s in block])]
    return out


def test_finds_aligned_adjacent_runs_only():
    assert runs_of(kernel()) == [
        [("ld", 0, "%f1"), ("ld", 4, "%f2"), ("ld", 8, "%f3"), ("ld", 12, "%f4")],
        [("st", 16, "%f9"), ("st", 20, "%f6"), ("st", 24, "%f7"), ("st", 28, "%f8")],
        [("ld", 16, "%rs1"), ("ld", 18, "%rs2")],
    ]  # the u16 stores at +32/+34 and the f32 loads at +0/+4 of %rd5 have memory accesses between them


def test_misaligned_start_falls_back_to_pairs():
    text = DATA.read_text()
    for reg, old, new in (("%f1", "[%rd4]", "[%rd4+8]"), ("%f2", "[%rd4+4]", "[%rd4+12]"),
                          ("%f3", "[%rd4+8]", "[%rd4+16]"), ("%f4", "[%rd4+12]", "[%rd4+20]")):
        text = text.replace(f"{reg}, {old};", f"{reg}, {new};")
    got = [r for r in runs_of(kernel(text)) if r[0][2].startswith("%f") and r[0][0] == "ld"]
    # offsets 8, 12, 16, 20: no 16-byte-aligned group of four, two 8-byte-aligned pairs
    assert got == [[("ld", 8, "%f1"), ("ld", 12, "%f2")], [("ld", 16, "%f3"), ("ld", 20, "%f4")]]


def test_rewrite_vectorize_applies_and_compiles():
    k = kernel()
    st_line = line_of(k, "st.global.f32 [%rd5+16], %f9;")
    child = apply_script(k, parse_edit_script(f"REWRITE vectorize {st_line} width=4\n"), operator="vectorize")
    lines = body_lines(child)
    assert "st.global.v4.f32 [%rd5+16], {%f9, %f6, %f7, %f8};" in [" ".join(x.split()) for x in lines]
    assert not any("[%rd5+20]" in x or "[%rd5+24]" in x for x in lines)
    # the vector store sits where the last scalar store was: after every multiply that feeds it
    joined = [" ".join(x.split()) for x in lines]
    assert joined.index("st.global.v4.f32 [%rd5+16], {%f9, %f6, %f7, %f8};") > joined.index("mul.f32 %f8, %f4, 0f40000000;")
    assert child.edit_text == f"REWRITE vectorize {st_line} width=4\n"
    ld_line = line_of(k, "ld.global.nc.f32 %f1, [%rd4];")
    loads = apply_script(k, parse_edit_script(f"REWRITE vectorize {ld_line}\n"), operator="vectorize")
    assert "ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd4];" in [" ".join(x.split()) for x in body_lines(loads)]
    before = sum(x.startswith("ld.global") for x in body_lines(k))
    assert sum(x.startswith("ld.global") for x in body_lines(loads)) == before - 3
    for c in (child, loads):
        assert compile_ptx(c, "sm_90").resources["scale4"].registers > 0


def test_rewrite_errors_name_the_edit():
    k = kernel()
    mul = line_of(k, "mul.f32 %f9, %f1, 0f40000000;")
    with pytest.raises(EditApplyError, match=f"no combinable run .* line {mul}"):
        apply_script(k, parse_edit_script(f"REWRITE vectorize {mul}\n"), operator="x")
    with pytest.raises(EditApplyError, match="unknown rewrite 'unroll_all'"):
        apply_script(k, EditScript((Rewrite("unroll_all", 3),)), operator="x")
    with pytest.raises(EditApplyError, match="width=3"):
        apply_script(k, parse_edit_script(f"REWRITE vectorize {line_of(k, 'ld.global.nc.f32 %f1, [%rd4];')} width=3\n"),
                     operator="x")
    assert {"vectorize", "hoist_loads"} <= set(rewrite_names())
    assert parse_edit_script("REWRITE hoist_loads 7\n").to_text() == "REWRITE hoist_loads 7\n"


HOIST = """.version 8.0
.target sm_90
.address_size 64
.visible .entry scale4(.param .u64 scale4_param_0, .param .u64 scale4_param_1, .param .u64 scale4_param_2)
{
	.reg .f32 	%f<9>;
	.reg .b64 	%rd<4>;
	ld.param.u64 	%rd1, [scale4_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	ld.global.nc.f32 	%f1, [%rd2];
	fma.rn.f32 	%f5, %f1, %f1, 0f00000000;
	ld.global.nc.f32 	%f2, [%rd2+512];
	fma.rn.f32 	%f6, %f2, %f2, %f5;
	ld.global.nc.f32 	%f3, [%rd2+1024];
	fma.rn.f32 	%f7, %f3, %f3, %f6;
	st.global.f32 	[%rd2+4], %f7;
	ld.global.nc.f32 	%f4, [%rd2+1536];
	fma.rn.f32 	%f8, %f4, %f4, %f7;
	st.global.f32 	[%rd2], %f8;
	ret;
}
"""


def test_hoist_loads_issues_loads_before_the_reduction():
    k = kernel(HOIST)
    ops = [" ".join(x.split()) for x in body_lines(apply_script(
        k, EditScript(HoistLoadsOperator().propose(k, OperatorContext(workload=None), np.random.default_rng(0)).edits),
        operator="hoist"))]
    first_fma = next(i for i, x in enumerate(ops) if x.startswith("fma"))
    assert [x.split()[1] for x in ops[:first_fma] if x.startswith("ld.global")] == ["%f1,", "%f2,", "%f3,"]
    # a load never passes a store to the same state space (it may alias): the %f4 load stays after it
    st = ops.index("st.global.f32 [%rd2+4], %f7;")
    assert ops.index("ld.global.nc.f32 %f4, [%rd2+1536];") > st
    child = apply_script(k, parse_edit_script(f"REWRITE hoist_loads {line_of(k, 'fma.rn.f32 %f6, %f2, %f2, %f5;')}\n"), operator="hoist")
    assert compile_ptx(child, "sm_90").resources["scale4"].registers > 0
    with pytest.raises(ValueError, match="not inside"):
        hoist_edit(k, 1)


def test_operators_are_registered_and_refuse_kernels_without_sites():
    ops = build_operators([{"name": "vectorize"}, {"name": "hoist"}], None)
    plain = kernel(HOIST.replace("[%rd2+512]", "[%rd2+4096]"))
    with pytest.raises(NoProposal):
        ops[0].propose(plain, OperatorContext(workload=None), np.random.default_rng(0))
    assert ops[0].propose(kernel(), OperatorContext(workload=None), np.random.default_rng(1)).edits[0].name == "vectorize"
