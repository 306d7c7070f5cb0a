"""apply_script on real nvcc PTX from tests/data: every edit kind, children accepted by ptxas, the parent
untouched, and the errors an operator or a model can run into.

The main fixture is ``call_mix`` in tests/data/calls_printf.ptx: straight-line code, three call sequences in
``{ }`` scopes (one with a ``.callprototype`` label), labels and predicated branches."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.toolchain import compile_ptx
from population.analysis import declared_registers, flat_instructions
from population.edits import (
    Delete,
    EditApplyError,
    EditScript,
    Insert,
    Replace,
    SetModifier,
    apply_script,
    diff_text,
    insert_modifier,
    line_map,
    parse_edit_script,
)
from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module
from population.printer import listing, print_module

HERE = Path(__file__).parent
DATA = HERE / "data"
SHARED = HERE.resolve().parents[1] / "shared" / "ptx-corpus"  # the workspace corpus, when present


def load(name: str, entry: str) -> Kernel:
    p = DATA / name
    return Kernel(parse_module(p.read_text(), str(p)), entry, LaunchConfig(block=(256, 1, 1)))


def line_of(kernel: Kernel, text: str, nth: int = 0) -> int:
    """1-based listing line of the kernel's entry whose stripped text starts with ``text`` (the nth one)."""
    hits = [i.lineno for i in listing(kernel.module).lines
            if i.function == kernel.entry and i.text.strip().startswith(text)]
    assert len(hits) > nth, f"{text!r} not in listing"
    return hits[nth]


def scope_line(kernel: Kernel) -> int:
    """The ``{`` line of the entry's first nested scope (call_mix's first call sequence)."""
    from population.ast import Scope

    return next(i.lineno for i in listing(kernel.module).lines
                if i.function == kernel.entry and isinstance(i.node, Scope))


def apply(kernel: Kernel, text: str, **kw) -> Kernel:  # type: ignore[no-untyped-def]
    return apply_script(kernel, parse_edit_script(text), operator="test", **kw)


def assert_assembles(child: Kernel, arch: str = "sm_90") -> None:
    res = compile_ptx(child.ptx, arch)
    assert child.entry in res.resources
    # the printed child reads back as the same module
    assert parse_module(child.ptx) == child.module


@pytest.fixture
def poly() -> Kernel:
    return load("calls_printf.ptx", "call_mix")


def test_line_map_spans(poly: Kernel) -> None:
    lm = line_map(poly.module)
    fn = poly.module.function("call_mix")
    first_line = scope_line(poly)
    assert lm.info(first_line).text.strip() == "{"
    scope = lm.info(first_line).node
    first, last = lm.span(scope)
    assert first == first_line and lm.info(last).text.strip() == "}" and last - first == 7
    assert lm.opens[first] is scope.body and lm.closes[last] is scope.body
    assert lm.functions[id(scope.body)] is fn
    ld = next(i for i in flat_instructions(fn) if i.full_opcode == "ld.global.nc.f32")
    assert lm.line(ld) == line_of(poly, "ld.global.nc.f32")


def test_each_edit_kind_assembles_and_parent_untouched(poly: Kernel) -> None:
    before_ptx, before_id = poly.canonical_ptx, poly.identity
    ld = line_of(poly, "ld.global.nc.f32")
    add = line_of(poly, "add.s64 \t%rd6")
    mov = line_of(poly, "mov.u64 \t%rd9, table")
    st = line_of(poly, "st.global.f32")
    script = f"""\
MODIFIER {ld} -nc +L1::no_allocate
MODIFIER {st} +cs
INSERT AFTER {add}
prefetch.global.L2 [%rd6];
add.s64 %rd100, %rd6, 4;
END
REPLACE {mov}-{mov + 1}
mov.u64 %rd9, table;
add.s64 %rd10, %rd9, 0;
END
DIRECTIVE call_mix .maxntid 128
LAUNCH block=128 smem=256 rows=2
"""
    child = apply(poly, script)
    assert poly.canonical_ptx == before_ptx and poly.identity == before_id
    assert child.parents == (poly.identity,) and child.operator == "test"
    assert child.edit_text == parse_edit_script(script).to_text()
    assert child.launch == LaunchConfig(block=(128, 1, 1), dynamic_smem_bytes=256, knobs=(("rows", 2),))
    fn = child.module.function("call_mix")
    ops = [i.full_opcode for i in flat_instructions(fn)]
    assert "ld.global.L1::no_allocate.f32" in ops and "st.global.cs.f32" in ops
    k = ops.index("prefetch.global.L2")
    assert ops[k - 1:k + 3] == ["add.s64", "prefetch.global.L2", "add.s64", "ld.global.L1::no_allocate.f32"]
    assert declared_registers(fn)["%rd100"] == "b64"
    assert [(d.name.lstrip("."), d.values) for d in fn.directives] == [("maxntid", (128,))]
    assert child.identity != poly.identity
    assert_assembles(child)


def test_maxnreg_directive_reaches_ptxas() -> None:
    from workloads.registry import get_workload

    k = get_workload("rmsnorm").seeds()[-1]  # the template at default knobs: 53 registers unconstrained
    free = compile_ptx(k.ptx).resources[k.entry]
    child = apply(k, f"DIRECTIVE {k.entry} .maxnreg 32\n")
    capped = compile_ptx(child.ptx).resources[k.entry]
    assert free.registers > 32 >= capped.registers
    assert capped.spill_stores_bytes > free.spill_stores_bytes == 0
    again = apply(child, f"DIRECTIVE {k.entry} -.maxnreg\n")
    assert again.module.function(k.entry).directives == k.module.function(k.entry).directives
    assert again.canonical_ptx == k.canonical_ptx


def test_edits_refer_to_parent_numbering(poly: Kernel) -> None:
    # deleting lines above must not shift where a later edit lands
    a = line_of(poly, "mov.u32 \t%r5, %ctaid.x")
    ld = line_of(poly, "ld.global.nc.f32")
    child = apply(poly, f"DELETE {a}\nMODIFIER {ld} -nc\nINSERT AFTER {a - 1}\nmov.u32 %r5, %nctaid.x;\nEND\n")
    text = child.canonical_ptx
    assert "%nctaid.x" in text and "%ctaid.x" not in text
    assert "ld.global.f32" in text and "ld.global.nc" not in text
    assert_assembles(child)


def test_scope_lines(poly: Kernel) -> None:
    open_line = scope_line(poly)
    lm = line_map(poly.module)
    close_line = lm.span(lm.info(open_line).node)[1]
    # after the scope's "{": first inside the scope
    child = apply(poly, f"INSERT AFTER {open_line}\n.reg .b32 %extra;\nEND\n")
    scope = line_map(child.module).info(open_line).node
    assert scope.body[0].names == (("%extra", None),)
    # after its "}": after the scope, in the function body
    child = apply(poly, f"INSERT AFTER {close_line}\nmov.f32 %f2, 0f3F800000;\nEND\n")
    assert listing(child.module).lines[close_line].text.strip().startswith("mov.f32")
    assert_assembles(child)
    # the whole scope can be replaced
    child = apply(poly, f"REPLACE {open_line}-{close_line}\nmov.f32 %f2, %f1;\nEND\n")
    calls = [i for i in flat_instructions(child.module.function("call_mix")) if i.opcode == "call"]
    assert len(calls) == 2
    assert_assembles(child)
    # a range inside the scope edits the scope's body
    child = apply(poly, f"DELETE {close_line - 1}\nINSERT AFTER {close_line - 1}\nmov.f32 %f2, %f1;\nEND\n")
    assert_assembles(child)


def test_range_across_scope_boundary_is_rejected(poly: Kernel) -> None:
    open_line = scope_line(poly)
    with pytest.raises(EditApplyError) as ei:
        apply(poly, f"DELETE {open_line - 3}\nDELETE {open_line - 1}-{open_line + 2}\n")
    e = ei.value
    assert e.edit_index == 1
    assert f"covers only part of the {{ }} scope at lines {open_line}-{open_line + 7}" in e.reason
    with pytest.raises(EditApplyError, match=f"scope at lines {open_line}-{open_line + 7}; cover all of it"):
        apply(poly, f"DELETE {open_line + 2}-{open_line + 9}\n")
    with pytest.raises(EditApplyError, match="function's brace"):
        apply(poly, f"DELETE {line_of(poly, 'ret;')}-{line_of(poly, 'ret;') + 1}\n")


def test_line_errors(poly: Kernel) -> None:
    n = len(listing(poly.module).lines)
    fn_close = n  # the listing ends with call_mix's "}"
    fn_open = line_of(poly, "{")  # the entry's body brace (scopes come later)
    cases = [
        (f"DELETE {n + 1}", "past the end of the listing"),
        ("DELETE 1", "not a statement in a body"),
        (f"DELETE {fn_open}", "function's brace"),
        (f"INSERT AFTER {fn_close}\nret;\nEND", "closes a function body"),
        (f"INSERT AFTER {fn_open - 2}\nret;\nEND", "not a statement in a function body"),
        (f"MODIFIER {line_of(poly, '$L__BB3_3:')} +cs", "is not an instruction (Label)"),
        (f"MODIFIER {line_of(poly, 'st.global.f32')} -nc", "has no modifier .nc"),
        (f"MODIFIER {line_of(poly, 'ld.global.nc.f32')} +nc", "already has modifier .nc"),
        (f"REPLACE {line_of(poly, 'ret;')}\nadd.f32 %f1, %f2;;\nEND", "PTX line 1 of the edit"),
        ("DIRECTIVE nosuch .maxnreg 32", "no function 'nosuch'"),
        ("DIRECTIVE call_mix -.maxnreg", "has no .maxnreg to remove"),
        (f"INSERT AFTER {line_of(poly, 'prototype_1:')}\nmov.u32 %r1, 0;\nEND", "names a .callprototype"),
        ("KNOBS vec=4", "needs the workload's instantiate"),
    ]
    for text, fragment in cases:
        with pytest.raises(EditApplyError) as ei:
            apply(poly, text + "\n")
        assert fragment in ei.value.reason, (text, ei.value.reason)
        assert ei.value.edit_index == 0
        assert str(ei.value).startswith("edit 0 (")


def test_overlaps_are_rejected(poly: Kernel) -> None:
    a = line_of(poly, "cvta.to.global.u64 \t%rd4")  # cvta, cvt, mul.wide, add.s64 %rd6
    with pytest.raises(EditApplyError) as ei:
        apply(poly, f"DELETE {a}-{a + 2}\nREPLACE {a + 2}\nmov.u32 %r1, 0;\nEND\n")
    assert ei.value.edit_index == 1 and "overlaps edit 0" in ei.value.reason
    with pytest.raises(EditApplyError, match="overlaps edit 1"):
        apply(poly, f"MODIFIER {a + 1} +cs\nDELETE {a}-{a + 2}\n")
    with pytest.raises(EditApplyError, match="overlaps"):
        apply(poly, f"INSERT AFTER {a}\nmov.u32 %r1, 0;\nEND\nDELETE {a}-{a + 1}\n")
    # adjacent is fine: the insert point after a+2 is the end of the deleted range (line a+2: mul.wide)
    child = apply(poly, f"DELETE {a + 2}\nINSERT AFTER {a + 2}\nmul.wide.s32 %rd5, %r1, 8;\nEND\n"
                        f"INSERT AFTER {a + 2}\nadd.s64 %rd20, %rd4, %rd5;\nEND\n")
    ins = flat_instructions(child.module.function("call_mix"))
    k = [i.opcode for i in ins].index("mul")
    # two inserts after one line keep script order; the original add.s64 follows them
    got = [(i.full_opcode, i.operands[0].name) for i in ins[k:k + 3]]
    assert got == [("mul.wide.s32", "%rd5"), ("add.s64", "%rd20"), ("add.s64", "%rd6")]
    assert ins[k].operands[2].text == "8"
    assert_assembles(child)


def test_knobs_reinstantiate_template() -> None:
    from workloads.registry import get_workload

    w = get_workload("rmsnorm")
    parent = w.seeds()[-1]
    child = apply(parent, "KNOBS vec=4 threads=128\nLAUNCH smem=0\n", instantiate=w.instantiate)
    assert child.launch.knob("vec") == 4 and child.launch.threads == 128
    assert child.parents == (parent.identity,)
    expected = w.instantiate({**dict(parent.launch.knobs), "vec": 4, "threads": 128})
    assert child.canonical_ptx == expected.canonical_ptx
    assert_assembles(child)
    with pytest.raises(EditApplyError, match="line edits cannot be in the same script"):
        apply(parent, "KNOBS vec=4\nDELETE 30\n", instantiate=w.instantiate)
    with pytest.raises(EditApplyError, match="template rejected"):
        apply(parent, "KNOBS vec=3\n", instantiate=w.instantiate)


def test_new_registers_declared_with_inferred_types(poly: Kernel) -> None:
    ld = line_of(poly, "ld.global.nc.f32")
    child = apply(poly, f"""REPLACE {ld}
ld.global.nc.v2.f32 {{%f10, %f11}}, [%rd6];
add.rn.f32 %f2, %f10, %f11;
setp.gt.f32 %pnew, %f2, 0f00000000;
selp.f32 %f2, %f2, 0f00000000, %pnew;
END
""")
    decl = declared_registers(child.module.function("call_mix"))
    assert (decl["%f10"], decl["%f11"], decl["%pnew"]) == ("f32", "f32", "pred")
    assert_assembles(child)


def test_wgmma_kernel_edit_sm90a() -> None:
    k = load("wgmma_sm90a.ptx", "wgmma_m64n32")
    st = line_of(k, "st.global.f32")
    child = apply(k, f"MODIFIER {st} +cs\n")
    assert_assembles(child, "sm_90a")


def test_diff_text(poly: Kernel) -> None:
    ld = line_of(poly, "ld.global.nc.f32")
    child = apply(poly, f"MODIFIER {ld} -nc\nLAUNCH block=64\n")
    d = diff_text(poly, child)
    lines = d.splitlines()
    assert lines[0].startswith("# launch: {'block': [256, 1, 1]")
    assert "-\tld.global.nc.f32 \t%f2, [%rd6];" in lines
    assert "+\tld.global.f32 \t%f2, [%rd6];" in lines
    assert diff_text(poly, poly) == ""


def test_empty_script_and_replace_with_nothing(poly: Kernel) -> None:
    with pytest.raises(EditApplyError, match="no edits"):
        apply_script(poly, EditScript(()), operator="x")
    a = line_of(poly, "add.u64 \t%rd12")
    child = apply(poly, f"REPLACE {a}-{a + 1}\nEND\nINSERT AFTER {a + 1}\nmov.u64 %rd12, %SP;\n"
                        "mov.u64 %rd13, %SPL;\nEND\n")
    assert "add.u64" not in child.canonical_ptx
    assert_assembles(child)


@pytest.mark.parametrize(
    ("mods", "add", "expected"),
    [
        (("global", "f32"), "cs", ("global", "cs", "f32")),
        (("global", "f32"), "nc", ("global", "nc", "f32")),
        (("global", "nc", "v4", "f32"), "L1::no_allocate", ("global", "nc", "L1::no_allocate", "v4", "f32")),
        (("global", "nc", "f32"), "cs", ("global", "cs", "nc", "f32")),
        (("global", "v2", "u64"), "L2::evict_last", ("global", "L2::evict_last", "v2", "u64")),
        (("approx", "f32"), "ftz", ("approx", "ftz", "f32")),
        (("f32",), "rn", ("rn", "f32")),
        (("rn", "ftz", "f32"), "sat", ("rn", "ftz", "sat", "f32")),
        (("global", "u32"), "relaxed", ("relaxed", "global", "u32")),
        (("relaxed", "global", "u32"), "gpu", ("relaxed", "gpu", "global", "u32")),
    ],
)
def test_insert_modifier_order(mods: tuple[str, ...], add: str, expected: tuple[str, ...]) -> None:
    assert insert_modifier(mods, add) == expected


def test_modifier_assembles_in_place(poly: Kernel) -> None:
    # -rn +approx swaps in place; the result is valid PTX
    k = load("calls_printf.ptx", "call_mix")
    fma = next(i.lineno for i in listing(k.module).lines
               if i.function == "_Z5poly3fff" and i.text.strip().startswith("fma.rn.f32"))
    child = apply_script(k, EditScript((SetModifier(fma, "rn", "rz"), Insert(fma, ("mov.f32 %f3, %f3;",)))),
                         operator="t")
    ops = [i.full_opcode for i in flat_instructions(child.module.function("_Z5poly3fff"))]
    assert ops.count("fma.rz.f32") == 1 and ops[ops.index("fma.rz.f32") + 1] == "mov.f32"
    assert print_module(child.module, canonical=True).count("fma.rz.f32") == 1
    assert_assembles(child)


def test_bare_register_names_written_by_an_edit_are_declared(poly: Kernel) -> None:
    ld = line_of(poly, "ld.global.nc.f32")
    child = apply(poly, f"INSERT AFTER {ld}\nadd.f32 acc, %f1, %f1;\nmov.f32 %f1, acc;\nEND\n")
    fn = child.module.function("call_mix")
    assert declared_registers(fn)["acc"] == "f32"
    assert_assembles(child)
    # a name only read stays a symbol, for ptxas to reject
    child = apply(poly, f"INSERT AFTER {ld}\nmov.f32 %f1, nosuch;\nEND\n")
    assert "nosuch" not in declared_registers(child.module.function("call_mix"))
    from evaluators.types import CompileError

    with pytest.raises(CompileError):
        compile_ptx(child.ptx)


@pytest.mark.parametrize("name", ["calls_printf.ptx", "inline_asm_scopes.ptx", "bulk_mbarrier.ptx",
                                  "shared:i_device_func.ptx", "shared:d_mbarrier_bulk.ptx"])
def test_every_line_delete_and_insert_matches_the_text(name: str) -> None:
    """Deleting line L (or inserting after it) changes the canonical text exactly there: the line map agrees
    with the listing on every statement line, scopes included."""
    from population.ast import RegDecl, Scope
    from population.edits import Delete

    path = SHARED / name.split(":", 1)[1] if name.startswith("shared:") else DATA / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    m = parse_module(path.read_text())
    k = Kernel(m, m.entries[0].name)
    lst = listing(m)
    lines = lst.text.splitlines()

    def solid(text_lines: list[str]) -> list[str]:
        return [x for x in text_lines if x.strip()]  # blank lines belong to the layout, not to statements

    checked = 0
    for info in lst.lines:
        ln = info.lineno
        if info.node is None or info.body is None or info.function is None or not info.text.strip():
            continue
        if type(info.node).__name__ in ("Function", "Param", "PerfDirective"):
            with pytest.raises(EditApplyError):
                apply_script(k, EditScript((Delete(ln, ln),)), operator="t")
            continue
        if isinstance(info.node, (Scope, RegDecl)):
            continue  # a scope's "{" needs its whole span; a deleted .reg is re-declared
        if info.text.strip().endswith(":") and lines[ln].strip().startswith(".callprototype"):
            with pytest.raises(EditApplyError, match=r"names a \.callprototype"):
                apply_script(k, EditScript((Insert(ln, ("membar.gl;",)),)), operator="t")
            continue
        child = apply_script(k, EditScript((Delete(ln, ln),)), operator="t")
        assert solid(child.canonical_ptx.splitlines()) == solid(lines[:ln - 1] + lines[ln:]), ln
        child = apply_script(k, EditScript((Insert(ln, ("membar.gl;",)),)), operator="t")
        assert solid(child.canonical_ptx.splitlines()) == solid([*lines[:ln], "\tmembar.gl;", *lines[ln:]]), ln
        checked += 1
    assert checked > 30


def test_register_declared_only_in_a_sibling_scope_is_redeclared() -> None:
    # half_ops declares `low` in two sibling inline-asm scopes; deleting one scope's .reg must not be hidden
    # by the other scope's declaration
    k = load("half_bf16.ptx", "half_ops")
    reg = next(i.lineno for i in listing(k.module).lines
               if i.function == "half_ops" and i.text.strip().startswith(".reg .f16 \tlow, high"))
    child = apply(k, f"REPLACE {reg}-{reg + 1}\nmov.b32 %r7, %r7;\nEND\n")
    text = child.canonical_ptx
    assert "\t.reg .f16 \tlow;" in text  # declared again, at function level
    assert parse_module(child.ptx) == child.module
    assert_assembles(child)


def test_random_scripts_apply_or_fail_cleanly() -> None:
    """Seeded random scripts over the corpus: each either applies (and prints back to the same AST) or raises
    EditApplyError; nothing else escapes and the parent never changes."""
    import random

    rng = random.Random(7)
    kernels = [load(n, parse_module((DATA / n).read_text()).entries[0].name)
               for n in ("calls_printf.ptx", "inline_asm_scopes.ptx", "half_bf16.ptx", "reduce_shfl.ptx")]
    before = [k.canonical_ptx for k in kernels]
    snippets = ["membar.gl;", "add.s32 %r1, %r1, 1;", "mov.f32 %fz, 0f00000000;", "{", "}", "$L_new:",
                "bra.uni $L_new;", ".reg .b32 %q;", "add.f32 acc, acc, 1.0;", "@%pz bra $L_new;", "ret;"]
    mods = ["nc", "cs", "L1::no_allocate", "ftz", "rn", "v4", "global", "f32"]
    applied = rejected = 0
    for _ in range(300):
        k = rng.choice(kernels)
        n = len(listing(k.module).lines)
        edits = []
        for _ in range(rng.randint(1, 3)):
            a = rng.randint(1, n + 2)
            b = a + rng.randint(0, 4)
            kind = rng.choice("RIDM")
            if kind == "R":
                edits.append(Replace(a, b, tuple(rng.sample(snippets, rng.randint(0, 2)))))
            elif kind == "I":
                edits.append(Insert(a, tuple(rng.sample(snippets, rng.randint(1, 2)))))
            elif kind == "D":
                edits.append(Delete(a, b))
            else:
                edits.append(SetModifier(a, rng.choice([None, *mods]), rng.choice(mods)))
        try:
            child = apply_script(k, EditScript(tuple(edits)), operator="fuzz")
        except EditApplyError:
            rejected += 1
            continue
        assert parse_module(child.ptx) == child.module
        applied += 1
    assert [k.canonical_ptx for k in kernels] == before
    assert applied > 30 and rejected > 30


def test_reprinted_statements_replace_themselves() -> None:
    """What rule operators do: print statements with print_statement and REPLACE their lines with the text;
    every scope of asm_mix (one holds an upper-case `SKIP:` label) comes back unchanged."""
    from population.ast import Scope
    from population.printer import print_statement

    k = load("inline_asm_scopes.ptx", "asm_mix")
    lm = line_map(k.module)
    scopes = [i.node for i in listing(k.module).lines if i.function == "asm_mix" and isinstance(i.node, Scope)]
    assert len(scopes) == 2
    for sc in scopes:
        first, last = lm.span(sc)
        text = print_statement(sc)
        child = apply_script(k, EditScript((Replace(first, last, (text,)),)), operator="t")
        assert child.canonical_ptx == k.canonical_ptx
    assert any("SKIP:" in print_statement(sc) for sc in scopes)
