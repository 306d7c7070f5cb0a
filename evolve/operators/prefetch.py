"""L2 prefetch insertion ahead of a global load inside a loop (PTX ISA 9.0 ``prefetch``, ``prefetchu``).

For a ``ld.global`` in a loop body (``unroll.find_loops``; the loop need not be unrollable, any textual loop
``L: ... bra L`` counts) with address ``[%rdX+off]``, the operator puts
``prefetch.global.L2 [%rdX+off+d]`` (or ``.L2::evict_last``, which keeps the line resident longer) right before
the load, so the line for a later iteration is requested ``d`` bytes ahead. The distance is ``ahead`` iterations
of the loop's stride: the immediate of an ``add`` that advances ``%rdX`` by a constant in the loop when there is
one, else (the block-strided loops nvcc emits for ``for (i = tid; i < n; i += blockDim.x)``) the launch's
threads per CTA times the load's width in bytes.

A prefetch does not change any value the program computes; its address is not required to be inside the buffer
for correctness of the results, and the gate and compute-sanitizer judge the child as for any other edit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.common import address_operand, entry_function, entry_sites, replace_stmts, walk
from evolve.operators.unroll import find_loops
from population.analysis import TYPE_BITS
from population.ast import Address, Immediate, Instruction, Register
from population.edits import EditScript
from population.kernel import Kernel

VARIANTS = ("L2", "L2::evict_last")
MAX_OFFSET = 1 << 24  # keep the immediate well inside the signed 32-bit offset range


def access_bytes(instr: Instruction) -> int:
    """Bytes one thread reads with ``instr``: vector width times the element type's size (``.v4.f32`` -> 16;
    sizes from ``population.defuse.TYPE_BITS``, 4 bytes for a type it does not list)."""
    vec = 1
    for m in instr.modifiers:
        if m in ("v2", "v4", "v8"):
            vec = int(m[1:])
    typ = instr.modifiers[-1] if instr.modifiers else "b32"
    return vec * max(TYPE_BITS.get(typ, 32) // 8, 1)


def constant_stride(loop_instrs: list[Instruction], reg: str) -> int | None:
    """The immediate ``c`` of an ``add.{s64,u64} reg, reg, c`` inside the loop (a pointer bumped by ``c`` bytes
    per iteration), else None."""
    for ins in loop_instrs:
        if (ins.opcode == "add" and len(ins.operands) == 3 and ins.operands[0] == Register(reg)
                and ins.operands[1] == Register(reg) and isinstance(ins.operands[2], Immediate)):
            v = ins.operands[2].value
            if isinstance(v, int) and v != 0:
                return v
    return None


@dataclass(frozen=True)
class Candidate:
    """A load to prefetch for: its canonical ``line``, the load, and the loop's instructions."""

    line: int
    load: Instruction
    loop_instrs: tuple[Instruction, ...]


@dataclass
class PrefetchOperator:
    """Insert an L2 prefetch ahead of one global load in a loop (module docstring).

    ahead: iteration distances drawn from; variants: prefetch forms (``"L2"``, ``"L2::evict_last"``);
    weight: sampling weight.
    """

    name: str = "prefetch"
    weight: float = 1.0
    ahead: tuple[int, ...] = (1, 2, 4, 8)
    variants: tuple[str, ...] = VARIANTS

    def __post_init__(self) -> None:
        bad = [v for v in self.variants if v not in VARIANTS]
        if bad or not self.variants or not self.ahead or any(int(a) < 1 for a in self.ahead):
            raise ValueError(f"prefetch operator: variants must be from {list(VARIANTS)} and ahead >= 1, got "
                             f"variants={list(self.variants)} ahead={list(self.ahead)}")
        self.variants, self.ahead = tuple(self.variants), tuple(int(a) for a in self.ahead)

    def candidates(self, parent: Kernel) -> list[Candidate]:
        """Global loads in loops with a register base address and no prefetch of that base right before."""
        fn = entry_function(parent)
        lines = {id(s.node): s.line for s in entry_sites(parent)}
        out: list[Candidate] = []
        seen: set[int] = set()
        for loop in find_loops(fn, max_body=10**6):
            stmts = loop.body[loop.header + 1 : loop.latch + 1]
            instrs = [s for s in walk(stmts) if isinstance(s, Instruction)]
            for k, ins in enumerate(instrs):
                if ins.opcode != "ld" or "global" not in ins.modifiers or id(ins) in seen or id(ins) not in lines:
                    continue
                addr = address_operand(ins)
                if addr is None or not isinstance(addr.base, Register):
                    continue
                prev = instrs[k - 1] if k else None
                if prev is not None and prev.opcode == "prefetch" and isinstance(prev.operands[0], Address) \
                        and prev.operands[0].base == addr.base:
                    continue
                seen.add(id(ins))
                out.append(Candidate(lines[id(ins)], ins, tuple(instrs)))
        return out

    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> EditScript:
        """A REPLACE of the load's line with ``prefetch`` + the load. NoProposal when no global load in a loop
        lacks a prefetch."""
        cands = self.candidates(parent)
        if not cands:
            raise NoProposal(f"entry {parent.entry!r} has no global load inside a loop without a prefetch")
        c = cands[int(rng.integers(len(cands)))]
        addr = address_operand(c.load)
        stride = constant_stride(list(c.loop_instrs), addr.base.name)
        if stride is None:
            stride = parent.launch.threads * access_bytes(c.load)
        ahead = self.ahead[int(rng.integers(len(self.ahead)))]
        dist = max(-MAX_OFFSET, min(MAX_OFFSET, stride * ahead))
        variant = self.variants[int(rng.integers(len(self.variants)))]
        pf = Instruction("prefetch", ("global", variant), (Address(addr.base, (addr.offset or 0) + dist),))
        return EditScript((replace_stmts(c.line, c.line, [pf, c.load]),))
