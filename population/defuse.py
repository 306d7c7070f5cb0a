"""Registers of a PTX function: which operands an instruction writes and reads, def-use sites, declared vs used
registers, type inference for undeclared registers, and declaring the missing ones.

Operand roles follow the instruction descriptions of the PTX ISA 9.0 ("Instructions" chapter): the first operand is the
destination for most opcodes; the opcodes in :data:`NO_DESTINATION` write no register (stores, reductions,
barriers, fences, branches, prefetches, async copies ...). All elements of a destination Vector are written,
both halves of ``p|q`` are written, ``wgmma.mma_async``'s accumulator vector is both read and written
("Asynchronous Warpgroup Level Matrix Multiply-Accumulate", ``d = A*B + d``), and a ``call``'s return
parameters are its first ParenList ("Control Flow Instructions: call"). Type compatibility follows the "Type
Checking Rules" table of "Type Information for Instructions and Operands": a ``.bN`` register
fits any instruction type of N bits, ``.sN``/``.uN`` fit each other, ``.fN`` fits only ``.fN`` and ``.bN``
instructions. Register declarations with ``<N>`` ranges follow "Parameterized Variable Names".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from population.ast import (
    Address,
    Function,
    HandleAddress,
    Immediate,
    Instruction,
    Label,
    Negated,
    OffsetExpr,
    Operand,
    ParenList,
    PredicatePair,
    RegDecl,
    Register,
    Scope,
    Statement,
    Symbol,
    Vector,
    iter_body,
)
from population.cfg import flat_instructions, walk

# Opcodes (first dotted component, or opcode.first-modifier) that write no register operand.
NO_DESTINATION = frozenset({
    "st", "red", "bar", "barrier", "membar", "fence", "bra", "brx", "ret", "exit", "trap", "prefetch",
    "prefetchu", "cp", "setmaxnreg", "stmatrix", "st.async", "red.async", "mbarrier.init", "mbarrier.inval",
    "mbarrier.expect_tx", "mbarrier.complete_tx", "wgmma.fence", "wgmma.commit_group", "wgmma.wait_group",
    "nanosleep", "pmevent", "griddepcontrol", "discard", "applypriority", "sust", "sured", "brkpt",
    "multimem.st", "multimem.red", "tensormap", "st.bulk", "stackrestore",
    # tcgen05 (sm_100a): only tcgen05.ld writes registers
    "tcgen05.mma", "tcgen05.st", "tcgen05.alloc", "tcgen05.dealloc", "tcgen05.commit", "tcgen05.cp",
    "tcgen05.wait", "tcgen05.fence", "tcgen05.shift", "tcgen05.relinquish_alloc_permit",
})

# Fundamental types (PTX ISA "Fundamental Types") and their width in bits. Packed types count the whole register.
TYPE_BITS: dict[str, int] = {
    "pred": 1,
    "b8": 8, "b16": 16, "b32": 32, "b64": 64, "b128": 128,
    "s8": 8, "s16": 16, "s32": 32, "s64": 64,
    "u8": 8, "u16": 16, "u32": 32, "u64": 64,
    "f16": 16, "f16x2": 32, "bf16": 16, "bf16x2": 32, "f32": 32, "f64": 64, "tf32": 32,
    "e4m3": 8, "e5m2": 8, "e4m3x2": 16, "e5m2x2": 16, "e2m3x2": 16, "e3m2x2": 16, "e2m1x2": 8,
    "s4": 4, "u4": 4, "s2": 2, "u2": 2,
}

# 64-bit integer types a kernel parameter holding a pointer is declared with (``.param .u64 x``; with
# ``.address_size 64`` a generic or global address is 64 bits, PTX ISA "Generic Addressing").
POINTER_TYPES = frozenset({"u64", "b64", "s64"})

# nvcc's register-name prefixes and the types it declares them with (e.g. `.reg .b32 %r<105>;`).
NVCC_PREFIX_TYPES: dict[str, str] = {
    "%rd": "b64", "%r": "b32", "%fd": "f64", "%f": "f32", "%p": "pred", "%rs": "b16", "%hh": "b32", "%h": "b16",
    "%rq": "b128",
}


# --------------------------------------------------------------------------------------------- operand roles


def registers_in(op: Operand) -> list[str]:
    """Names of the registers an operand mentions (address bases, vector elements, both halves of ``p|q``,
    a negated predicate), in order. Special registers, immediates, symbols and ``_`` give none."""
    if isinstance(op, Register):
        return [op.name]
    if isinstance(op, Negated):
        return [op.operand.name]
    if isinstance(op, Address):
        return [op.base.name] if isinstance(op.base, Register) else []
    if isinstance(op, (Vector, ParenList, HandleAddress)):
        return [n for e in op.elements for n in registers_in(e)]
    if isinstance(op, OffsetExpr):
        return [op.base.name] if isinstance(op.base, Register) else []
    if isinstance(op, PredicatePair):
        return [op.first.name, op.second.name]
    return []


def _op_key(instr: Instruction) -> tuple[str, str]:
    first = instr.modifiers[0] if instr.modifiers else ""
    return instr.opcode, f"{instr.opcode}.{first}"


def has_destination(instr: Instruction) -> bool:
    """Whether the instruction's first operand is written (see :data:`NO_DESTINATION`; ``bar.red`` and
    ``barrier.red`` do write one; ``call`` writes only its return ParenList)."""
    op, op2 = _op_key(instr)
    if instr.opcode == "call":
        return _call_returns(instr) is not None
    if op in ("bar", "barrier") and "red" in instr.modifiers:
        return True
    if op2 in ("mbarrier.arrive", "mbarrier.arrive_drop", "mbarrier.try_wait", "mbarrier.test_wait",
               "mbarrier.pending_count"):
        return True
    if op in NO_DESTINATION or op2 in NO_DESTINATION:
        return False
    return bool(instr.operands) and not isinstance(instr.operands[0], (Address, HandleAddress))


def _call_returns(instr: Instruction) -> ParenList | None:
    ops = instr.operands
    if ops and isinstance(ops[0], ParenList) and any(isinstance(o, Symbol) for o in ops[1:]):
        return ops[0]
    return None


def destinations(instr: Instruction) -> list[str]:
    """Register names the instruction writes, in operand order (empty when none; rules in the module
    docstring). The guard predicate is never a destination."""
    if instr.opcode == "call":
        ret = _call_returns(instr)
        return registers_in(ret) if ret is not None else []
    if not has_destination(instr):
        return []
    d = instr.operands[0]
    if isinstance(d, (Address, HandleAddress)):
        return []
    return registers_in(d)


def sources(instr: Instruction) -> list[str]:
    """Register names the instruction reads, in operand order, the guard predicate first: every register
    outside the destination operand, address base registers included, plus the accumulator of
    ``wgmma.mma_async`` (read and written)."""
    out: list[str] = [instr.predicate.register.name] if instr.predicate is not None else []
    ops = instr.operands
    if instr.opcode == "call":
        skip = 0 if _call_returns(instr) is None else 1
        rest = ops[skip:]
    elif has_destination(instr):
        rest = ops[1:]
        if instr.opcode == "wgmma" and instr.modifiers[:1] == ("mma_async",):
            rest = ops
    else:
        rest = ops
    for o in rest:
        out.extend(registers_in(o))
    return out


# --------------------------------------------------------------------------------------------------- def-use


@dataclass
class DefUse:
    """Def-use sites of every register of a function.

    instructions: ``flat_instructions(fn)``; sites are indices into it.
    defs / uses: register name -> sorted indices of the instructions that write / read it.
    """

    instructions: list[Instruction]
    defs: dict[str, list[int]] = field(default_factory=dict)
    uses: dict[str, list[int]] = field(default_factory=dict)

    def defs_of(self, reg: str) -> list[Instruction]:
        """The instructions that write ``reg`` (empty if none)."""
        return [self.instructions[i] for i in self.defs.get(reg, [])]

    def uses_of(self, reg: str) -> list[Instruction]:
        """The instructions that read ``reg`` (empty if none)."""
        return [self.instructions[i] for i in self.uses.get(reg, [])]

    @property
    def registers(self) -> set[str]:
        """Every register written or read."""
        return set(self.defs) | set(self.uses)


def definitions(fn: Function, writes: Callable[[Instruction], Iterable[str]] = destinations
                ) -> dict[str, list[Instruction]]:
    """Register name -> every instruction of ``fn`` that writes it, in program order (scopes flattened; PTX is
    not SSA: loops redefine). Only the defs half of ``def_use``, as instructions. writes: the registers an
    instruction writes (default ``destinations``; an instruction naming one twice is listed twice)."""
    defs: dict[str, list[Instruction]] = {}
    for ins in flat_instructions(fn):
        for r in writes(ins):
            defs.setdefault(r, []).append(ins)
    return defs


def def_use(fn: Function) -> DefUse:
    """Def and use sites of every register in ``fn`` (flat instruction indices; scopes flattened)."""
    instrs = flat_instructions(fn)
    du = DefUse(instrs)
    for i, ins in enumerate(instrs):
        for r in dict.fromkeys(destinations(ins)):
            du.defs.setdefault(r, []).append(i)
        for r in dict.fromkeys(sources(ins)):
            du.uses.setdefault(r, []).append(i)
    return du


# ------------------------------------------------------------------------------------------------- registers


def declared_registers(fn: Function) -> dict[str, str]:
    """Register name -> declared type (``"b32"``, ``"pred"``; ``"v4.f32"`` for vector registers) for every
    ``.reg`` in ``fn``'s body and its scopes; ``%r<105>`` expands to ``%r0`` .. ``%r104`` (PTX ISA "Parameterized Variable Names")."""
    out: dict[str, str] = {}
    for loc in walk(fn):
        s = loc.stmt
        if isinstance(s, RegDecl):
            t = f"{s.vector}.{s.type}" if s.vector else s.type
            for name in s.declared():
                out[name] = t
    return out


def _mentioned(ins: Instruction) -> list[str]:
    """Every register name ``ins`` mentions: the guard, then each operand's (:func:`registers_in`)."""
    names = [ins.predicate.register.name] if ins.predicate is not None else []
    for o in ins.operands:
        if isinstance(o, Register):
            names.append(o.name)
        elif not isinstance(o, (Immediate, Symbol)):
            names.extend(registers_in(o))
    return names


def used_registers(fn: Function) -> set[str]:
    """Every register name an instruction of ``fn`` mentions (destinations, sources, guards)."""
    out: set[str] = set()
    for ins in flat_instructions(fn):
        out.update(_mentioned(ins))
    return out


def undeclared_registers(fn: Function) -> set[str]:
    """Registers an instruction of ``fn`` uses where no ``.reg`` declares them: a declaration is visible in
    its own body list and the ``{ }`` scopes nested in it, not in sibling scopes (PTX ISA "Scope" of
    variables). ``<N>`` ranges are checked without expanding them."""
    out: set[str] = set()

    def frame(body: list[Statement]) -> tuple[set[str], dict[str, int]]:
        exact: set[str] = set()
        ranges: dict[str, int] = {}
        for st in body:
            if isinstance(st, RegDecl):
                for name, count in st.names:
                    if count is None:
                        exact.add(name)
                    else:
                        ranges[name] = max(ranges.get(name, 0), count)
        return exact, ranges

    def in_frame(r: str, exact: set[str], ranges: dict[str, int]) -> bool:
        if r in exact:
            return True
        if not ranges:
            return False
        m = _RANGE_NAME.fullmatch(r)
        # %r<105> declares %r0..%r104; "%r07" is not one of them
        return bool(m and m.group(1) in ranges and (m.group(2) == "0" or not m.group(2).startswith("0"))
                    and int(m.group(2)) < ranges[m.group(1)])

    top_cache: dict[str, bool] = {}  # visibility in the function-level frame, asked once per name

    def visible(r: str, frames: list[tuple[set[str], dict[str, int]]]) -> bool:
        top = top_cache.get(r)
        if top is None:
            top = top_cache[r] = in_frame(r, *frames[0])
        return top or any(in_frame(r, *f) for f in frames[1:])

    # one frame per enclosing body list, kept in step with iter_body's depth (no recursion: scopes nest
    # to any depth)
    frames: list[tuple[set[str], dict[str, int]]] = [frame(fn.body or [])]
    for event, st, _body, _i, depth in iter_body(fn.body or [], exits=True):
        if event == "enter":
            del frames[depth + 1:]
            frames.append(frame(st.body))
        elif event == "exit":
            del frames[depth + 1:]
        elif isinstance(st, Instruction):
            out.update(r for r in _mentioned(st) if r not in out and not visible(r, frames))
    return out


_RANGE_NAME = re.compile(r"(.*?)(\d+)")


def bare_register_names(fn: Function) -> set[str]:
    """Declared register names written without ``%`` (``p`` from ``.reg .pred p;``): the names a parser must be
    told are registers (``%`` names are registers anyway)."""
    out: set[str] = set()
    for loc in walk(fn):
        if isinstance(loc.stmt, RegDecl):
            out.update(n for n in loc.stmt.declared() if not n.startswith("%"))
    return out


def _type_mods(instr: Instruction) -> list[str]:
    return [m for m in instr.modifiers if m in TYPE_BITS]


def _reg_type(t: str) -> str:
    """The register type a value of type ``t`` lives in: s/u/b/f types of 16 bits or more as themselves,
    sub-16-bit values in b16 (as nvcc's %rs), half/packed/narrow-float types in bN of their width (nvcc keeps
    f16 in %rs and f16x2 in %r), predicates as pred."""
    if t == "pred":
        return "pred"
    bits = TYPE_BITS[t]
    if bits >= 16 and re.fullmatch(r"[sub]\d+|f32|f64", t):
        return t
    return f"b{max(bits, 16)}"


def operand_types(instr: Instruction) -> list[tuple[str, str, bool]]:
    """(register, inferred type, is_destination) for each register operand whose type the opcode and its type
    modifiers determine; registers it cannot type (e.g. address bases) are left out.

    Rules (PTX ISA instruction descriptions): the guard, negated operands and ``.pred``-typed operands are ``pred``; ``setp``
    writes predicates; ``selp``'s last source is a predicate; ``cvt``/``cvta``'s destination takes the first
    type modifier and the source the second; ``mul.wide``/``mad.wide`` write twice the source width; shift
    amounts, ``bfe``/``bfi`` positions and ``shfl`` lane operands are 32-bit; loads, stores and atomics type
    their data operands (each Vector element) with the type modifier; other opcodes use the last type modifier
    for every typed operand."""
    out: list[tuple[str, str, bool]] = []
    if instr.predicate is not None:
        out.append((instr.predicate.register.name, "pred", False))
    types = _type_mods(instr)
    ops = list(instr.operands)
    dest = has_destination(instr)
    op = instr.opcode

    def add(o: Operand, t: str | None, is_dest: bool) -> None:
        if isinstance(o, Negated):
            out.append((o.operand.name, "pred", is_dest))
        elif isinstance(o, PredicatePair):
            first_t = "pred" if op in ("setp", "set") else t
            if first_t is not None:
                out.append((o.first.name, first_t, is_dest))
            out.append((o.second.name, "pred", is_dest))
        elif isinstance(o, Register) and t is not None:
            out.append((o.name, t, is_dest))
        elif isinstance(o, Vector) and t is not None:
            for e in o.elements:
                if isinstance(e, Register):
                    out.append((e.name, t, is_dest))

    if not types or op in ("call", "bra", "ret", "exit"):
        for o in ops:
            if isinstance(o, (Negated, PredicatePair)):
                add(o, None, False)
        return out
    last = _reg_type(types[-1])
    if op in ("wgmma", "mma"):
        # d (and mma's c) take the first / last type (PTX ISA mma / wgmma descriptions); A/B fragments are packed
        # b32 registers and wgmma's descriptors b64, which the type modifiers do not describe.
        if ops:
            add(ops[0], _reg_type(types[0]), True)
        if op == "mma" and len(ops) > 3:
            add(ops[3], _reg_type(types[-1]), False)
        return out
    if op in ("setp", "set"):
        src_t = _reg_type(types[-1])
        if ops:
            add(ops[0], "pred" if op == "setp" else _reg_type(types[0]), True)
        for o in ops[1:3]:
            add(o, src_t, False)
        for o in ops[3:]:
            add(o, "pred", False)
        return out
    if op == "selp":
        for i, o in enumerate(ops):
            add(o, "pred" if i == 3 else last, i == 0)
        return out
    if op in ("cvt", "cvta") and len(types) >= 2:
        if ops:
            add(ops[0], _reg_type(types[0]), True)
        for o in ops[1:]:
            add(o, _reg_type(types[1]), False)
        return out
    if op in ("mul", "mad") and "wide" in instr.modifiers:
        wide = f"b{TYPE_BITS[types[-1]] * 2}"
        for i, o in enumerate(ops):
            add(o, wide if i == 0 or (op == "mad" and i == 3) else last, i == 0)
        return out
    if op in ("shl", "shr"):
        for i, o in enumerate(ops):
            add(o, "b32" if i == 2 else last, i == 0)
        return out
    if op in ("bfe", "bfi"):
        n_data = 2 if op == "bfe" else 3
        for i, o in enumerate(ops):
            add(o, last if i < n_data else "b32", i == 0)
        return out
    if op == "vote":
        ballot = "ballot" in instr.modifiers
        for i, o in enumerate(ops):
            add(o, (last if ballot else "pred") if i == 0 else "pred" if i == 1 else "b32", i == 0)
        return out
    if op == "shfl":
        for i, o in enumerate(ops):
            add(o, "b32", i == 0)
        return out
    if op == "mov" and ops and isinstance(ops[-1], Vector) and len(ops) == 2:
        n = len(ops[-1].elements)
        add(ops[0], last, True)
        add(ops[1], f"b{max(TYPE_BITS[types[-1]] // n, 16)}", False)
        return out
    if op == "mov" and ops and isinstance(ops[0], Vector) and len(ops) == 2:
        n = len(ops[0].elements)
        add(ops[0], f"b{max(TYPE_BITS[types[-1]] // n, 16)}", True)
        add(ops[1], last, False)
        return out
    for i, o in enumerate(ops):
        if isinstance(o, Address):
            continue
        add(o, last, dest and i == 0)
    return out


def compatible(declared: str, used: str) -> bool:
    """Whether a register of type ``declared`` may appear where an operand of type ``used`` is expected
    (PTX ISA "Type Information for Instructions and Operands", table "Type Checking Rules"; ``used`` here is the register-level type from operand_types)."""
    if declared == used:
        return True
    if "pred" in (declared, used):
        return False
    if declared not in TYPE_BITS or used not in TYPE_BITS or TYPE_BITS[declared] != TYPE_BITS[used]:
        return False
    dk, uk = declared[0], used[0]
    if dk == "b" or uk == "b":
        return True
    if dk == "f" or uk == "f":
        return dk == uk
    return True  # s and u of one size


def nvcc_prefix_type(name: str) -> str | None:
    """The type nvcc declares registers named like ``name`` with (``%rd12`` -> ``b64``), or None."""
    m = re.fullmatch(r"(%[A-Za-z_]+)\d+", name)
    if not m:
        return None
    return NVCC_PREFIX_TYPES.get(m.group(1))


def infer_register_types(fn: Function, names: set[str] | None = None) -> dict[str, str]:
    """A declaration type for each register in ``names`` (default: the undeclared ones).

    From every typed occurrence (:func:`operand_types`): ``pred`` if any occurrence is a predicate; else the
    nvcc prefix type (``%f`` f32, ``%rd`` b64 ...) when it is compatible with every occurrence; else the type of
    the first definition (then of any occurrence) that fits every occurrence; else ``bN`` with N the width at the first definition (or the first use). Untyped registers (only address bases, say)
    fall back to the nvcc prefix type, then to ``b64`` for address bases. Raises ValueError naming the
    register when no rule gives a type."""
    names = undeclared_registers(fn) if names is None else set(names)
    seen: dict[str, list[tuple[str, bool]]] = {n: [] for n in names}
    addr_base: set[str] = set()
    for ins in flat_instructions(fn):
        for reg, t, is_dest in operand_types(ins):
            if reg in seen:
                seen[reg].append((t, is_dest))
        for o in ins.operands:
            if isinstance(o, Address) and isinstance(o.base, Register):
                addr_base.add(o.base.name)
    out: dict[str, str] = {}
    for name in sorted(names):
        obs = seen[name]
        prefix = nvcc_prefix_type(name)
        if any(t == "pred" for t, _ in obs):
            out[name] = "pred"
        elif obs:
            if prefix is not None and all(compatible(prefix, t) for t, _ in obs):
                out[name] = prefix
            else:
                first = next((t for t, d in obs if d), obs[0][0])
                fits = [t for t in (first, *(t for t, _ in obs)) if all(compatible(t, u) for u, _ in obs)]
                out[name] = fits[0] if fits else f"b{TYPE_BITS[first]}"
        elif prefix is not None:
            out[name] = prefix
        elif name in addr_base:
            out[name] = "b64"
        else:
            raise ValueError(f"function {fn.name}: cannot infer a type for register {name!r} (no typed use)")
    return out


def declare_missing(fn: Function) -> list[str]:
    """Declare every undeclared register of ``fn`` (types from :func:`infer_register_types`), in place.

    Adds one ``.reg`` per type (``.reg .b32 %r200, %r201;``) after the last ``.reg`` that precedes the
    function's first instruction (nvcc keeps its declarations there), at the top when there is none.
    Returns the names declared, sorted. Raises ValueError when a type cannot be inferred or ``fn`` has no
    body."""
    missing = undeclared_registers(fn)
    if not missing:
        return []
    if fn.body is None:
        raise ValueError(f"function {fn.name} has no body to declare registers in")
    types = infer_register_types(fn, missing)
    names_sorted = sorted(missing, key=_natural_key)
    by_type: dict[str, list[str]] = {}
    for name in names_sorted:
        by_type.setdefault(types[name], []).append(name)
    # after the last .reg of the leading declarations (nvcc's layout), before the first instruction
    pos = 0
    for k, st in enumerate(fn.body):
        if isinstance(st, (Instruction, Label, Scope)):
            break
        if isinstance(st, RegDecl):
            pos = k + 1
    decls: list[Statement] = [RegDecl(t, tuple((n, None) for n in names)) for t, names in sorted(by_type.items())]
    fn.body[pos:pos] = decls
    return names_sorted


def _natural_key(name: str) -> tuple[str, int]:
    m = _RANGE_NAME.fullmatch(name)
    return (m.group(1), int(m.group(2))) if m else (name, -1)


def scopes(fn: Function) -> list[Scope]:
    """Every ``{ }`` scope in ``fn``'s body, outermost first in textual order."""
    return [s for event, s, _b, _i, _d in iter_body(fn.body or []) if event == "enter"]
