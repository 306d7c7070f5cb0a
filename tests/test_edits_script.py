"""The edit-script text format: parse, print, round trip, error positions, and the constrained-decoding grammar."""

from __future__ import annotations

import pytest

from population.edits import (
    Delete,
    EditScript,
    EditSyntaxError,
    Insert,
    Replace,
    SetDirective,
    SetKnobs,
    SetLaunch,
    SetModifier,
    ebnf_grammar,
    parse_edit_script,
)

FULL = """\
REPLACE 42-45
  ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd4];

  add.f32 %f5, %f1, %f2;
END
INSERT AFTER 50
prefetch.global.L2 [%rd9];
END
DELETE 60-61
DELETE 7
MODIFIER 42 -nc +cs
MODIFIER 43 +L1::no_allocate
MODIFIER 44 -.approx
LAUNCH block=256,1,1 smem=0 rows_per_cta=2
LAUNCH block=128
DIRECTIVE rmsnorm .maxnreg 64
DIRECTIVE rmsnorm .maxntid 256, 1, 1
DIRECTIVE rmsnorm -.maxnreg
DIRECTIVE _Z3fooPf .noreturn
KNOBS threads=256 vec=8 rows_per_cta=1 keep_in_regs=1 cache_hint=1
REPLACE 3
END
"""


def test_parse_full_script_values() -> None:
    s = parse_edit_script(FULL)
    assert s.edits == (
        Replace(42, 45, ("ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd4];", "add.f32 %f5, %f1, %f2;")),
        Insert(50, ("prefetch.global.L2 [%rd9];",)),
        Delete(60, 61),
        Delete(7, 7),
        SetModifier(42, "nc", "cs"),
        SetModifier(43, None, "L1::no_allocate"),
        SetModifier(44, "approx", None),
        SetLaunch(block=(256, 1, 1), dynamic_smem_bytes=0, knobs=(("rows_per_cta", 2),)),
        SetLaunch(block=(128, 1, 1)),
        SetDirective("rmsnorm", "maxnreg", (64,)),
        SetDirective("rmsnorm", "maxntid", (256, 1, 1)),
        SetDirective("rmsnorm", "maxnreg", None),
        SetDirective("_Z3fooPf", "noreturn", ()),
        SetKnobs((("threads", 256), ("vec", 8), ("rows_per_cta", 1), ("keep_in_regs", 1), ("cache_hint", 1))),
        Replace(3, 3, ()),
    )
    assert s.kinds[:5] == ("REPLACE", "INSERT", "DELETE", "DELETE", "MODIFIER")


def test_round_trip_is_exact() -> None:
    s = parse_edit_script(FULL)
    text = s.to_text()
    assert parse_edit_script(text) == s
    assert parse_edit_script(text).to_text() == text
    assert text.splitlines()[0] == "REPLACE 42-45"
    assert "DIRECTIVE rmsnorm .maxntid 256,1,1" in text
    assert "MODIFIER 44 -approx" in text


def test_empty_script() -> None:
    assert parse_edit_script("") == EditScript(())
    assert parse_edit_script("\n\n") == EditScript(())
    assert EditScript(()).to_text() == ""


def test_windows_line_ends() -> None:
    s = parse_edit_script("DELETE 3\r\nMODIFIER 4 +cs\r\n")
    assert s.edits == (Delete(3, 3), SetModifier(4, None, "cs"))


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    [
        ("REPLACE 4-2\nfoo;\nEND", 1, 9, "ends before it starts"),
        ("DELETE 3\nREPLACE 4\nadd.f32 %f1;\n", 3, 13, "must end with a line END"),
        ("DELETE x", 1, 8, "expected a number"),
        ("MODIFIER 4", 1, 11, "-modifier or +modifier"),
        ("DIRECTIVE f .maxnreg 1,2", 1, 13, "takes 1 value(s), got 2"),
        ("DIRECTIVE f .bogus 3", 1, 13, "unknown directive .bogus"),
        ("LAUNCH a=1 a=2", 1, 12, "a given twice"),
        ("MODIFIER 3 -a -b", 1, 15, "at most one"),
        ("FOO 3", 1, 1, "expected DELETE"),
        ("INSERT AFTER 3\nEND", 1, 14, "at least one PTX line"),
        ("DELETE 3\nREPLACE 2\nDELETE 4\nEND", 3, 1, "unexpected 'DELETE'; expected END, a PTX line"),
        ("LAUNCH smem=1,2", 1, 8, "smem takes one value"),
        ("DELETE 0", 1, 8, "line number >= 1"),
        ("LAUNCH block=0", 1, 8, "positive ints"),
        ("DIRECTIVE f -.maxnreg 3", 1, 23, "takes no values"),
        ("KNOBS block=1,2", 1, 7, "use LAUNCH block="),
    ],
)
def test_syntax_errors_have_positions(text: str, line: int, column: int, fragment: str) -> None:
    with pytest.raises(EditSyntaxError) as ei:
        parse_edit_script(text)
    e = ei.value
    assert (e.line, e.column) == (line, column), str(e)
    assert fragment in e.message
    assert str(e).startswith(f"edit script:{line}:{column}: ")


def test_dataclass_validation() -> None:
    with pytest.raises(ValueError, match="starts with an edit keyword"):
        Replace(1, 1, ("END",))
    with pytest.raises(ValueError, match="starts with an edit keyword"):
        Insert(1, ("DELETE 4",))
    # labels in upper case (inline-asm style) are PTX lines
    assert Replace(1, 2, ("SKIP:", "END:", "ENDING: ret;")).lines == ("SKIP:", "END:", "ENDING: ret;")
    s = EditScript((Replace(1, 2, ("@p bra.uni SKIP;", "SKIP:")),))
    assert parse_edit_script(s.to_text()) == s
    with pytest.raises(ValueError, match="needs a modifier"):
        SetModifier(3)
    with pytest.raises(ValueError, match="at least one of"):
        SetLaunch()
    with pytest.raises(TypeError, match="not an edit"):
        EditScript(("DELETE 3",))  # type: ignore[arg-type]
    # multi-line strings (a printed Scope) are split into lines
    assert Insert(3, ("{\n\tadd.s32 %r1, %r2, 1;\n}",)).lines == ("{", "add.s32 %r1, %r2, 1;", "}")
    assert SetLaunch(block=(64,)).block == (64, 1, 1)


xg = pytest.importorskip("xgrammar")


def _accepts(grammar: str, text: str) -> bool:
    from xgrammar.testing import _is_grammar_accept_string

    return bool(_is_grammar_accept_string(xg.Grammar.from_ebnf(grammar), text))


def test_ebnf_accepts_canonical_text() -> None:
    g = ebnf_grammar()
    assert _accepts(g, parse_edit_script(FULL).to_text())
    assert not _accepts(g, "LAUNCH\n")
    assert not _accepts(g, "DELETE 0\n")
    assert not _accepts(g, "MODIFIER 4\n")
    assert not _accepts(g, "REPLACE 3\nfoo\n")  # no END
    assert not _accepts(g, "")  # at least one edit
    # directive value counts are in the grammar
    assert _accepts(g, "DIRECTIVE k .maxntid 128,2\nDIRECTIVE k .explicitcluster\nDIRECTIVE k -.noreturn\n")
    assert not _accepts(g, "DIRECTIVE k .maxnreg 64,2\n")
    assert not _accepts(g, "DIRECTIVE k .maxnreg 0\n")
    assert not _accepts(g, "DIRECTIVE k .noreturn 1\n")
    assert not _accepts(g, "DIRECTIVE k .maxntid\n")
    # upper-case labels are PTX lines; a bare keyword inside a block is not
    assert _accepts(g, "REPLACE 3-4\n@%p1 bra.uni SKIP;\nSKIP:\nEND\n")
    assert not _accepts(g, "REPLACE 3\nDELETE 4\nEND\n")


def test_ebnf_restrictions() -> None:
    g = ebnf_grammar(kinds=("DELETE", "LAUNCH", "DIRECTIVE"), entries=("rmsnorm",), knob_names=("vec",),
                     max_edits=2)
    assert _accepts(g, "DELETE 3\nLAUNCH vec=2\n")
    assert _accepts(g, "DIRECTIVE rmsnorm .maxnreg 64\n")
    assert not _accepts(g, "DIRECTIVE other .maxnreg 64\n")
    assert not _accepts(g, "DELETE 3\nDELETE 3\nDELETE 3\n")
    assert not _accepts(g, "LAUNCH foo=2\n")
    assert not _accepts(g, "MODIFIER 3 +cs\n")
    with pytest.raises(ValueError, match="not in"):
        ebnf_grammar(kinds=("SWAP",))
