"""Semantics of unroll and schedule on crafted kernels, checked by executing parent and child with a small
single-thread PTX interpreter (the subset the crafted kernels use) for many trip counts and inputs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from evolve.operators.base import OperatorContext
from evolve.operators.schedule import ScheduleOperator
from evolve.operators.unroll import UnrollOperator, find_loops
from population.analysis import loops
from population.ast import (
    Address,
    Immediate,
    Instruction,
    Label,
    Negated,
    Register,
    Scope,
    SpecialRegister,
    Symbol,
)
from population.edits import apply_script
from population.kernel import Kernel
from population.parser import parse_module

HEAD = """.version 9.0
.target sm_90
.address_size 64
"""

# Sum x[0..n) into out[0] and count the positive elements into out[1]: a counted loop with an internal
# branch (label inside the body), so the copies must rename it.
LOOP = HEAD + """
.visible .entry loopk(.param .u64 p_x, .param .u32 p_n)
{
    .reg .pred %p<4>;
    .reg .b32 %r<8>;
    .reg .f32 %f<8>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [p_x];
    ld.param.u32 %r1, [p_n];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u64 %rd3, %rd2;
    mov.f32 %f1, 0f00000000;
    mov.u32 %r2, 0;
    mov.u32 %r3, 0;
$L__loop:
    ld.global.f32 %f2, [%rd3];
    add.f32 %f1, %f1, %f2;
    setp.gt.f32 %p2, %f2, 0f00000000;
    @!%p2 bra $L__skip;
    add.s32 %r3, %r3, 1;
$L__skip:
    add.s64 %rd3, %rd3, 4;
    add.s32 %r2, %r2, 1;
    setp.lt.s32 %p1, %r2, %r1;
    @%p1 bra $L__loop;
    st.global.f32 [%rd2], %f1;
    st.global.u32 [%rd2+4], %r3;
    ret;
}
"""


def run(k: Kernel, params: dict[str, int], memory: dict[int, float | int], max_steps: int = 100_000) -> dict:
    """Execute the entry of ``k`` for one thread; returns the final memory (address -> value)."""
    fn = k.module.function(k.entry)
    flat: list = []

    def flatten(body):
        for s in body:
            if isinstance(s, Scope):
                flatten(s.body)
            else:
                flat.append(s)

    flatten(fn.body)
    labels = {s.name: i for i, s in enumerate(flat) if isinstance(s, Label)}
    regs: dict[str, object] = {}
    mem = dict(memory)

    def val(o):
        if isinstance(o, Register):
            return regs[o.name]
        if isinstance(o, Negated):
            return not regs[o.operand.name]
        if isinstance(o, Immediate):
            v = o.value
            return np.float32(v) if isinstance(v, float) else v
        if isinstance(o, SpecialRegister):
            return 0
        raise AssertionError(f"operand {o!r} not supported")

    def addr(o: Address) -> int:
        base = params[o.base.name] if isinstance(o.base, Symbol) else regs[o.base.name]
        return int(base) + (o.offset or 0)

    pc = steps = 0
    while pc < len(flat):
        steps += 1
        assert steps < max_steps, "runaway loop"
        s = flat[pc]
        pc += 1
        if not isinstance(s, Instruction):
            continue
        if s.predicate is not None and bool(regs[s.predicate.register.name]) == s.predicate.negated:
            continue
        op, mods, ops = s.opcode, s.modifiers, s.operands
        if op == "ret":
            break
        if op == "bra":
            pc = labels[ops[0].name]
            continue
        if op == "ld":
            a = addr(ops[1])
            regs[ops[0].name] = params[ops[1].base.name] if "param" in mods else mem[a]
        elif op == "st":
            mem[addr(ops[0])] = val(ops[1])
        elif op in ("mov", "cvta"):
            regs[ops[0].name] = val(ops[1])
        elif op == "add":
            a, b = val(ops[1]), val(ops[2])
            regs[ops[0].name] = np.float32(a + b) if mods[-1] == "f32" else int(a) + int(b)
        elif op == "setp":
            a, b = val(ops[1]), val(ops[2])
            regs[ops[0].name] = {"lt": a < b, "gt": a > b, "ge": a >= b, "le": a <= b}[mods[0]]
        else:
            raise AssertionError(f"instruction {s.full_opcode} not supported by the test interpreter")
    return mem


def _inputs(n: int, seed: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    base = 4096
    xs = rng.standard_normal(n).astype(np.float32)
    mem = {base + 4 * i: np.float32(v) for i, v in enumerate(xs)}
    return {"p_x": base, "p_n": n}, mem


@pytest.mark.parametrize("factor", [2, 3, 4])
def test_unroll_keeps_semantics_for_every_trip_count(factor):
    k = Kernel(module=parse_module(LOOP), entry="loopk")
    child = apply_script(k, UnrollOperator(factors=(factor,)).propose(k, OperatorContext(None),
                                                                       np.random.default_rng(0)),
                         operator="unroll")
    # each copy after the first renamed the internal label
    names = [s.name for s in child.module.function("loopk").body if isinstance(s, Label)]
    assert len(names) == len(set(names)) and sum(n.startswith("$L__skip") for n in names) == factor
    for n in range(1, 12):
        params, mem = _inputs(n, seed=n)
        want = run(k, params, mem)
        got = run(child, params, mem)
        assert got == want, f"factor {factor}, n={n}"


def test_textual_loops_agree_with_cfg_loops():
    k = Kernel(module=parse_module(LOOP), entry="loopk")
    fn = k.module.function("loopk")
    (found,) = find_loops(fn)
    cfg_loops = loops(fn)
    assert len(cfg_loops) == 1 and len(cfg_loops[0].latches) == 1
    assert found.label == "$L__loop"


STRAIGHT = HEAD + """
.visible .entry straight(.param .u64 p_x, .param .u32 p_n)
{
    .reg .pred %p<4>;
    .reg .b32 %r<8>;
    .reg .f32 %f<12>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [p_x];
    ld.param.u32 %r1, [p_n];
    cvta.to.global.u64 %rd2, %rd1;
    ld.global.f32 %f1, [%rd2];
    ld.global.f32 %f2, [%rd2+4];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd2+8], %f3;
    ld.global.f32 %f4, [%rd2+8];
    add.f32 %f5, %f4, %f1;
    ld.global.f32 %f6, [%rd2+12];
    setp.gt.f32 %p1, %f6, %f5;
    add.f32 %f7, %f6, %f6;
    @%p1 add.f32 %f7, %f5, %f5;
    st.global.f32 [%rd2+12], %f7;
    ld.global.f32 %f8, [%rd2+12];
    add.s32 %r2, %r1, 3;
    add.f32 %f9, %f8, %f2;
    st.global.f32 [%rd2+16], %f9;
    st.global.u32 [%rd2+20], %r2;
    ret;
}
"""


def test_schedule_keeps_semantics():
    k = Kernel(module=parse_module(STRAIGHT), entry="straight")
    op = ScheduleOperator()
    orders = set()
    for seed in range(40):
        child = apply_script(k, op.propose(k, OperatorContext(None), np.random.default_rng(seed)),
                             operator="schedule")
        orders.add(child.canonical_ptx)
        for n in (4, 5):
            params, mem = _inputs(n, seed=seed)
            assert run(child, params, mem) == run(k, params, mem)
    assert len(orders) >= 3


def test_schedule_keeps_carry_chains_in_order():
    from evolve.operators.schedule import dependence_graph
    from population.parser import parse_statements

    instrs = parse_statements("""
        add.cc.u32 %r3, %r1, %r2;
        mov.u32 %r9, 5;
        addc.cc.u32 %r4, %r5, %r6;
        add.cc.u32 %r7, %r1, %r1;
        addc.u32 %r8, %r2, %r2;
    """)
    g = dependence_graph(instrs)
    import networkx as nx

    chain = [0, 2, 3, 4]
    for a, b in itertools.pairwise(chain):
        assert nx.has_path(g, a, b), (a, b)
    assert not nx.has_path(g, 0, 1) and not nx.has_path(g, 1, 4)  # the mov is free to move


def test_crossover_of_scheduled_and_unrolled_lineages_keeps_semantics():
    from evolve.operators.crossover import crossover

    ctx = OperatorContext(None)
    k = Kernel(module=parse_module(STRAIGHT), entry="straight")
    sched = [apply_script(k, ScheduleOperator().propose(k, ctx, np.random.default_rng(s)), operator="schedule")
             for s in range(6)]
    children = 0
    for i, a in enumerate(sched):
        for b in sched[i + 1:]:
            for seed in range(4):
                try:
                    script = crossover(a, b, np.random.default_rng(seed))
                except Exception as e:  # identical parents have nothing to cross
                    assert type(e).__name__ == "NoProposal"
                    continue
                child = apply_script(a, script, operator="crossover")
                for n in (4, 6):
                    params, mem = _inputs(n, seed=seed)
                    assert run(child, params, mem) == run(k, params, mem), script.to_text()
                children += 1
    assert children >= 10
    loop = Kernel(module=parse_module(LOOP), entry="loopk")
    unrolled = apply_script(loop, UnrollOperator(factors=(2,)).propose(loop, ctx, np.random.default_rng(0)),
                            operator="unroll")
    for a, b in ((loop, unrolled), (unrolled, loop)):
        child = apply_script(a, crossover(a, b, np.random.default_rng(0)), operator="crossover")
        for n in range(1, 8):
            params, mem = _inputs(n, seed=n)
            assert run(child, params, mem) == run(loop, params, mem)
