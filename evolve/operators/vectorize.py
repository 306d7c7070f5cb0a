"""Combine adjacent scalar loads (or stores) into one vector access of up to 16 bytes.

A bandwidth-bound kernel issues one memory instruction per element when its loads are scalar; the LSU and L1
move at most 128 bytes per clock per SM for warp-wide accesses of 4 bytes or more, so 2-byte accesses halve the
ceiling (evaluators.static, step 4) and 16-byte accesses issue a quarter of the instructions of 4-byte ones.
This rewrite is the load/store combining of LLVM's LoadStoreVectorizer at the PTX level:

    ld.global.nc.f32 %f1, [%rd4];       ->    ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd4];
    ld.global.nc.f32 %f2, [%rd4+4];
    ld.global.nc.f32 %f3, [%rd4+8];
    ld.global.nc.f32 %f4, [%rd4+12];

A *run* is ``k`` in {2, 4} (``widths``) scalar ``ld``/``st`` of one straight-line block (``schedule.blocks``)
with the same opcode and modifiers (state space, cache hints, type), the same base register and consecutive
offsets ``o, o + w, ..., o + (k - 1) w`` (``w`` the element bytes), ``k * w <= 16`` and ``o`` a multiple of
``k * w`` (PTX ISA, "Vectors": a vector access must be aligned to its total size; the base register's own
alignment is not known statically: a misaligned access faults and the gate rejects the child). Legality:

- loads: the vector load replaces the first load; every instruction between the first and the last load of the
  run may not write the base register, read or write any destination of a later load of the run, or be a store,
  barrier, fence or atomic (``common.memory_effect``);
- stores: the vector store replaces the last store; the instructions in between may not write the base register
  or any stored value register, and may not touch memory;
- guarded (``@p``) and ordered (``.volatile``, ``.acquire`` ...) accesses are never combined.

The rewrite is registered as ``REWRITE vectorize <line> [width=4|2]`` (``population.edits.register_rewrite``):
``VectorizeOperator`` proposes that one-line edit for a run drawn at random, and an edit script or the LLM
operator may ask for it by name; ``vectorize_edit(kernel, line)`` expands it into the REPLACE of the lines from
the run's first to its last instruction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.common import Site, entry_sites, memory_effect, reads, replace_stmts, writes
from evolve.operators.schedule import blocks
from population.ast import Address, Instruction, Register, Vector
from population.edits import EditScript, Replace, Rewrite, register_rewrite
from population.kernel import Kernel

TYPE_BYTES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2, "b32": 4, "u32": 4,
              "s32": 4, "f32": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8}
SPACES = ("global", "shared")
MAX_BYTES = 16


@dataclass(frozen=True)
class Access:
    """One scalar access: index in its block, opcode, modifiers, base register name, byte offset, element bytes,
    the data register (destination of a load, value of a store)."""

    index: int
    opcode: str
    modifiers: tuple[str, ...]
    base: str
    offset: int
    width: int
    data: Register


def scalar_access(ins: Instruction, index: int) -> Access | None:
    """The Access of a combinable scalar ``ld``/``st`` (module docstring), None otherwise."""
    if ins.opcode not in ("ld", "st") or ins.predicate is not None:
        return None
    mods = ins.modifiers
    if any(m in ("v2", "v4", "v8") for m in mods) or not any(m in SPACES for m in mods):
        return None
    if memory_effect(ins).kind not in ("read", "write"):
        return None  # ordered / async: a barrier
    types = [m for m in mods if m in TYPE_BYTES]
    if len(types) != 1 or len(ins.operands) != 2:
        return None
    addr, data = (ins.operands[1], ins.operands[0]) if ins.opcode == "ld" else ins.operands
    if not isinstance(addr, Address) or not isinstance(addr.base, Register) or not isinstance(data, Register):
        return None
    return Access(index, ins.opcode, mods, addr.base.name, int(addr.offset or 0), TYPE_BYTES[types[0]], data)


def find_runs(instrs: list[Instruction], widths: tuple[int, ...] = (4, 2)) -> list[list[Access]]:
    """Combinable runs in one straight-line block (module docstring), widest first, non-overlapping."""
    acc = [a for i, ins in enumerate(instrs) if (a := scalar_access(ins, i)) is not None]
    runs: list[list[Access]] = []
    used: set[int] = set()
    for k in widths:
        for a in acc:
            if a.index in used or a.offset % (k * a.width) or k * a.width > MAX_BYTES:
                continue
            group = [a]
            for step in range(1, k):
                nxt = next((b for b in acc if b.index > group[-1].index and b.index not in used
                            and b.opcode == a.opcode and b.modifiers == a.modifiers and b.base == a.base
                            and b.offset == a.offset + step * a.width), None)
                if nxt is None:
                    break
                group.append(nxt)
            if len(group) == k and len({g.data.name for g in group}) == k and _legal(instrs, group):
                runs.append(group)
                used.update(g.index for g in group)
    return runs


def _legal(instrs: list[Instruction], run: list[Access]) -> bool:
    first, last = run[0].index, run[-1].index
    members = {g.index for g in run}
    data = {g.data.name for g in run}
    for i in range(first + 1, last):
        if i in members:
            continue
        ins = instrs[i]
        if run[0].base in writes(ins):
            return False
        eff = memory_effect(ins).kind
        if run[0].opcode == "ld":
            later = {g.data.name for g in run if g.index > i}
            if (reads(ins) | writes(ins)) & later or eff in ("write", "barrier"):
                return False
        elif writes(ins) & data or eff != "none":
            return False
    # a member's data register must not be another member's base (a load that feeds the next address)
    return run[0].base not in data


def vector_instruction(instrs: list[Instruction], run: list[Access]) -> Instruction:
    """The one vector ``ld``/``st`` replacing ``run``."""
    a = run[0]
    mods = list(a.modifiers)
    t = next(i for i, m in enumerate(mods) if m in TYPE_BYTES)
    mods.insert(t, f"v{len(run)}")
    vec = Vector(tuple(g.data for g in run))
    addr = Address(Register(a.base), a.offset or None)
    ops = (vec, addr) if a.opcode == "ld" else (addr, vec)
    return Instruction(opcode=a.opcode, modifiers=tuple(mods), operands=ops)


def rewrite_block(instrs: list[Instruction], run: list[Access]) -> list[Instruction]:
    """Instructions ``run[0].index .. run[-1].index`` with the run combined (loads at the first position, stores
    at the last)."""
    first, last = run[0].index, run[-1].index
    members = {g.index for g in run}
    out: list[Instruction] = []
    vec = vector_instruction(instrs, run)
    at = first if run[0].opcode == "ld" else last
    for i in range(first, last + 1):
        if i == at:
            out.append(vec)
        elif i not in members:
            out.append(instrs[i])
    return out


def _runs_with_sites(kernel: Kernel, widths: tuple[int, ...]) -> list[tuple[list[Site], list[Access]]]:
    out = []
    for block in blocks(entry_sites(kernel)):
        instrs = [s.node for s in block]
        out += [(block, run) for run in find_runs(instrs, widths)]
    return out


def vectorize_edit(kernel: Kernel, line: int, widths: tuple[int, ...] = (4, 2)) -> Replace:
    """The REPLACE combining the run whose first access is on canonical ``line`` of ``kernel``'s listing.
    NoProposal naming the line when no combinable run starts there."""
    for block, run in _runs_with_sites(kernel, widths):
        if block[run[0].index].line == line:
            instrs = [s.node for s in block]
            return replace_stmts(line, block[run[-1].index].line, rewrite_block(instrs, run))
    raise NoProposal(f"no combinable run of scalar loads/stores starts at line {line}")


def _expand(kernel: Kernel, line: int, args: dict[str, int]) -> list[Replace]:
    width = args.pop("width", None)
    if args:
        raise ValueError(f"unknown parameter(s) {sorted(args)}; vectorize takes width=2|4")
    if width is not None and width not in (2, 4):
        raise ValueError(f"width={width}: must be 2 or 4")
    try:
        return [vectorize_edit(kernel, line, (width,) if width else (4, 2))]
    except NoProposal as e:
        raise ValueError(str(e)) from None


register_rewrite("vectorize", _expand)


@dataclass
class VectorizeOperator:
    """Combine one run of scalar accesses into a vector access (module docstring).

    widths: vector lengths tried, widest first; weight: sampling weight.
    """

    name: str = "vectorize"
    weight: float = 1.0
    widths: tuple[int, ...] = (4, 2)

    def __post_init__(self) -> None:
        bad = [w for w in self.widths if w not in (2, 4)]
        if bad or not self.widths:
            raise ValueError(f"vectorize operator: widths must be drawn from (2, 4), got {list(self.widths)}")
        self.widths = tuple(sorted(set(self.widths), reverse=True))

    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> EditScript:
        """``REWRITE vectorize <line> width=<k>`` for a run drawn at random. NoProposal when the entry has no
        combinable run."""
        bl = blocks(entry_sites(parent))
        for i in rng.permutation(len(bl)):  # the runs of the first block (in random order) that has any
            block = bl[int(i)]
            runs = find_runs([s.node for s in block], self.widths)
            if runs:
                run = runs[int(rng.integers(len(runs)))]
                return EditScript((Rewrite("vectorize", block[run[0].index].line, (("width", len(run)),)),))
        raise NoProposal(f"entry {parent.entry!r} has no run of adjacent scalar loads or stores to combine")
