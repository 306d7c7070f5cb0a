"""The printer: nvcc's layout for nodes built by code, fallback from a stale source spelling after an edit,
print_statement, canonical prints and Kernel identity, and the listing's line map."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from population import ast
from population.kernel import Kernel
from population.parser import parse_module, parse_statements
from population.printer import listing, operand_text, print_module, print_statement

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = ROOT / "tests" / "data" / "reduce_shfl.ptx"

R = ast.Register


def test_instruction_nvcc_layout() -> None:
    i = ast.Instruction("ld", ("global", "nc", "f32"), (R("%f1"), ast.Address(R("%rd6"))))
    assert print_statement(i) == "ld.global.nc.f32 \t%f1, [%rd6];"
    bra = ast.Instruction("bra", ("uni",), (ast.Symbol("$L__BB0_2"),), ast.Predicate(R("%p1"), negated=True))
    assert print_statement(bra) == "@!%p1 bra.uni \t$L__BB0_2;"
    assert print_statement(ast.Instruction("ret")) == "ret;"


@pytest.mark.parametrize(
    ("op", "text"),
    [(ast.Address(ast.Symbol("coeffs"), 28), "[coeffs+28]"), (ast.Address(R("%rd1"), -8), "[%rd1+-8]"),
     (ast.Address(R("%rd1"), 0), "[%rd1+0]"), (ast.Vector((R("%f1"), ast.Sink())), "{%f1, _}"),
     (ast.ParenList((ast.Symbol("param0"), ast.Symbol("param1"))), "(param0, param1)"),
     (ast.PredicatePair(R("%r2"), R("%p1")), "%r2|%p1"), (ast.Negated(R("%p3")), "!%p3"),
     (ast.SpecialRegister("%ctaid.x"), "%ctaid.x"), (ast.Immediate("0f3F800000"), "0f3F800000")],
)
def test_operand_text(op: ast.Operand, text: str) -> None:
    assert operand_text(op) == text


def test_declarations_layout() -> None:
    assert print_statement(ast.RegDecl("pred", (("%p", 5),))) == ".reg .pred \t%p<5>;"
    assert print_statement(ast.RegDecl("f32", (("%v", 2),), vector="v4")) == ".reg .v4 .f32 \t%v<2>;"
    v = ast.VarDecl("shared", "b8", "smem", align=16, dims=(1024,))
    assert print_statement(v) == ".shared .align 16 .b8 smem[1024];"
    ext = ast.VarDecl("shared", "b8", "buf", align=16, dims=(None,), linkage=("extern",))
    assert print_statement(ext) == ".extern .shared .align 16 .b8 buf[];"
    c = ast.VarDecl("const", "b8", "k", align=4, dims=(4,), initializer="{0, 0, 128, 63}")
    assert print_statement(c) == ".const .align 4 .b8 k[4] = {0, 0, 128, 63};"
    assert print_statement(ast.Directive("pragma", '"nounroll"')) == '.pragma "nounroll";'
    assert print_statement(ast.Directive("loc", "1 4 3")) == ".loc\t1 4 3"
    assert print_statement(ast.Label("$L__BB0_2")) == "$L__BB0_2:"


def test_scope_statement_prints_on_lines() -> None:
    s = ast.Scope([ast.RegDecl("pred", (("p", None),)), ast.Instruction("setp", ("ne", "b32"), (R("p"), R("%r1"), ast.Immediate("0")))])
    assert print_statement(s) == "{\n\t.reg .pred \tp;\n\tsetp.ne.b32 \tp, %r1, 0;\n}"
    assert parse_statements(print_statement(s)) == [s]


def test_built_module_round_trips() -> None:
    fn = ast.Function(
        "entry", "k", params=[ast.Param("u64", "k_param_0"), ast.Param("u32", "k_param_1")], linkage=("visible",),
        directives=[ast.PerfDirective("maxntid", (256, 1, 1))],
        body=[
            ast.RegDecl("b64", (("%rd", 3),)),
            ast.Instruction("ld", ("param", "u64"), (R("%rd1"), ast.Address(ast.Symbol("k_param_0")))),
            ast.Label("$L__BB0_1"),
            ast.Instruction("ret"),
        ],
    )
    m = ast.Module("9.0", ("sm_90",), 64, [ast.VarDecl("global", "u32", "counter", align=4), fn])
    text = print_module(m)
    assert text == (
        ".version 9.0\n.target sm_90\n.address_size 64\n\n.global .align 4 .u32 counter;\n\n"
        ".visible .entry k(\n\t.param .u64 k_param_0,\n\t.param .u32 k_param_1\n)\n.maxntid 256, 1, 1\n{\n"
        "\t.reg .b64 \t%rd<3>;\n\tld.param.u64 \t%rd1, [k_param_0];\n\n$L__BB0_1:\n\tret;\n}\n"
    )
    assert text == print_module(m, canonical=True)
    assert parse_module(text) == m


def test_edited_node_falls_back_to_nvcc_layout_and_keeps_trivia() -> None:
    text = SOFTMAX.read_text()
    m = parse_module(text)
    fn = m.entries[0]
    k = next(i for i, s in enumerate(fn.body) if isinstance(s, ast.Instruction) and s.opcode == "and")
    old = fn.body[k]
    assert "and.b32  \t" in old.layout[1]  # nvcc's own double space
    fn.body[k] = dataclasses.replace(old, modifiers=("b64",))
    out = print_module(m)
    assert old.trivia + "and.b64 \t" in out
    assert out.replace("and.b64 \t", "and.b32  \t", 1) == text
    # in-place mutation of a field is detected too
    fn.body[k] = old
    old.operands = (*old.operands[:2], ast.Immediate("15"))
    assert print_module(m) != text and ", 15;" in print_module(m)


def test_inserted_statements_get_default_indent() -> None:
    m = parse_module(SOFTMAX.read_text())
    fn = m.entries[0]
    fn.body[5:5] = parse_statements("membar.gl;\nbar.sync 0;")
    out = print_module(m)
    assert "\n\tmembar.gl;\n\tbar.sync \t0;\n" in out
    assert parse_module(out) == m


def test_function_header_edit_prints_default_header() -> None:
    text = SOFTMAX.read_text()
    m = parse_module(text)
    fn = m.entries[0]
    fn.directives.append(ast.PerfDirective("maxnreg", (64,)))
    out = print_module(m)
    assert ".maxnreg 64\n{" in out
    assert parse_module(out).entries[0].directives == [ast.PerfDirective("maxnreg", (64,))]


def test_identity_ignores_trivia_and_debug_info() -> None:
    text = SOFTMAX.read_text()
    a = Kernel(parse_module(text), "block_sum")
    stripped = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith((".loc", "//")))
    b = Kernel(parse_module(stripped.replace("\t", "    ")), "block_sum")
    assert a.identity == b.identity
    assert a.ptx == text and b.ptx != text
    m = parse_module(text)
    m.entries[0].body.insert(3, ast.Instruction("membar", ("gl",)))
    assert Kernel(m, "block_sum").identity != a.identity


# ---------------------------------------------------------------------------------------------- listing


def test_listing_maps_lines_to_nodes() -> None:
    m = parse_module(SOFTMAX.read_text())
    lst = listing(m)
    assert lst.text == print_module(m, canonical=True)
    assert [li.lineno for li in lst.lines] == list(range(1, len(lst.text.splitlines()) + 1))
    for li in lst.lines:
        assert li.text == lst.text.splitlines()[li.lineno - 1]
        if li.node is not None and li.body is not None:
            assert li.body[li.index] is li.node
    fn = m.function("block_sum")
    header = next(li for li in lst.lines if li.node is fn)
    assert header.text == ".visible .entry block_sum(" and header.body is m.items
    params = [li for li in lst.lines if isinstance(li.node, ast.Param) and li.function == "block_sum"]
    assert [li.node for li in params] == fn.params and params[0].lineno == header.lineno + 1
    instrs = [li for li in lst.lines if isinstance(li.node, ast.Instruction) and li.function == "block_sum"]
    assert instrs[0].text == "\t" + print_statement(instrs[0].node)
    labels = [li for li in lst.lines if isinstance(li.node, ast.Label)]
    assert labels and all(not li.text.startswith("\t") for li in labels)
    closing = [li for li in lst.lines if li.text == "}"]
    assert all(li.node is None for li in closing)


def test_listing_scope_lines() -> None:
    m = parse_module((ROOT / "tests" / "data" / "calls_printf.ptx").read_text())
    lst = listing(m)
    opens = [li for li in lst.lines if isinstance(li.node, ast.Scope)]
    assert opens and all(li.text == "\t{" for li in opens)
    inner = lst.lines[opens[0].lineno]  # the first statement inside the first scope
    assert inner.body is opens[0].node.body and inner.index == 0


def test_numbered() -> None:
    m = parse_module(SOFTMAX.read_text())
    lst = listing(m)
    out = lst.numbered(2, 3)
    assert out == "   2| .target sm_90\n   3| .address_size 64"
    assert lst.numbered().count("\n") == len(lst.lines) - 1
    assert lst.line(1).text == ".version 9.0"
    with pytest.raises(IndexError, match="outside the listing"):
        lst.line(len(lst.lines) + 1)


def test_pickle_and_deepcopy_keep_the_exact_print() -> None:
    import copy
    import pickle

    text = (ROOT / "tests" / "data" / "calls_printf.ptx").read_text()
    m = parse_module(text)
    for clone in (pickle.loads(pickle.dumps(m)), copy.deepcopy(m)):
        assert clone == m and print_module(clone) == text
