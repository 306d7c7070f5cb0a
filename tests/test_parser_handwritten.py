"""Hand-written PTX (not nvcc's layout): spacing, several statements per line, labels before instructions,
comments everywhere, hex offsets, names declared without %, and the fast path against the reference grammar."""

from __future__ import annotations

import re

import pytest

from population import ast
from population.parser import (
    GRAMMAR_PATH,
    RUN_PATTERN,
    parse_module,
    reference_grammar,
    reference_parse_module,
)
from population.printer import print_module, without_debug

HANDWRITTEN = """// hand-written copy kernel
.version 8.0
.target sm_90
.address_size 64

.global .align 8 .u64 gptrs[2] = {0, 0};

.visible .entry copy_rows (
    .param .u64 .ptr.global.align 16 src,
    .param .u64 dst,   // destination
    .param .u32 n
)
.reqntid 128
{
    .reg .b32 %r<6>, acc;
    .reg .b64 %rd<6>;
    .reg .pred %p<3>;
    .reg .f32 %f<4>;

    ld.param.u64 %rd1, [src];  ld.param.u64 %rd2, [dst];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %tid.x;
    mov.u32 acc, 0;
    setp.ge.u32 %p1, %r2, %r1;
    @%p1 bra DONE;
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
LOOP: ld.global.f32 %f1, [%rd4+0x10];   /* hex offset */
    ld.global.v2.f32 {%f2, %f3}, [%rd4 + 8];
    add.f32 %f1, %f1, /* inline comment */ %f2;
    st.global.f32 [%rd5], %f1;
    add.u32 acc, acc, 1;
    setp.lt.u32 %p2, acc, 4;
    @%p2 bra.uni LOOP;
    {
        .reg .pred q;
        setp.eq.u32 q, acc, 4;
        @!q trap;
    }
DONE:
    ret;
}
"""


def test_handwritten_round_trip() -> None:
    m = parse_module(HANDWRITTEN, "copy.ptx")
    assert print_module(m) == HANDWRITTEN
    assert parse_module(print_module(m)) == m
    assert parse_module(print_module(m, canonical=True)) == without_debug(m)
    assert reference_parse_module(HANDWRITTEN) == m


def test_handwritten_values() -> None:
    m = parse_module(HANDWRITTEN)
    (gptrs,) = [i for i in m.items if isinstance(i, ast.VarDecl)]
    assert gptrs.initializer == "{0, 0}" and gptrs.dims == (2,)
    fn = m.function("copy_rows")
    assert fn.directives == [ast.PerfDirective("reqntid", (128,))]
    assert fn.params[0].attributes == ("ptr.global.align 16",)
    body = fn.body
    ld1, ld2 = body[4], body[5]
    assert (ld1.operands[1], ld2.operands[1]) == (ast.Address(ast.Symbol("src")), ast.Address(ast.Symbol("dst")))
    loop = body.index(ast.Label("LOOP"))
    hexload = body[loop + 1]
    assert hexload.operands[1] == ast.Address(ast.Register("%rd4"), 16)
    vec = body[loop + 2]
    assert vec.operands == (ast.Vector((ast.Register("%f2"), ast.Register("%f3"))), ast.Address(ast.Register("%rd4"), 8))
    assert body[loop + 5].operands[0] == ast.Register("acc")  # declared without %
    scope = next(s for s in body if isinstance(s, ast.Scope))
    assert scope.body[2].predicate == ast.Predicate(ast.Register("q"), negated=True)
    assert body[-2:] == [ast.Label("DONE"), ast.Instruction("ret")]


def test_handwritten_canonical_is_nvcc_layout() -> None:
    canonical = print_module(parse_module(HANDWRITTEN), canonical=True)
    assert "\tld.global.f32 \t%f1, [%rd4+16];" in canonical
    assert "\tld.param.u64 \t%rd1, [src];\n\tld.param.u64 \t%rd2, [dst];" in canonical
    assert "\n\nLOOP:\n\tld.global" in canonical
    assert "comment" not in canonical


def test_handwritten_ptxas_accepts_both_prints() -> None:
    toolchain = pytest.importorskip("evaluators.toolchain")
    m = parse_module(HANDWRITTEN)
    try:
        for canonical in (False, True):
            res = toolchain.compile_ptx(print_module(m, canonical=canonical), arch="sm_90")
            assert "copy_rows" in res.resources
    except toolchain.ToolchainNotFound as e:
        pytest.skip(f"no ptxas: {e}")


@pytest.mark.parametrize(
    "line",
    ["add.s32 %r1, %r1, -1;", "mov.b64 %rd1, {%r1, %r2};", "selp.b32 %r1, 1, 0, !%p1;",
     "st.shared.v4.u32 [sbuf+16], {%r1, %r2, %r3, %r4};", "ld.global.u32 %r1, [%rd1+-4];",
     "call.uni (%r1), fn, (%r2, %r3);", "vote.sync.ballot.b32 %r1, %p1, 0xffffffff;",
     "atom.global.add.u32 _, [%rd1], 1;", "ld.global.u32 %r1, [%rd1 - 4];", "mov.f32 %f1, 0fBF800000;"],
)
def test_fast_path_equals_reference_per_line(line: str) -> None:
    text = (".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n"
            "\t.reg .b32 %r<5>;\n\t.reg .b64 %rd<3>;\n\t.reg .pred %p<3>;\n\t.reg .f32 %f<3>;\n"
            f"\t.shared .align 16 .b8 sbuf[64];\n\t{line}\n}}\n")
    m = parse_module(text)
    assert m == reference_parse_module(text)
    assert print_module(m) == text
    assert parse_module(print_module(m, canonical=True)) == m


def test_run_terminal_matches_parser_pattern() -> None:
    line = next(x for x in GRAMMAR_PATH.read_text().splitlines() if x.startswith("RUN.4: /"))
    pattern = line[len("RUN.4: /") : -1]
    assert re.compile(pattern).pattern.replace("\\/", "/") == RUN_PATTERN.replace("\\/", "/")


def test_reference_grammar_has_no_fast_path() -> None:
    ref = reference_grammar()
    assert "| run" not in ref and "run: RUN" not in ref
    assert "instruction: PRED? WORD operands? SEMI" in ref
