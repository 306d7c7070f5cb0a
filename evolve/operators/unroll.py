"""Unroll simple loops by a factor k, keeping the exit test between copies (correct for any trip count).

A loop here is the textual form nvcc emits: a label ``L`` and, later in the same body list, the loop's only back
edge ``[@p] bra L`` ending it::

    L:                      L:
      body                    body
      @p bra L;     ->        @!p bra L_x;      (the test, inverted, leaves after any copy)
                              body'             (internal labels renamed)
                              @p bra L;
                            L_x:

For an unconditional back edge (the loop leaves from inside its body) the copies simply follow each other.
Labels inside the body get a ``_u<copy>`` suffix in every copy after the first (and in the first too when their
name cannot start an edit-script line, e.g. inline-asm labels in upper case, which get a ``$`` prefix).
Each thread executes exactly the dynamic instruction sequence it executed before, so the transformation keeps
semantics for any trip count, including barriers and warp-synchronous instructions executed in the body.

Loops are skipped when another branch also jumps back to ``L`` from inside or after it (several back edges),
when a branch from outside jumps into the body, when the body declares registers or variables at its own level
(a copy would redefine them), when the function uses ``brx.idx`` (targets unknown), or when the body is longer
than ``max_body`` instructions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.common import (
    entry_function,
    entry_sites,
    labels_of,
    replace_stmts,
    walk,
)
from population.analysis import branch_target, flat_instructions
from population.ast import (
    Directive,
    Function,
    Instruction,
    Label,
    Predicate,
    RegDecl,
    Scope,
    Statement,
    Symbol,
    VarDecl,
)
from population.edits import EditScript
from population.kernel import Kernel

DEBUG_DIRECTIVES = ("loc", "file", "section")


@dataclass(frozen=True)
class SimpleLoop:
    """A loop found in ``body``: ``header`` is the index of label ``label``, ``latch`` the index of the back-edge
    ``bra``; the body is ``body[header + 1 : latch]``."""

    label: str
    body: list
    header: int
    latch: int

    @property
    def statements(self) -> list[Statement]:
        return self.body[self.header + 1 : self.latch]

    @property
    def branch(self) -> Instruction:
        return self.body[self.latch]


def _bodies(fn: Function) -> list[list[Statement]]:
    out = [fn.body or []]
    out += [s.body for s in walk(fn.body or []) if isinstance(s, Scope)]
    return out


def find_loops(fn: Function, *, max_body: int = 400) -> list[SimpleLoop]:
    """Every loop of ``fn`` the transformation may unroll (module docstring), innermost-first not guaranteed."""
    all_ins = flat_instructions(fn)
    if any(i.opcode == "brx" for i in all_ins):
        return []
    found: list[SimpleLoop] = []
    for body in _bodies(fn):
        label_at = {s.name: k for k, s in enumerate(body) if isinstance(s, Label)}
        for t, s in enumerate(body):
            if not isinstance(s, Instruction) or branch_target(s) not in label_at:
                continue
            h = label_at[branch_target(s)]
            if h >= t:
                continue
            loop = SimpleLoop(body[h].name, body, h, t)
            if _simple(loop, all_ins, max_body):
                found.append(loop)
    return found


def _simple(loop: SimpleLoop, all_ins: list[Instruction], max_body: int) -> bool:
    inside = list(walk(loop.statements))
    inside_ins = [s for s in inside if isinstance(s, Instruction)]
    if not inside_ins or len(inside_ins) > max_body:
        return False
    if any(isinstance(s, RegDecl | VarDecl) for s in loop.statements):
        return False
    inner_labels = {s.name for s in inside if isinstance(s, Label)}
    inside_ids = {id(s) for s in inside_ins} | {id(loop.branch)}
    for ins in all_ins:
        tgt = branch_target(ins)
        if tgt is None:
            continue
        if tgt == loop.label and id(ins) in inside_ids and ins is not loop.branch:
            return False  # a second back edge from inside
        if tgt == loop.label and id(ins) not in inside_ids and _after(loop, ins):
            return False  # a back edge from after the loop
        if tgt in inner_labels and id(ins) not in inside_ids:
            return False  # a jump into the body
    return True


def _after(loop: SimpleLoop, ins: Instruction) -> bool:
    after = loop.body[loop.latch + 1 :]
    return any(s is ins for s in walk(after))


def _rename(stmt: Statement, names: dict[str, str]) -> Statement:
    if isinstance(stmt, Label):
        return replace(stmt, name=names.get(stmt.name, stmt.name), loc=None, trivia=None)
    if isinstance(stmt, Instruction):
        ops = tuple(Symbol(names[o.name]) if isinstance(o, Symbol) and o.name in names else o
                    for o in stmt.operands)
        return replace(stmt, operands=ops, loc=None, trivia=None)
    if isinstance(stmt, Scope):
        return replace(stmt, body=[_rename(s, names) for s in stmt.body], loc=None, trivia=None,
                       closing_trivia=None)
    return stmt


def unrolled(loop: SimpleLoop, factor: int, taken: set[str]) -> list[Statement]:
    """The statements replacing ``body[header + 1 : latch + 1]``: ``factor`` copies of the body with the
    inverted exit test between them, the original back edge, and the new exit label."""
    if factor < 2:
        raise ValueError(f"unroll factor must be >= 2, got {factor}")
    stmts = [s for s in loop.statements if not (isinstance(s, Directive) and s.name in DEBUG_DIRECTIVES)]
    inner = {s.name for s in walk(stmts) if isinstance(s, Label)}
    br = loop.branch
    exit_label = None
    test = None
    if br.predicate is not None:
        exit_label = _fresh_label(taken, f"{_writable_stem(loop.label)}_x")
        taken.add(exit_label)
        test = replace(br, predicate=Predicate(br.predicate.register, not br.predicate.negated),
                       operands=(*br.operands[:-1], Symbol(exit_label)), loc=None, trivia=None)
    out: list[Statement] = []
    for c in range(factor):
        names: dict[str, str] = {}
        for n in sorted(inner):
            if c or not _writable(n):
                names[n] = _fresh_label(taken, f"{_writable_stem(n)}_u{c}")
                taken.add(names[n])
        out.extend(_rename(s, names) for s in stmts)
        if c < factor - 1 and test is not None:
            out.append(test)
    out.append(replace(br, loc=None, trivia=None))
    if exit_label is not None:
        out.append(Label(exit_label))
    return out


def _writable(label: str) -> bool:
    """Whether ``label:`` can be a line of an edit script (PTX lines start with a lower-case letter or one of
    ``$ . _ %``; nvcc's ``$L__BB0_3`` can, an inline-asm ``WAIT`` cannot)."""
    return bool(label) and (label[0].islower() or label[0] in "$._%")


def _writable_stem(label: str) -> str:
    """``label`` itself when writable, else ``$`` + label (a legal PTX identifier start, PTX ISA §4.4)."""
    return label if _writable(label) else "$" + label


def _fresh_label(taken: set[str], stem: str) -> str:
    if stem not in taken:
        return stem
    i = 1
    while f"{stem}{i}" in taken:
        i += 1
    return f"{stem}{i}"


@dataclass
class UnrollOperator:
    """Unroll one loop of the entry by a factor from ``factors`` (module docstring).

    factors: unroll factors drawn uniformly; max_body: largest loop body (instructions) considered;
    weight: sampling weight.
    """

    name: str = "unroll"
    weight: float = 1.0
    factors: tuple[int, ...] = (2, 4)
    max_body: int = 400

    def __post_init__(self) -> None:
        if not self.factors or any(int(f) < 2 for f in self.factors):
            raise ValueError(f"unroll operator: factors must be integers >= 2, got {list(self.factors)}")
        self.factors = tuple(int(f) for f in self.factors)

    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> EditScript:
        """One REPLACE from the first body line after the loop label through the back edge. NoProposal when the
        entry has no loop of the simple form."""
        fn = entry_function(parent)
        found = find_loops(fn, max_body=self.max_body)
        if not found:
            raise NoProposal(f"entry {parent.entry!r} has no loop with a single back edge to unroll")
        loop = found[int(rng.integers(len(found)))]
        factor = self.factors[int(rng.integers(len(self.factors)))]
        lines = {id(s.node): s.line for s in entry_sites(parent)}
        listed = [s for s in loop.body[loop.header + 1 : loop.latch + 1] if id(s) in lines]
        start, end = lines[id(listed[0])], lines[id(loop.branch)]
        taken = labels_of(fn)
        return EditScript((replace_stmts(start, end, unrolled(loop, factor, taken)),))
