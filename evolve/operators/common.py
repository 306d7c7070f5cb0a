"""Helpers shared by the structural operators.

- ``entry_sites``: every statement of the parent's entry with its line in the canonical listing
  (``population.printer.listing``), which is what edit scripts address.
- ``memory_effect``: how an instruction touches memory, for scheduling and alias questions (PTX ISA 9.0 "Data Movement
  and Conversion" and "Parallel Synchronization and Communication" instructions, §8 memory consistency model).
- ``pointer_roots``: which pointer parameters (or shared variables) an address register derives from, by walking
  register definitions backwards.
- ``print_lines`` / ``replace_stmts``: turn AST statements into the PTX lines of a REPLACE or INSERT edit.
"""

from __future__ import annotations

import re
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from evolve.operators.base import NoProposal
from population.analysis import declared_registers, destinations, flat_instructions, sources
from population.analysis import definitions as _definitions
from population.ast import (
    Address,
    Function,
    Instruction,
    Label,
    Module,
    Operand,
    Param,
    Predicate,
    Register,
    Scope,
    SpecialRegister,
    Statement,
    Symbol,
)
from population.edits import Edit, Insert, Replace
from population.kernel import Kernel
from population.printer import Listing, listing, print_statement

# PTX ISA §5.1 state spaces as they appear among an instruction's modifiers ("shared::cta" counts as shared).
STATE_SPACES = ("global", "shared", "local", "param", "const", "tex", "generic")

# Opcodes with no memory or synchronisation effect: they read and write registers only (PTX ISA integer,
# floating-point, comparison, logic and shift instructions; mov/cvt/cvta/prmt/shfl; warp-level vote/match/redux
# act on registers). Carry-flag chains (add.cc/addc ...) are ordered through the pseudo register CARRY_FLAG.
PURE_OPCODES = frozenset(
    {
        "add", "sub", "mul", "mad", "mul24", "mad24", "sad", "div", "rem", "abs", "neg", "min", "max", "popc",
        "clz", "bfind", "fns", "brev", "bfe", "bfi", "dp4a", "dp2a", "and", "or", "xor", "not", "cnot", "lop3",
        "shf", "shl", "shr", "prmt", "testp", "copysign", "rcp", "sqrt", "rsqrt", "sin", "cos", "lg2", "ex2",
        "tanh", "fma", "set", "setp", "selp", "slct", "mov", "cvt", "cvta", "isspacep", "mapa", "szext",
        "bmsk", "shfl", "vote", "match", "activemask", "redux", "createpolicy", "addc", "subc", "madc",
        "getctarank",
    }
)

# Opcodes that end a basic block (PTX ISA "Control Flow Instructions"; a call ends one here so nothing moves
# across it).
TERMINATORS = frozenset({"bra", "brx", "ret", "exit", "trap", "call"})

# Special registers whose value changes over time: reading them orders with everything (PTX ISA §10).
VOLATILE_SPECIAL = ("%clock", "%clock64", "%globaltimer", "%globaltimer_lo", "%globaltimer_hi")


@dataclass(frozen=True)
class Site:
    """One statement of a function body as printed in the canonical listing.

    line: 1-based line in ``listing(parent.module)`` (a Scope's first line); node: the statement; body: the
    Python list holding it (a ``Function.body`` or ``Scope.body``); index: its index in ``body``.
    """

    line: int
    node: Statement
    body: list
    index: int


@dataclass(frozen=True)
class MemoryEffect:
    """How one instruction touches memory.

    kind: ``"none"`` (registers only), ``"read"`` (a plain load or prefetch), ``"write"`` (a plain store) or
    ``"barrier"`` (anything with ordering or unknown effect: bar/barrier, fence/membar, atom/red, cp.async,
    mbarrier, call, ld/st with .volatile/.relaxed/.acquire/.release, reads of %clock); space: the state space
    (``"generic"`` when the instruction names none; ``""`` for kind none/barrier).
    """

    kind: str
    space: str = ""

    def conflicts(self, other: MemoryEffect) -> bool:
        """True when the two may not be reordered: a barrier orders with every memory access, a write with any
        access to a state space that may alias it (generic may alias global/shared/local: PTX ISA §5.1 state spaces, generic addressing)."""
        if self.kind == "none" or other.kind == "none":
            return False
        if "barrier" in (self.kind, other.kind):
            return True
        if self.kind == "read" and other.kind == "read":
            return False
        return spaces_may_alias(self.space, other.space)


def spaces_may_alias(a: str, b: str) -> bool:
    """Whether two state spaces can name the same bytes. ``param`` and ``const`` are read-only to a kernel."""
    if a == "generic" or b == "generic":
        return a not in ("param", "const") and b not in ("param", "const")
    return a == b


def state_space(instr: Instruction) -> str:
    """The state space an ld/st/prefetch names among its modifiers, else ``"generic"`` (PTX ISA §5.1)."""
    for m in instr.modifiers:
        base = m.split("::")[0]
        if base in STATE_SPACES:
            return base
    return "generic"


_ORDERED = ("volatile", "relaxed", "acquire", "release", "mmio")


def memory_effect(instr: Instruction) -> MemoryEffect:
    """Classify ``instr`` (see MemoryEffect). Unknown opcodes are barriers, so a new instruction is never moved."""
    op = instr.opcode
    if any(isinstance(o, SpecialRegister) and o.name in VOLATILE_SPECIAL for o in instr.operands):
        return MemoryEffect("barrier")
    if op in ("ld", "ldu"):
        if any(m in _ORDERED for m in instr.modifiers):
            return MemoryEffect("barrier")
        return MemoryEffect("read", state_space(instr))
    if op == "st":
        if any(m in _ORDERED for m in instr.modifiers) or "async" in instr.modifiers:
            return MemoryEffect("barrier")
        return MemoryEffect("write", state_space(instr))
    if op in ("prefetch", "prefetchu"):
        return MemoryEffect("read", state_space(instr))
    if op in PURE_OPCODES:
        return MemoryEffect("none")
    return MemoryEffect("barrier")


def is_terminator(instr: Instruction) -> bool:
    """True for branches, calls, ret, exit and trap: the last instruction of a basic block."""
    return instr.opcode in TERMINATORS


def entry_function(kernel: Kernel) -> Function:
    """The function ``kernel.entry`` of the kernel's module. Raises NoProposal when it has no body."""
    fn = kernel.module.function(kernel.entry)
    if fn.body is None:
        raise NoProposal(f"entry {kernel.entry!r} has no body")
    return fn


_LISTINGS: OrderedDict[int, tuple[weakref.ref, Listing]] = OrderedDict()
_LISTINGS_MAX = 64


def cached_listing(module: Module) -> Listing:
    """``population.printer.listing(module)``, memoised for the last ``_LISTINGS_MAX`` modules.

    Keyed by object identity and checked through a weak reference, so a new module at a recycled address is
    never served a stale listing. Operators never modify a parent's module (``apply_script`` copies it), which
    is what makes the memo safe."""
    hit = _LISTINGS.get(id(module))
    if hit is not None and hit[0]() is module:
        _LISTINGS.move_to_end(id(module))
        return hit[1]
    lst = listing(module)
    _LISTINGS[id(module)] = (weakref.ref(module), lst)
    while len(_LISTINGS) > _LISTINGS_MAX:
        _LISTINGS.popitem(last=False)
    return lst


def entry_sites(kernel: Kernel, *, function: str | None = None) -> list[Site]:
    """Statements of the entry (or ``function``) in listing order with their canonical line numbers.

    Debug directives that the canonical listing drops do not appear; statements inside Scopes do, with
    ``body`` the Scope's list.
    """
    name = function or kernel.entry
    out: list[Site] = []
    seen: set[int] = set()
    for info in cached_listing(kernel.module).lines:
        if info.function != name or info.node is None or info.body is None or info.index is None:
            continue
        if id(info.node) in seen:
            continue
        seen.add(id(info.node))
        out.append(Site(info.lineno, info.node, info.body, info.index))
    return out


def instruction_sites(kernel: Kernel) -> list[Site]:
    """``entry_sites`` restricted to instructions."""
    return [s for s in entry_sites(kernel) if isinstance(s.node, Instruction)]


def print_lines(stmts: Iterable[Statement]) -> tuple[str, ...]:
    """The PTX lines of ``stmts`` for a REPLACE/INSERT edit (a Scope contributes several lines)."""
    out: list[str] = []
    for s in stmts:
        out.extend(print_statement(s).split("\n"))
    return tuple(out)


def replace_stmts(start: int, end: int, stmts: Sequence[Statement]) -> Replace:
    """A REPLACE of canonical lines ``start..end`` (inclusive) with ``stmts``."""
    return Replace(start, end, print_lines(stmts))


def walk(body: Iterable[Statement]) -> Iterable[Statement]:
    """Every statement of ``body`` in order, descending into Scopes (the Scope itself is yielded first)."""
    for s in body:
        yield s
        if isinstance(s, Scope):
            yield from walk(s.body)


def labels_of(fn: Function) -> set[str]:
    """Every label name defined in ``fn``."""
    return {s.name for s in walk(fn.body or []) if isinstance(s, Label)}


# The condition-code register that add.cc/sub.cc/mad.cc write and addc/subc/madc read (PTX ISA "Extended-Precision
# Integer Arithmetic Instructions"); it is implicit in the operands, so it is modelled as this pseudo register.
CARRY_FLAG = "%%cc"
_CARRY_IN = ("addc", "subc", "madc")


def reads(instr: Instruction) -> set[str]:
    """Registers ``instr`` reads: population.analysis.sources, its guard predicate and the carry flag for
    addc/subc/madc."""
    out = set(sources(instr))
    if instr.predicate is not None:
        out.add(instr.predicate.register.name)
    if instr.opcode in _CARRY_IN:
        out.add(CARRY_FLAG)
    return out


def writes(instr: Instruction) -> set[str]:
    """Registers ``instr`` writes: population.analysis.destinations and the carry flag for ``.cc`` forms."""
    out = set(destinations(instr))
    if "cc" in instr.modifiers:
        out.add(CARRY_FLAG)
    return out


POINTER_PARAM_TYPES = ("u64", "b64", "s64")
UNKNOWN_ROOT = "?"


def definitions(fn: Function) -> dict[str, list[Instruction]]:
    """Register name -> every instruction of ``fn`` that writes it (PTX is not SSA: loops redefine), the carry
    flag included (``writes``)."""
    return _definitions(fn, writes)


def pointer_roots(fn: Function, reg: str, defs: dict[str, list[Instruction]] | None = None) -> set[str]:
    """The buffers an address register may point into: names of 64-bit ``.param``s loaded with ``ld.param``,
    names of variables taken with ``mov``, or ``UNKNOWN_ROOT`` when a value comes from memory.

    Walks every definition of every register the value depends on (a conservative union over paths).
    32-bit scalar parameters (sizes, strides) are not roots: they only offset an address.
    """
    defs = defs if defs is not None else definitions(fn)
    params: dict[str, Param] = {p.name: p for p in fn.params}
    roots: set[str] = set()
    seen: set[str] = set()
    stack = [reg]
    while stack:
        r = stack.pop()
        if r in seen:
            continue
        seen.add(r)
        for ins in defs.get(r, []):
            if ins.opcode in ("ld", "ldu"):
                addr = address_operand(ins)
                if "param" in ins.base_modifiers and addr is not None and isinstance(addr.base, Symbol):
                    p = params.get(addr.base.name)
                    if p is None or p.type in POINTER_PARAM_TYPES:
                        roots.add(addr.base.name)
                else:
                    roots.add(UNKNOWN_ROOT)
                continue
            if ins.opcode not in PURE_OPCODES:
                roots.add(UNKNOWN_ROOT)
                continue
            for o in ins.operands[1:]:
                if isinstance(o, Symbol) and ins.opcode in ("mov", "cvta"):
                    roots.add(o.name)
            stack.extend(reads(ins))
    return roots


def address_operand(instr: Instruction) -> Address | None:
    """The first ``[...]`` operand of ``instr``, if any."""
    return next((o for o in instr.operands if isinstance(o, Address)), None)


def address_roots(fn: Function, instr: Instruction, defs: dict[str, list[Instruction]] | None = None) -> set[str]:
    """``pointer_roots`` of the base register of ``instr``'s address (a Symbol base is its own root)."""
    addr = address_operand(instr)
    if addr is None:
        return {UNKNOWN_ROOT}
    if isinstance(addr.base, Symbol):
        return {addr.base.name}
    if isinstance(addr.base, Register):
        return pointer_roots(fn, addr.base.name, defs)
    return {UNKNOWN_ROOT}


_ARCH = re.compile(r"^sm_(\d+)[af]?$")


def target_cc(kernel: Kernel) -> tuple[int, int]:
    """Compute capability of the module's first ``.target`` naming one (``sm_90`` -> (9, 0), ``sm_100a`` ->
    (10, 0)). ValueError when no target names one."""
    for t in kernel.module.target:
        m = _ARCH.match(t.strip())
        if m:
            n = int(m.group(1))
            return n // 10, n % 10
    raise ValueError(f"module target {kernel.module.target} names no sm_XY architecture")


def line_edits(kernel: Kernel, repl: dict[int, list[Statement]], prologue: Sequence[Statement] = ()) -> list[Edit]:
    """Line edits of the entry: canonical line -> the statements replacing that line's statement (one REPLACE
    each), and ``prologue`` placed before the entry's first instruction (after its declarations; merged into
    that line's replacement when a label or nothing precedes it)."""
    sites = entry_sites(kernel)
    repl = dict(repl)
    edits: list[Edit] = []
    if prologue:
        first = next(k for k, s in enumerate(sites) if isinstance(s.node, Instruction))
        if first > 0 and not isinstance(sites[first - 1].node, Label):
            edits.append(Insert(sites[first - 1].line, print_lines(prologue)))
        else:
            line0 = sites[first].line
            repl[line0] = [*prologue, *repl.get(line0, [sites[first].node])]
    edits += [Replace(ln, ln, print_lines(stmts)) for ln, stmts in sorted(repl.items())]
    return edits


def make_instruction(opcode: str, mods: tuple[str, ...], *ops: Operand, pred: Predicate | None = None) -> Instruction:
    """A new instruction ``[@pred] opcode.mods ops...`` (the builders of the rewrites that emit PTX)."""
    return Instruction(opcode=opcode, modifiers=mods, operands=tuple(ops), predicate=pred)


def fresh_name(taken: set[str], stem: str) -> str:
    """``stem`` followed by the smallest integer that makes a name not in ``taken``."""
    i = 0
    while f"{stem}{i}" in taken:
        i += 1
    return f"{stem}{i}"


def used_names(fn: Function) -> set[str]:
    """Every register and label name that appears in ``fn`` (declared, read, written or defined)."""
    names = set(labels_of(fn))
    for ins in flat_instructions(fn):
        names |= reads(ins) | writes(ins)
    names |= set(declared_registers(fn))
    return names


