"""The input-store check's answers to red-team round 12 (tests/test_redteam_round12.py): calls through ``.alias``
and calls of functions without a body, module variables whose initialisers hold addresses, and pointers
subtracted (``y + (c - y)``), on hand-written entries k(x, y, n) (tests/test_input_stores.py: %rd3 = x, %rd4 = y,
%rd6 = x + 4 tid, %rd7 = y + 4 tid, %f1 = x[tid])."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_input_stores import HEAD, KINDS, TAIL

from evaluators.input_stores import UNKNOWN, input_stores, provenance
from evaluators.race_lint import race_lint
from population.ast import Directive
from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module
from population.printer import print_module

DATA = Path(__file__).parent / "data"
NAMES = ["x", "y", "n"]
TOP = ".address_size 64\n"


def kernel(body: str, globals_: str = "") -> Kernel:
    text = (HEAD + body + TAIL).replace(TOP, TOP + globals_, 1)
    return Kernel(parse_module(text), "k", LaunchConfig(block=(32, 1, 1)))


def check(body: str, globals_: str = ""):
    return input_stores(kernel(body, globals_), KINDS, NAMES)


def store_roots(k: Kernel) -> frozenset[str]:
    """``Provenance.address_roots`` of the entry's last global store."""
    prov = provenance(k)
    st = [i for i in prov.instructions if i.opcode == "st" and "global" in i.modifiers]
    return prov.address_roots(st[-1])


# ------------------------------------------------------------------------------------------ .alias and calls
PUT = (".func put(.param .b64 p, .param .b32 v)\n{\n\t.reg .b64 %rd<2>;\n\t.reg .b32 %r<2>;\n"
       "\tld.param.u64 %rd1, [p];\n\tld.param.b32 %r1, [v];\n\tst.global.u32 [%rd1], %r1;\n\tret;\n}\n")
PROTO = ".func {name}(.param .b64 p, .param .b32 v);\n"


def call(target: str, ptr: str) -> str:
    return ("\t{\n\t.param .b64 param0;\n\tst.param.b64 [param0], " + ptr + ";\n\t.param .b32 param1;\n"
            "\tst.param.b32 [param1], %r2;\n\tcall.uni " + target + ", (param0, param1);\n\t}\n")


def test_the_parser_keeps_an_alias_as_a_directive_that_prints_back():
    """``.alias fAlias, fAliasee;`` (PTX ISA "Kernel and Function Directives: .alias"): a top-level Directive named
    ``alias`` with the two names as its text; the prototype is a Function without a body; the module prints back."""
    text = (HEAD + TAIL).replace(TOP, TOP + PUT + PROTO.format(name="put_alias") + ".alias put_alias, put;\n", 1)
    m = parse_module(text)
    alias = [it for it in m.items if isinstance(it, Directive)]
    assert [(d.name, d.text) for d in alias] == [("alias", "put_alias, put")]
    assert m.function("put_alias").body is None and m.function("put").body is not None
    assert print_module(m) == text


@pytest.mark.parametrize("aliases, target", [
    (PROTO.format(name="put_alias") + ".alias put_alias, put;\n", "put_alias"),
    # a chain (ptxas 13.0 accepts it): put2 -> put1 -> put
    (PROTO.format(name="put1") + ".alias put1, put;\n" + PROTO.format(name="put2") + ".alias put2, put1;\n", "put2"),
])
def test_a_call_through_an_alias_is_followed_to_the_aliasee(aliases, target):
    bad = input_stores(kernel(call(target, "%rd6"), PUT + aliases), KINDS, NAMES)
    assert [s.param for s in bad.stores] == ["x"] and "in function 'put'" in bad.stores[0].why
    assert "st.global.u32" in bad.stores[0].text
    good = kernel(call(target, "%rd7"), PUT + aliases)
    assert input_stores(good, KINDS, NAMES).ok
    prov = provenance(good)
    assert [f.name for f in prov.functions] == ["k", "put"]
    assert prov.called(next(i for i in prov.instructions if i.opcode == "call")) == ["put"]


@pytest.mark.parametrize("decl, target", [
    (PROTO.format(name="put_alias") + ".alias put_alias, nothing;\n", "put_alias"),  # an alias of no body
    (".extern " + PROTO.format(name="ext"), "ext"),
    (PROTO.format(name="proto"), "proto"),
])
def test_a_call_of_a_function_without_a_body_is_rejected_with_its_line(decl, target):
    rep = check(call(target, "%rd7"), decl)
    assert len(rep.stores) == 1 and rep.stores[0].param == ""
    s = rep.stores[0]
    assert s.text.strip().startswith("call.uni") and f"calls {target!r}" in s.why and "no CUDA system call" in s.why
    assert s.line > 0 and "line" in rep.reason()


@pytest.mark.parametrize("name", ["vprintf", "malloc", "free", "__assertfail"])
def test_a_call_of_a_system_function_is_not_a_finding(name):
    decl = f".extern .func (.param .b32 func_retval0) {name}(.param .b64 a, .param .b64 b);\n"
    body = ("\t{\n\t.param .b64 param0;\n\tst.param.b64 [param0], %rd7;\n\t.param .b64 param1;\n"
            "\tst.param.b64 [param1], %rd7;\n\t.param .b32 retval0;\n"
            f"\tcall.uni (retval0), {name}, (param0, param1);\n\t}}\n\tst.global.f32 [%rd7], %f1;\n")
    assert check(body, decl).ok


INDIRECT = ("\tmov.u64 %rd8, put;\n\t{\n\t.param .b64 param0;\n\tst.param.b64 [param0], %rd7;\n\t.param .b32 param1;\n"
            "\tst.param.b32 [param1], %r2;\n\tprototype_0 : .callprototype ()_ (.param .b64 _, .param .b32 _);\n"
            "\tcall %rd8, (param0, param1), prototype_0;\n\t}\n")


def test_an_indirect_call_is_rejected_only_where_it_may_reach_a_function_without_a_body():
    assert check(INDIRECT, PUT).ok
    rep = check(INDIRECT, PUT + PROTO.format(name="proto"))
    assert len(rep.stores) == 1 and "may reach 'proto'" in rep.stores[0].why
    assert check(INDIRECT, PUT + PROTO.format(name="put_alias") + ".alias put_alias, put;\n").ok


def test_the_printf_corpus_calls_pass():
    """tests/data/calls_printf.ptx: direct calls of a function with a body, of vprintf, and an indirect call."""
    m = parse_module((DATA / "calls_printf.ptx").read_text())
    for fn in m.functions:
        if fn.kind == "entry" and fn.body is not None:
            kinds = ["output"] * len(fn.params)
            rep = input_stores(Kernel(m, fn.name, LaunchConfig(block=(32, 1, 1))), kinds)
            assert rep.ok, rep.reason()


# ------------------------------------------------------------------------------------------ initialisers
COUNTER = ".global .align 4 .u32 counter;\n"


@pytest.mark.parametrize("cell", [
    ".global .align 8 .u64 cell = counter;\n",
    ".global .align 8 .u64 cell[2] = {counter, counter+4};\n",
    ".global .align 8 .u64 cell = generic(counter)+8;\n",
])
def test_a_variable_initialised_with_an_address_gives_its_loads_that_root(cell):
    """``.global .u64 cell = counter;`` (PTX ISA "Variables: Initializers"): a load of cell returns counter's
    address, so a store through it names counter (a module variable: the input-store check accepts it, race lint
    rule 5 finds the write into a .global variable)."""
    k = kernel("\tld.global.u64 %rd8, [cell];\n\tst.global.u32 [%rd8], %r2;\n", COUNTER + cell)
    assert input_stores(k, KINDS, NAMES).ok
    assert "s:counter" in store_roots(k)
    rep = race_lint(k, None, launch_state_ok=False)
    assert any(f.kind == "launch_state" and "'counter'" in f.why for f in rep.findings), rep.reason()


def test_numeric_initialisers_give_no_roots():
    k = kernel("\tld.global.u64 %rd8, [tbl];\n\tst.global.u32 [%rd8], %r2;\n",
               COUNTER + ".global .align 8 .u64 tbl[3] = {0x10, 0f3F800000, 12};\n")
    rep = input_stores(k, KINDS, NAMES)
    assert not rep.ok and "no provenance" in rep.stores[0].why


# ------------------------------------------------------------------------------------------ subtraction
def test_y_plus_the_distance_of_a_variable_from_y_names_the_variable():
    """rt12_cancel_global_state's form: ``y + (c - y)`` with c a module variable's address (here loaded from a
    variable initialised with it): accepted by the input-store check (c is the kernel's), and its roots hold c,
    so race lint rule 5 sees the write into the .global variable."""
    body = ("\tld.global.u64 %rd8, [cell];\n\tsub.s64 %rd9, %rd8, %rd4;\n\tadd.s64 %rd10, %rd4, %rd9;\n"
            "\tst.global.u32 [%rd10], %r2;\n")
    k = kernel(body, COUNTER + ".global .align 8 .u64 cell = counter;\n")
    assert input_stores(k, KINDS, NAMES).ok
    assert store_roots(k) == {"p1", "s:counter"}
    rep = race_lint(k, None, launch_state_ok=False)
    assert [f.kind for f in rep.findings] == ["launch_state"] and "'counter'" in rep.findings[0].why


@pytest.mark.parametrize("distance", [
    "\tmov.u64 %rd8, 4096;\n\tsub.s64 %rd9, %rd8, %rd4;\n",  # K - y
    "\tneg.s64 %rd11, %rd4;\n\tadd.s64 %rd9, %rd11, 4096;\n",  # K + (-y)
    "\tnot.b64 %rd11, %rd4;\n\tadd.s64 %rd9, %rd11, 4097;\n",  # K + ~y + 1
    "\tsub.s64 %rd11, 0, %rd4;\n\tst.global.u64 [%rd7], %rd11;\n\tld.global.u64 %rd9, [%rd7];\n",  # -y via memory
])
def test_y_plus_its_distance_from_an_address_no_pointer_vouches_for_is_rejected(distance):
    rep = check(distance + "\tadd.s64 %rd10, %rd4, %rd9;\n\tst.global.u32 [%rd10], %r2;\n")
    assert len(rep.stores) == 1 and "no pointer vouches" in rep.stores[0].why and "'y'" in rep.stores[0].why
    assert "[%rd10]" in rep.stores[0].text


def test_a_load_at_a_cancelled_address_is_unknown_to_the_other_checks():
    k = kernel("\tmov.u64 %rd8, 4096;\n\tsub.s64 %rd9, %rd8, %rd4;\n\tadd.s64 %rd10, %rd4, %rd9;\n"
               "\tld.global.u32 %r3, [%rd10];\n\tst.global.u32 [%rd7], %r3;\n")
    prov = provenance(k)
    ld = [i for i in prov.instructions if i.opcode == "ld" and "global" in i.modifiers][-1]
    assert prov.address_roots(ld) == {"p1", UNKNOWN}


@pytest.mark.parametrize("body", [
    "\tsub.s64 %rd11, %rd6, %rd3;\n\tadd.s64 %rd12, %rd4, %rd11;\n\tst.global.f32 [%rd12], %f1;\n",  # y + (p - x)
    "\tadd.s64 %rd11, %rd4, 64;\n\tsub.s64 %rd12, %rd11, %rd4;\n\tadd.s64 %rd13, %rd7, %rd12;\n"
    "\tst.global.f32 [%rd13], %f1;\n",  # an offset from two y pointers
    "\tand.b64 %rd11, %rd7, 15;\n\tsub.s64 %rd12, %rd7, %rd11;\n\tst.global.f32 [%rd12], %f1;\n",  # align down
    "\tsub.s64 %rd11, %rd4, %rd3;\n\tsetp.lt.s64 %p1, %rd11, 4096;\n\t@%p1 st.global.f32 [%rd7], %f1;\n",  # y - x
    "\tsub.s64 %rd11, %rd4, %rd3;\n\tcvt.u32.u64 %r3, %rd11;\n\tst.global.u32 [%rd7], %r3;\n",  # stored as data
    "\tsub.s64 %rd11, %rd7, 4;\n\tst.global.f32 [%rd11], %f1;\n",  # y - 4
    "\tneg.s64 %rd11, %rd4;\n\tand.b64 %rd12, %rd11, 15;\n\tadd.s64 %rd13, %rd4, %rd12;\n"
    "\tst.global.f32 [%rd13], %f1;\n",  # y + (-y & 15): an alignment peel
    "\tmul.wide.u32 %rd11, %r2, 8;\n\tadd.s64 %rd12, %rd4, %rd11;\n\tst.global.f32 [%rd12], %f1;\n",  # y + i * 8
])
def test_honest_pointer_arithmetic_is_unaffected(body):
    rep = check(body)
    assert rep.ok, rep.reason()
    assert store_roots(kernel(body)) == {"p1"}


def test_a_difference_of_x_from_y_added_to_y_is_still_an_x_address():
    rep = check("\tsub.s64 %rd11, %rd3, %rd4;\n\tadd.s64 %rd12, %rd4, %rd11;\n\tst.global.f32 [%rd12], %f1;\n")
    assert [s.param for s in rep.stores] == ["x"]
