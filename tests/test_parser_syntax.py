"""The grammar's forms, one at a time: header, functions, declarations, operands, scopes, directives, register
resolution, parse_statements, and malformed input (PTXSyntaxError with file, line, column)."""

from __future__ import annotations

import pickle

import pytest

from population import ast
from population.errors import PTXSyntaxError
from population.parser import parse_module, parse_statements
from population.printer import print_module

HEADER = ".version 9.0\n.target sm_90\n.address_size 64\n"


def entry(body: str, params: str = "\t.param .u64 p0") -> str:
    return HEADER + f"\n.visible .entry k(\n{params}\n)\n{{\n{body}\n}}\n"


def body_of(text: str) -> list:
    return parse_module(text).function("k").body


def only_instruction(line: str, decls: str = "") -> ast.Instruction:
    stmts = [s for s in body_of(entry(decls + "\n\t" + line)) if isinstance(s, ast.Instruction)]
    assert len(stmts) == 1
    return stmts[0]


# ------------------------------------------------------------------------------------------------ header


def test_header_fields() -> None:
    m = parse_module(".version 8.5\n.target sm_90a, debug\n.address_size 64\n")
    assert (m.version, m.target, m.address_size, m.items) == ("8.5", ("sm_90a", "debug"), 64, [])


def test_address_size_optional_and_round_trips() -> None:
    text = ".version 9.0\n.target sm_80\n"
    m = parse_module(text)
    assert m.address_size == 64
    assert print_module(m) == text


# --------------------------------------------------------------------------------------------- functions


def test_entry_params_and_perf_directives() -> None:
    text = HEADER + (
        ".visible .entry k(\n\t.param .u64 .ptr.global.align 16 k_p0,\n\t.param .align 8 .b8 k_p1[16],\n"
        "\t.param .u32 k_p2\n)\n.maxntid 256, 1, 1\n.minnctapersm 2\n.maxnreg 64\n{\n\tret;\n}\n"
    )
    fn = parse_module(text).function("k")
    assert fn.kind == "entry" and fn.is_entry and fn.linkage == ("visible",)
    p0, p1, p2 = fn.params
    assert (p0.type, p0.name, p0.align, p0.attributes) == ("u64", "k_p0", None, ("ptr.global.align 16",))
    assert (p1.type, p1.align, p1.dims) == ("b8", 8, (16,))
    assert (p2.type, p2.state_space) == ("u32", "param")
    assert [(d.name, d.values) for d in fn.directives] == [("maxntid", (256, 1, 1)), ("minnctapersm", (2,)),
                                                         ("maxnreg", (64,))]
    assert print_module(parse_module(text)) == text


def test_cluster_directives() -> None:
    text = HEADER + ".visible .entry k()\n.explicitcluster\n.reqnctapercluster 2, 1, 1\n.maxclusterrank 8\n{\n\tret;\n}\n"
    fn = parse_module(text).function("k")
    assert [(d.name, d.values) for d in fn.directives] == [("explicitcluster", ()), ("reqnctapercluster", (2, 1, 1)),
                                                         ("maxclusterrank", (8,))]
    assert fn.params == []


def test_func_with_return_param_and_extern_declaration() -> None:
    text = HEADER + (
        ".extern .func  (.param .b32 func_retval0) vprintf\n(\n\t.param .b64 vprintf_param_0\n)\n;\n"
        ".func  (.param .b32 r) f(\n\t.param .b32 a\n)\n{\n\tret;\n}\n"
    )
    m = parse_module(text)
    decl, f = m.functions
    assert decl.body is None and decl.linkage == ("extern",) and decl.return_params[0].name == "func_retval0"
    assert f.kind == "func" and f.return_params[0].type == "b32" and [p.name for p in f.params] == ["a"]
    assert m.entries == []


# ------------------------------------------------------------------------------------------ declarations


def test_register_declarations() -> None:
    body = body_of(entry("\t.reg .pred \t%p<5>;\n\t.reg .b32 a, b;\n\t.reg .v4 .f32 %v<2>;"))
    p, ab, v = body
    assert (p.type, p.names) == ("pred", (("%p", 5),))
    assert p.declared() == ["%p0", "%p1", "%p2", "%p3", "%p4"]
    assert ab.names == (("a", None), ("b", None))
    assert (v.vector, v.type) == ("v4", "f32")


def test_variables_alignment_arrays_initializers() -> None:
    text = HEADER + (
        ".extern .shared .align 16 .b8 buf[];\n"
        ".const .align 4 .b8 coeffs[8] = {0, 0, 128, 63, 0, 0, 0, 63};\n"
        ".global .align 4 .u32 counter;\n"
        ".visible .global .align 8 .f64 table[2][3];\n"
    )
    buf, coeffs, counter, table = parse_module(text).items
    assert (buf.linkage, buf.state_space, buf.align, buf.type, buf.dims) == (("extern",), "shared", 16, "b8", (None,))
    assert coeffs.initializer == "{0, 0, 128, 63, 0, 0, 0, 63}" and coeffs.dims == (8,)
    assert (counter.state_space, counter.type, counter.dims) == ("global", "u32", ())
    assert table.dims == (2, 3) and table.linkage == ("visible",)


def test_body_variables() -> None:
    body = body_of(entry("\t.shared .align 4 .b8 red[128];\n\t.local .align 8 .b8 __local_depot0[16];\n\t.param .b32 param0;"))
    assert [(v.state_space, v.name) for v in body] == [("shared", "red"), ("local", "__local_depot0"), ("param", "param0")]


# -------------------------------------------------------------------------------------------- operands


def test_registers_special_registers_symbols() -> None:
    i = only_instruction("mov.u32 \t%r1, %tid.x;")
    assert i.operands == (ast.Register("%r1"), ast.SpecialRegister("%tid.x"))
    i = only_instruction("mov.u32 \t%r1, %envreg3;")
    assert i.operands[1] == ast.SpecialRegister("%envreg3")
    i = only_instruction("mov.u64 \t%rd1, counter;")
    assert i.operands[1] == ast.Symbol("counter")


@pytest.mark.parametrize(
    ("text", "value"),
    [("0f3F800000", 1.0), ("0fFF800000", float("-inf")), ("0d3FF0000000000000", 1.0), ("0x1F", 31), ("-1", -1),
     ("42", 42), ("1.5", 1.5), ("7U", 7)],
)
def test_immediates(text: str, value: float) -> None:
    i = only_instruction(f"add.f32 \t%f1, %f2, {text};")
    assert i.operands[2] == ast.Immediate(text)
    assert i.operands[2].value == value


def test_addresses() -> None:
    i = only_instruction("ld.global.nc.f32 \t%f1, [%rd6+4];")
    assert i.opcode == "ld" and i.modifiers == ("global", "nc", "f32")
    assert i.operands[1] == ast.Address(ast.Register("%rd6"), 4)
    assert only_instruction("ld.global.f32 \t%f1, [%rd6];").operands[1] == ast.Address(ast.Register("%rd6"), None)
    assert only_instruction("ld.local.f32 \t%f1, [%rd6+-8];").operands[1].offset == -8
    assert only_instruction("ld.local.f32 \t%f1, [%rd6-8];").operands[1].offset == -8
    assert only_instruction("ld.const.f32 \t%f1, [coeffs+28];").operands[1] == ast.Address(ast.Symbol("coeffs"), 28)
    assert only_instruction("st.param.f32 \t[param0+0], %f1;").operands[0] == ast.Address(ast.Symbol("param0"), 0)


def test_double_colon_modifiers() -> None:
    i = only_instruction("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r9], [%rd4], %r10, [%r7];")
    assert i.modifiers == ("async", "bulk", "shared::cluster", "global", "mbarrier::complete_tx::bytes")
    assert i.full_opcode == "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
    i = only_instruction("ld.global.L1::no_allocate.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1];")
    assert i.modifiers[1] == "L1::no_allocate"
    assert i.operands[0] == ast.Vector(tuple(ast.Register(f"%f{k}") for k in range(1, 5)))


def test_predicates_pairs_negation_sinks() -> None:
    i = only_instruction("@!%p1 bra \t$L__BB0_3;")
    assert i.predicate == ast.Predicate(ast.Register("%p1"), negated=True)
    assert i.operands == (ast.Symbol("$L__BB0_3"),)
    i = only_instruction("shfl.sync.bfly.b32 \t%r23|%p3, %r19, %r21, %r20, %r22;")
    assert i.operands[0] == ast.PredicatePair(ast.Register("%r23"), ast.Register("%p3"))
    i = only_instruction("and.pred \t%p1, !%p2, %p3;")
    assert i.operands[1] == ast.Negated(ast.Register("%p2"))
    i = only_instruction("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r7], %r10;")
    assert i.operands[0] == ast.Sink()


def test_call_with_paren_lists_over_lines() -> None:
    text = entry("\t{ // callseq 0, 0\n\t.param .b32 param0;\n\t.param .b32 retval0;\n"
                 "\tcall.uni (retval0), \n\tf, \n\t(\n\tparam0\n\t);\n\t} // callseq 0")
    scope = body_of(text)[0]
    assert isinstance(scope, ast.Scope)
    call = scope.body[2]
    assert call.operands == (ast.ParenList((ast.Symbol("retval0"),)), ast.Symbol("f"),
                             ast.ParenList((ast.Symbol("param0"),)))
    assert print_module(parse_module(text)) == text


def test_scope_declared_names_resolve_to_registers() -> None:
    text = entry("\t{ .reg .pred P1; WAIT: mbarrier.try_wait.parity.shared::cta.b64 P1, [%r14], %r15; @!P1 bra WAIT; }\n"
                 "\tmov.u32 \t%r1, P1;")
    scope, after = body_of(text)
    reg, label, wait, bra = scope.body
    assert isinstance(reg, ast.RegDecl) and label == ast.Label("WAIT")
    assert wait.operands[0] == ast.Register("P1")
    assert bra.predicate == ast.Predicate(ast.Register("P1"), True) and bra.operands == (ast.Symbol("WAIT"),)
    # outside the scope P1 is no longer declared
    assert after.operands[1] == ast.Symbol("P1")
    assert print_module(parse_module(text)) == text


def test_ranged_name_declarations_resolve() -> None:
    i = only_instruction("add.s32 \tq3, q0, q4;", decls="\t.reg .b32 q<4>;")
    assert i.operands == (ast.Register("q3"), ast.Register("q0"), ast.Symbol("q4"))


def test_directives_in_body() -> None:
    body = body_of(entry('\t.loc\t1 4 3\n\t.pragma "nounroll";\n\tret;'))
    loc, pragma, ret = body
    assert (loc.name, loc.text) == ("loc", "1 4 3")
    assert (pragma.name, pragma.text) == ("pragma", '"nounroll"')
    assert ret.opcode == "ret" and ret.operands == ()


def test_comments_are_trivia() -> None:
    text = entry("\t/* block\n comment */ add.s32 \t%r1, %r2, 1; // tail\n\tret;")
    add, ret = body_of(text)
    assert add.operands[2] == ast.Immediate("1")
    assert "/* block" in add.trivia and "// tail" in ret.trivia
    assert print_module(parse_module(text)) == text


def test_comment_inside_operands() -> None:
    text = entry("\tadd.s32 \t%r1, /* lhs */ %r2, 1;")
    (add,) = body_of(text)
    assert add.operands == (ast.Register("%r1"), ast.Register("%r2"), ast.Immediate("1"))
    assert print_module(parse_module(text)) == text


def test_locations() -> None:
    text = entry("\tmov.u32 \t%r1, 1;\n$L__BB0_1:\n\t  ret;")
    mov, label, ret = body_of(text)
    first = HEADER.count("\n") + 6
    assert (mov.loc.line, mov.loc.column) == (first, 2)
    assert (label.loc.line, label.loc.column) == (first + 1, 1)
    assert (ret.loc.line, ret.loc.column) == (first + 2, 4)


# ------------------------------------------------------------------------------------- parse_statements


def test_parse_statements_resolves_given_registers() -> None:
    stmts = parse_statements("add.s32 acc, acc, %r1;\n.reg .b32 t;\nmov.b32 t, x;", registers={"acc"})
    add, decl, mov = stmts
    assert add.operands[:2] == (ast.Register("acc"), ast.Register("acc"))
    assert mov.operands == (ast.Register("t"), ast.Symbol("x"))
    assert all(s.trivia is None for s in stmts) and add.layout is None
    assert isinstance(decl, ast.RegDecl)


def test_parse_statements_scope_and_label() -> None:
    stmts = parse_statements("LOOP:\n{\n.reg .pred p;\nsetp.lt.s32 p, %r1, 4;\n@p bra LOOP;\n}")
    label, scope = stmts
    assert label.name == "LOOP" and isinstance(scope, ast.Scope) and scope.body[2].predicate.register == ast.Register("p")


def test_parse_statements_empty() -> None:
    assert parse_statements("  // nothing\n") == []


# ----------------------------------------------------------------------------------------------- errors


def error_of(text: str, filename: str | None = "k.ptx") -> PTXSyntaxError:
    with pytest.raises(PTXSyntaxError) as info:
        parse_module(text, filename)
    return info.value


def test_error_truncated_file() -> None:
    text = entry("\tmov.u32 \t%r1, 1;\n\tret;")
    e = error_of(text[: text.index("ret")])
    assert e.file == "k.ptx" and "end of input" in e.message
    assert e.line == text[: text.index("ret")].count("\n") + 1
    assert "'}'" in e.message


def test_error_unknown_directive_in_body() -> None:
    text = entry("\t.frobnicate 3;\n\tret;")
    e = error_of(text)
    assert e.message == "unknown directive '.frobnicate'"
    assert (e.line, e.column) == (HEADER.count("\n") + 6, 2)


def test_error_unknown_top_level_directive() -> None:
    e = error_of(HEADER + ".bogus .u32 x;\n")
    assert "unknown directive '.bogus'" in e.message and e.line == 4 and e.column == 1


def test_error_bad_operand() -> None:
    text = entry("\tadd.s32 \t%r1, %r2, #4;")
    e = error_of(text)
    assert e.line == HEADER.count("\n") + 6 and e.column == 21
    assert "unexpected character '#'" in e.message and "a register" in e.message
    assert str(e) == f"k.ptx:{e.line}:21: {e.message}"


def test_error_missing_semicolon() -> None:
    e = error_of(entry("\tadd.s32 \t%r1, %r2, 4\n\tret;"))
    assert "';'" in e.message and e.line == HEADER.count("\n") + 7


def test_error_special_register_as_address() -> None:
    e = error_of(entry("\tld.global.u32 \t%r1, [%tid.x];"))
    assert "special register %tid.x" in e.message and e.column == 23


def test_error_header_missing() -> None:
    e = error_of(".visible .entry k()\n{\n}\n", None)
    assert e.file is None and e.line == 1 and "'.version'" in e.message
    assert str(e).startswith("<ptx>:1:1: ")


def test_error_is_picklable_value_error() -> None:
    e = error_of(entry("\tret"))
    assert isinstance(e, ValueError)
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.message, e2.file, e2.line, e2.column) == (e.message, e.file, e.line, e.column)


def test_parse_statements_error_location() -> None:
    with pytest.raises(PTXSyntaxError) as info:
        parse_statements("mov.u32 %r1, 1;\nadd.s32 %r1, %r1 %r2;", filename="edit")
    assert (info.value.file, info.value.line) == ("edit", 2)


def test_not_a_string() -> None:
    with pytest.raises(TypeError):
        parse_module(b".version 9.0")  # type: ignore[arg-type]


def test_variable_list_declaration_splits_into_one_per_name() -> None:
    text = HEADER + ".global .align 4 .u32 a, b[4];\n.visible .entry k()\n{\n\t.shared .f32 s0, s1;\n\tret;\n}\n"
    m = parse_module(text)
    a, b, fn = m.items
    assert (a.name, a.dims, b.name, b.dims, b.align) == ("a", (), "b", (4,), 4)
    s0, s1, _ = fn.body
    assert (s0.name, s1.name, s1.state_space) == ("s0", "s1", "shared")
    out = print_module(m)
    assert ".global .align 4 .u32 a;\n\n.global .align 4 .u32 b[4];" in out
    assert parse_module(out) == m


def test_parsing_from_several_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    data = Path(__file__).resolve().parent / "data"
    texts = [(data / n).read_text() for n in ("reduce_shfl.ptx", "calls_printf.ptx", "cp_async.ptx", "elementwise.ptx")]
    expected = [parse_module(t) for t in texts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(parse_module, texts * 4))
    assert got == expected * 4
    assert [print_module(m) for m in got] == texts * 4


def test_parse_statements_missing_semicolon_at_end() -> None:
    with pytest.raises(PTXSyntaxError) as info:
        parse_statements("mov.u32 %r1, 1;\nadd.s32 %r1, %r2, %r3", filename="edit")
    e = info.value
    assert (e.line, e.column) == (2, 22)
    assert e.message.startswith("unexpected end of input;") and "';'" in e.message and "truncated" not in e.message
