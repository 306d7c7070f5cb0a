"""PTX as Triton, LLVM and hand writers spell it: ``.ptr`` parameter attributes, ``[handle, {coords}]`` addresses,
fused dotted words, ``v.x`` components, ``reg+imm`` operands, every literal form, octal offsets, and 1,000 nested
scopes. Each form parses (fast path and reference grammar alike), prints back byte-identical, and its canonical
print keeps its meaning: ptxas builds the same cubin from it as from the original file."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest

from evaluators.toolchain import compile_ptx
from population import ast
from population.analysis import memory_sites
from population.cfg import basic_blocks, flat_instructions, loop_depths
from population.defuse import declare_missing, def_use, scopes, undeclared_registers, used_registers
from population.edits import apply_script, copy_module, line_map, parse_edit_script
from population.errors import PTXSyntaxError
from population.kernel import Kernel
from population.parser import parse_module, parse_statements, reference_parse_module
from population.printer import listing, print_module, without_debug

CASES = Path(__file__).parent / "data" / "cases" / "ptx"
HEADER = ".version 8.0\n.target sm_90\n.address_size 64\n"


def check_round_trip(text: str) -> ast.Module:
    """Parse ``text`` both ways, print it back byte-identical, and check that ptxas builds the same cubin from
    the canonical print as from the text itself (a re-print that changed a value would change the code)."""
    m = parse_module(text)
    assert reference_parse_module(text) == m
    assert print_module(m) == text
    canonical = print_module(m, canonical=True)
    assert parse_module(canonical) == without_debug(m)
    arch = m.target[0]
    original, reprinted = compile_ptx(text, arch), compile_ptx(canonical, arch)
    assert reprinted.cubin == original.cubin
    assert {k: v.registers for k, v in reprinted.resources.items()} == \
        {k: v.registers for k, v in original.resources.items()}
    return m


def instructions(m: ast.Module, name: str = "k") -> list[ast.Instruction]:
    return flat_instructions(m.function(name))


# ------------------------------------------------------------------------------- the case files, kinds 1-4, 6


def test_case_files_are_all_covered() -> None:
    names = sorted(p.name for p in CASES.glob("*.ptx"))
    assert len(names) == 10
    for p in CASES.glob("*.ptx"):
        assert p.read_text().startswith("// Expected:")


def test_ptr_global_align_param_fail_01() -> None:
    m = check_round_trip((CASES / "fail_01_ptr_global_param.ptx").read_text())
    (p,) = m.function("k").params
    assert (p.type, p.name, p.align, p.state_space, p.attributes) == ("u64", "k_param_0", None, "param",
                                                                      ("ptr.global.align 16",))


@pytest.mark.parametrize("spelling, attribute", [
    (".param .u64 .ptr .global .align 16 p", "ptr.global.align 16"),
    (".param .u64 .ptr.global.align 16 p", "ptr.global.align 16"),
    (".param .u64 .ptr .align 8 p", "ptr.align 8"),
    (".param .u64 .ptr .shared p", "ptr.shared"),
    (".param.u64 .ptr.const .align 4 p", "ptr.const.align 4"),
])
def test_ptr_attribute_spellings(spelling: str, attribute: str) -> None:
    text = HEADER + f".visible .entry k({spelling})\n{{\n\tret;\n}}\n"
    m = parse_module(text)
    (p,) = m.function("k").params
    assert (p.type, p.align, p.attributes) == ("u64", None, (attribute,))
    assert print_module(m) == text
    assert parse_module(print_module(m, canonical=True)).function("k").params[0].attributes == (attribute,)


def test_texture_vector_address_fail_02() -> None:
    m = check_round_trip((CASES / "fail_02_tex_vector_address.ptx").read_text())
    tex = next(i for i in instructions(m) if i.opcode == "tex")
    addr = tex.operands[1]
    assert addr == ast.HandleAddress((ast.Symbol("t0"), ast.Vector((ast.Register("%f5"),))))
    assert addr.handle == ast.Symbol("t0") and addr.coordinates == ast.Vector((ast.Register("%f5"),))
    assert "%f5" in def_use(m.function("k")).uses


def test_fused_dotted_declarations_fail_04() -> None:
    m = check_round_trip((CASES / "fail_04_fused_dotted_decl.ptx").read_text())
    fn = m.function("k")
    assert (fn.params[0].type, fn.params[0].state_space) == ("u64", "param")
    decls = [s for s in fn.body if isinstance(s, ast.RegDecl)]
    assert [(d.type, d.vector, d.names) for d in decls] == [("u64", None, (("a", None),)), ("b16", "v2", (("h", None),))]
    st = instructions(m)[-2]
    assert st.operands == (ast.Address(ast.Register("a")), ast.Register("h"))


def test_vector_register_components_fail_05() -> None:
    m = check_round_trip((CASES / "fail_05_vector_reg_component.ptx").read_text())
    add = next(i for i in instructions(m) if i.opcode == "add")
    assert add.operands == (ast.Register("s"), ast.Register("v.x"), ast.Register("v.y"))


def test_float_literal_forms_fail_07() -> None:
    m = check_round_trip((CASES / "fail_07_float_literal_forms.ptx").read_text())
    movs = [i for i in instructions(m) if i.opcode == "mov"]
    assert [o.operands[1].value for o in movs] == [1000.0, 0.5]


def test_octal_address_offset_keeps_its_value_fail_11() -> None:
    text = (CASES / "fail_11_octal_address_offset.ptx").read_text()
    m = check_round_trip(text)
    ld = next(i for i in instructions(m) if i.opcode == "ld" and "global" in i.modifiers)
    assert ld.operands[1] == ast.Address(ast.Register("%rd2"), 8)
    assert "[%rd2+8]" in print_module(m, canonical=True)


def test_every_form_together_compiles_to_the_same_cubin() -> None:
    """Texture, surface and TMA addresses, reg+imm and var+imm operands, and every literal form in one kernel."""
    text = HEADER + """.global .texref t0;
.global .surfref s0;
.global .u32 arr[4];
.visible .entry k(
	.param .u64 .ptr .global .align 16 out,
	.param .align 64 .b8 tmap[128],
	.param .f32 x
)
{
	.reg .f32 %f<9>;
	.reg .b32 %r<9>;
	.reg .b64 %rd<9>;
	.shared .align 128 .b8 buf[1024];
	.shared .align 8 .b64 bar;
	ld.param.u64 %rd1, [out];
	ld.param.f32 %f5, [x];
	cvta.to.global.u64 %rd2, %rd1;
	tex.1d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [t0, {%f5}];
	tld4.r.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [t0, {%f5, %f5}];
	mov.u32 %r1, %tid.x;
	suld.b.1d.b32.trap {%r2}, [s0, {%r1}];
	sust.b.1d.b32.trap [s0, {%r1}], {%r2};
	mov.u64 %rd3, tmap;
	mov.u32 %r3, buf;
	mov.u32 %r4, bar;
	cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r3], [%rd3, {%r1, %r1}], [%r4];
	cp.async.bulk.tensor.1d.global.shared::cta.bulk_group [%rd3, {%r1}], [%r3];
	mov.u64 %rd4, arr+8;
	add.u64 %rd5, %rd4+4, 1;
	add.s64 %rd6, %rd2, %rd5;
	ld.global.u32 %r5, [%rd6+-4];
	ld.global.u32 %r6, [%rd2+0x10];
	ld.global.u32 %r7, [%rd2+010];
	add.u32 %r5, %r5, %r6;
	add.u32 %r5, %r5, %r7;
	add.u32 %r5, %r5, 010;
	add.u32 %r5, %r5, 0b101;
	add.u32 %r5, %r5, 0x10U;
	cvt.rn.f32.u32 %f6, %r5;
	add.f32 %f6, %f6, %f1;
	add.f32 %f6, %f6, 1e3;
	add.f32 %f6, %f6, .5;
	add.f32 %f6, %f6, 5.;
	add.f32 %f6, %f6, -.5e-2;
	add.f32 %f6, %f6, 0f3F800000;
	add.f32 %f6, %f6, 0F3f800000;
	st.global.f32 [%rd2], %f6;
	ret;
}
"""
    m = check_round_trip(text)
    ins = instructions(m)
    by_text = {print_module(m).splitlines()[i.loc.line - 1].strip(): i for i in ins}
    tma = by_text["cp.async.bulk.tensor.1d.global.shared::cta.bulk_group [%rd3, {%r1}], [%r3];"]
    assert tma.operands[0] == ast.HandleAddress((ast.Register("%rd3"), ast.Vector((ast.Register("%r1"),))))
    sust = by_text["sust.b.1d.b32.trap [s0, {%r1}], {%r2};"]
    assert sust.operands[0].handle == ast.Symbol("s0")
    assert by_text["mov.u64 %rd4, arr+8;"].operands[1] == ast.OffsetExpr(ast.Symbol("arr"), 8)
    assert by_text["add.u64 %rd5, %rd4+4, 1;"].operands[1] == ast.OffsetExpr(ast.Register("%rd4"), 4)
    assert by_text["ld.global.u32 %r7, [%rd2+010];"].operands[1].offset == 8
    assert by_text["ld.global.u32 %r6, [%rd2+0x10];"].operands[1].offset == 16
    # registers inside the new operand forms are uses (def-use, used registers)
    du = def_use(m.function("k"))
    assert {"%rd3", "%rd4", "%r1", "%r2"} <= set(du.uses)
    assert "%r2" in used_registers(m.function("k"))


def test_array_elements_as_operands() -> None:
    """PTX ISA "Arrays as Operands": ``arr[2]`` reads an element, ``mov.u64 r, arr[1]`` takes its address."""
    text = HEADER + """.global .u32 arr[4] = {1, 2, 3, 4};
.visible .entry k(.param .u64 p)
{
	.reg .b32 %r<4>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [p];
	ld.global.u32 %r1, arr[2];
	ld.global.u32 %r2, arr[010];
	mov.u64 %rd2, arr[1];
	cvta.to.global.u64 %rd3, %rd1;
	add.u32 %r1, %r1, %r2;
	st.global.u32 [%rd3], %r1;
	st.global.u64 [%rd3+8], %rd2;
	ret;
}
"""
    m = check_round_trip(text)
    ins = instructions(m)
    assert [i.operands[1] for i in ins[1:4]] == [ast.ArrayElement(ast.Symbol("arr"), 2),
                                                 ast.ArrayElement(ast.Symbol("arr"), 8),
                                                 ast.ArrayElement(ast.Symbol("arr"), 1)]
    assert [(s.kind, s.state_space, s.width_bytes) for s in memory_sites(m.function("k"))][1:3] == [
        ("load", "global", 4), ("load", "global", 4)]


def test_handle_address_in_the_independent_texture_mode() -> None:
    text = (".version 8.0\n.target sm_90, texmode_independent\n.address_size 64\n.global .texref t0;\n"
            ".global .samplerref smp;\n.visible .entry k(.param .u64 out, .param .f32 x)\n{\n\t.reg .f32 %f<6>;\n"
            "\t.reg .b64 %rd<3>;\n\tld.param.u64 %rd1, [out];\n\tld.param.f32 %f5, [x];\n"
            "\tcvta.to.global.u64 %rd2, %rd1;\n\ttex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [t0, smp, {%f5, %f5}];\n"
            "\tst.global.f32 [%rd2], %f1;\n\tret;\n}\n")
    m = check_round_trip(text)
    tex = next(i for i in instructions(m) if i.opcode == "tex")
    assert tex.operands[1].elements[:2] == (ast.Symbol("t0"), ast.Symbol("smp"))


@pytest.mark.parametrize("literal, value", [
    ("010", 8), ("-010", -8), ("0", 0), ("7", 7), ("0x10U", 16), ("0X1f", 31), ("0b101", 5), ("0B11U", 3),
    ("1e3", 1000.0), (".5", 0.5), ("5.", 5.0), ("-.5e-2", -0.005), ("1.5E+2", 150.0),
    ("0f3F800000", 1.0), ("0F3f800000", 1.0), ("0fFFC00001", None), ("0d3FF0000000000000", 1.0),
])
def test_literals_print_back_to_the_same_value(literal: str, value: float | None) -> None:
    """Every literal form keeps its spelling, so its value (hex floats: their exact bits, NaN payloads
    included) survives faithful and canonical prints and edits."""
    line = f"mov.b32 %r1, {literal};" if not literal.lower().startswith("0d") else f"mov.b64 %rd1, {literal};"
    text = HEADER + f".visible .entry k()\n{{\n\t.reg .b32 %r<2>;\n\t.reg .b64 %rd<2>;\n\t{line}\n\tret;\n}}\n"
    m = parse_module(text)
    imm = instructions(m)[0].operands[1]
    assert imm == ast.Immediate(literal)
    if value is not None:
        assert imm.value == value
    for printed in (print_module(m), print_module(m, canonical=True)):
        assert instructions(parse_module(printed))[0].operands[1].text == literal
    (stmt,) = parse_statements("\t" + line, registers={"%r1"})
    assert stmt.operands[1] == imm


def test_octal_integers_in_declarations_and_directives() -> None:
    """ptxas reads ``[010]``, ``%r<010>``, ``.align 010`` and ``.maxntid 0100`` as octal too (8 bytes, 8 registers,
    8, 64 threads): the canonical print spells the same values in decimal."""
    text = HEADER + (".global .align 010 .b8 g[010];\n.visible .entry k(.param .u64 p)\n.maxntid 0100, 1, 1\n{\n"
                     "\t.reg .b32 %r<010>;\n\t.reg .b64 %rd<3>;\n\tld.param.u64 %rd1, [p];\n\tmov.u32 %r7, %ntid.x;\n"
                     "\tst.global.u32 [%rd1], %r7;\n\tret;\n}\n")
    m = check_round_trip(text)
    g = m.items[0]
    assert (g.align, g.dims) == (8, (8,))
    fn = m.function("k")
    assert fn.directives[0].values == (64, 1, 1) and fn.body[0].names == (("%r", 8),)
    assert compile_ptx(text, "sm_90").gmem_bytes == 8
    with pytest.raises(PTXSyntaxError, match="09 is not an octal number"):
        parse_module(text.replace("g[010]", "g[09]"))


def test_octal_offset_from_parse_statements_and_edits() -> None:
    (ld,) = parse_statements("ld.global.u32 %r1, [%rd2+010];")
    assert ld.operands[1] == ast.Address(ast.Register("%rd2"), 8)
    text = (CASES / "fail_11_octal_address_offset.ptx").read_text()
    k = Kernel(parse_module(text), "k")
    lst = listing(k.module)
    ln = next(li.lineno for li in lst.lines if li.text.strip().startswith("st.global"))
    child = apply_script(k, parse_edit_script(f"INSERT AFTER {ln}\n\tld.global.u32 %r1, [%rd2+010];\nEND\n"),
                         operator="test")
    assert print_module(child.module, canonical=True).count("[%rd2+8]") == 2


def test_empty_return_parameter_list() -> None:
    """``.func () f ()`` (ZLUDA's tests; ptxas accepts an empty return list) keeps its empty list."""
    text = HEADER + ".func () f ()\n{\n\t.reg.u64 t;\n\tmov.u64 t, 1234567890U;\n\tret;\n}\n"
    m = parse_module(text)
    assert m.function("f").return_params == [] and print_module(m) == text
    assert "func () f()" in print_module(m, canonical=True)
    assert compile_ptx(print_module(m, canonical=True), "sm_90").resources == {}


# ----------------------------------------------------------------------------------- kind 9: deep nesting


def deep_module(depth: int) -> str:
    """A kernel whose store sits inside ``depth`` nested ``{ }`` scopes, every other one declaring a register."""
    opens = "".join(f"\t{{\n\t.reg .b32 t{i};\n" if i % 2 == 0 else "\t{\n" for i in range(depth))
    return (HEADER + ".visible .entry k(.param .u64 p)\n{\n\t.reg .b64 %rd<3>;\n\t.reg .b32 %r<2>;\n"
            "\tld.param.u64 %rd1, [p];\n" + opens + "\tmov.u32 %r1, 7;\n\tcvta.to.global.u64 %rd2, %rd1;\n"
            "\tst.global.u32 [%rd2], %r1;\n" + "\t}\n" * depth + "\tret;\n}\n")


def test_thousand_nested_scopes_without_recursion_error() -> None:
    text = deep_module(1000)
    m = check_round_trip(text)
    fn = m.function("k")
    assert len(scopes(fn)) == 1000
    assert [i.opcode for i in flat_instructions(fn)] == ["ld", "mov", "cvta", "st", "ret"]
    assert len(basic_blocks(fn)) == 1 and loop_depths(fn) == {0: 0}
    assert undeclared_registers(fn) == set() and declare_missing(fn) == []
    assert [s.kind for s in memory_sites(fn)] == ["load", "store"]
    assert pickle.loads(pickle.dumps(m)) == m
    assert copy.deepcopy(m) == m and copy_module(m) == m
    assert repr(m).count("Scope(") == 1000
    lst = listing(m)
    assert len(line_map(m).opens) == 1001
    k = Kernel(m, "k")
    ln = next(li.lineno for li in lst.lines if li.text.strip().startswith("mov.u32"))
    child = apply_script(k, parse_edit_script(f"REPLACE {ln}\n\tmov.u32 %r1, 9;\nEND\n"), operator="test")
    assert "mov.u32 \t%r1, 9;" in print_module(child.module)
    assert child.identity != k.identity
    stmts = parse_statements("{\n" * 1000 + "ret;\n" + "}\n" * 1000)
    assert len(stmts) == 1 and print_module(m).count("{") == 1001


def test_nested_scope_equality_and_copy_see_every_level() -> None:
    a = parse_module(deep_module(50))
    b = parse_module(deep_module(50).replace("mov.u32 %r1, 7;", "mov.u32 %r1, 8;"))
    assert a != b
    c = copy.deepcopy(a)
    assert c == a and flat_instructions(c.function("k"))[1] is not flat_instructions(a.function("k"))[1]
