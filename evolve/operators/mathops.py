"""Approximate vs exact f32 math swaps (PTX ISA 9.0 §9.7.3 floating-point instructions).

Rewrites, each a REPLACE of the instruction's line(s):

- ``rsqrt.approx.f32 d, a``  ->  ``sqrt.rn.f32 d, a; rcp.rn.f32 d, d`` or ``...; div.rn.f32 d, 1.0, d``
  (each step correctly rounded; two roundings in all)
- ``sqrt.rn.f32 t, a; rcp.rn.f32 d, t`` (adjacent)  ->  ``sqrt.rn.f32 t, a; rsqrt.approx.f32 d, a``
  (``t`` stays defined for any other reader; ptxas drops it when dead)
- ``div.{rn,full,approx}.f32``: move to another of the three (PTX ISA ``div``: ``.approx`` max 2 ulp for
  |b| in [2^-126, 2^126], ``.full`` max 2 ulp everywhere, ``.rn`` IEEE round to nearest)
- ``rcp.{rn,approx}.f32`` and ``sqrt.{rn,approx}.f32``: swap the two
- ``.ftz`` toggles on f32 ``add sub mul fma mad div rcp sqrt rsqrt ex2 lg2 sin cos min max abs neg``
  (flush subnormal inputs and results to sign-preserving zero, §9.7.3)

The rounding mode / approximation modifier is kept in the modifier position the ISA gives (``div.rn.ftz.f32``);
``.ftz`` goes before ``.sat``, ``.NaN``, ``.xorsign``/``.abs`` and the type. Only f32 forms are rewritten: the
f64 forms have no ``.approx``/``.ftz`` variants for these opcodes (ptxas: "Arguments mismatch for 'rsqrt'").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.common import Site, instruction_sites, replace_stmts
from population.ast import Immediate, Instruction, Register
from population.edits import EditScript, Replace
from population.kernel import Kernel

FTZ_OPCODES = frozenset({"add", "sub", "mul", "fma", "mad", "div", "rcp", "sqrt", "rsqrt", "ex2", "lg2", "sin",
                         "cos", "min", "max", "abs", "neg"})
_AFTER_FTZ = ("sat", "NaN", "xorsign", "abs", "relu")
DIV_MODES = ("rn", "full", "approx")
ONE = Immediate("0f3F800000")  # 1.0f as PTX hex float


def _fresh(instr: Instruction, **changes) -> Instruction:
    return replace(instr, loc=None, trivia=None, **changes)


def toggle_ftz(instr: Instruction) -> Instruction | None:
    """``instr`` with ``.ftz`` added or removed, or None when the opcode/type has no ftz form."""
    if instr.opcode not in FTZ_OPCODES or not instr.modifiers or instr.modifiers[-1] != "f32":
        return None
    mods = list(instr.modifiers)
    if "ftz" in mods:
        mods.remove("ftz")
    else:
        pos = next((i for i, m in enumerate(mods) if m in _AFTER_FTZ), len(mods) - 1)
        mods.insert(pos, "ftz")
    return _fresh(instr, modifiers=tuple(mods))


def _swap_mode(instr: Instruction, modes: tuple[str, ...], rng: np.random.Generator) -> Instruction | None:
    mods = list(instr.modifiers)
    cur = next((m for m in mods if m in modes), None)
    if cur is None or mods[-1] != "f32":
        return None
    others = [m for m in modes if m != cur]
    mods[mods.index(cur)] = others[int(rng.integers(len(others)))]
    return _fresh(instr, modifiers=tuple(mods))


@dataclass(frozen=True)
class Rewrite:
    """One possible change: replace canonical lines ``start..end`` by ``stmts``; ``kind`` names the rule."""

    kind: str
    start: int
    end: int
    stmts: tuple[Instruction, ...]


def rewrites(sites: list[Site], rng: np.random.Generator, *, ftz: bool = True) -> list[Rewrite]:
    """Every rewrite the rules allow on the instructions ``sites`` (consecutive sites in one body count as
    adjacent for the sqrt+rcp pattern)."""
    out: list[Rewrite] = []
    for k, s in enumerate(sites):
        ins: Instruction = s.node
        mods = ins.modifiers
        if not mods or mods[-1] != "f32":
            continue
        if ins.opcode == "rsqrt" and "approx" in mods and len(ins.operands) == 2:
            d, a = ins.operands
            keep = tuple(m for m in mods if m == "ftz")
            sq = _fresh(ins, opcode="sqrt", modifiers=("rn", *keep, "f32"), operands=(d, a))
            if rng.random() < 0.5:
                inv = _fresh(ins, opcode="rcp", modifiers=("rn", *keep, "f32"), operands=(d, d))
                out.append(Rewrite("rsqrt->sqrt+rcp", s.line, s.line, (sq, inv)))
            else:
                inv = _fresh(ins, opcode="div", modifiers=("rn", *keep, "f32"), operands=(d, ONE, d))
                out.append(Rewrite("rsqrt->sqrt+div", s.line, s.line, (sq, inv)))
        if ins.opcode == "sqrt" and "rn" in mods and k + 1 < len(sites):
            nxt = sites[k + 1]
            rc: Instruction = nxt.node
            if (nxt.body is s.body and nxt.index == s.index + 1 and rc.opcode == "rcp" and rc.predicate == ins.predicate
                    and len(rc.operands) == 2 and len(ins.operands) == 2 and rc.operands[1] == ins.operands[0]
                    and isinstance(ins.operands[1], Register) and ins.operands[1] != ins.operands[0]):
                keep = tuple(m for m in mods if m == "ftz")
                rs = _fresh(rc, opcode="rsqrt", modifiers=("approx", *keep, "f32"),
                            operands=(rc.operands[0], ins.operands[1]))
                out.append(Rewrite("sqrt+rcp->rsqrt", s.line, nxt.line, (_fresh(ins), rs)))
        if ins.opcode == "div":
            new = _swap_mode(ins, DIV_MODES, rng)
            if new is not None:
                out.append(Rewrite("div mode", s.line, s.line, (new,)))
        if ins.opcode in ("rcp", "sqrt"):
            new = _swap_mode(ins, ("rn", "approx"), rng)
            if new is not None:
                out.append(Rewrite(f"{ins.opcode} mode", s.line, s.line, (new,)))
        if ftz:
            new = toggle_ftz(ins)
            if new is not None:
                out.append(Rewrite("ftz", s.line, s.line, (new,)))
    return out


@dataclass
class MathOpsOperator:
    """Swap one f32 math instruction between its approximate and exact forms, or toggle ``.ftz``
    (module docstring). ``ftz``: whether ``.ftz`` toggles are among the rewrites; ``weight``: sampling weight.
    Rules other than the ftz toggle are preferred (drawn first with probability ``prefer_swaps``) since
    ftz toggles are many and usually minor."""

    name: str = "mathops"
    weight: float = 1.0
    ftz: bool = True
    prefer_swaps: float = 0.7

    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> EditScript:
        """One REPLACE (one or two lines). NoProposal when the entry has no f32 math to rewrite."""
        found = rewrites(instruction_sites(parent), rng, ftz=self.ftz)
        if not found:
            raise NoProposal(f"entry {parent.entry!r} has no f32 math instruction with an approximate/exact or "
                             "ftz alternative")
        swaps = [r for r in found if r.kind != "ftz"]
        pool = swaps if swaps and (len(swaps) == len(found) or rng.random() < self.prefer_swaps) else found
        r = pool[int(rng.integers(len(pool)))]
        edit: Replace = replace_stmts(r.start, r.end, r.stmts)
        return EditScript((edit,))
