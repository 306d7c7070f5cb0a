"""Static input-store check: may any instruction of an entry write memory outside the buffers it owns?

A kernel may not write its inputs, not even as scratch that it restores before it returns (another stream, the
caller's residual branch or a read-only mapping would see it). The gate compares inputs after each launch,
which such a kernel passes, so this check runs on the PTX before any GPU time.

Rule (an allow-list, not a deny-list): every instruction that writes global or generic memory -- ``st`` (all
forms, ``st.async``, ``st.bulk``), ``atom``, ``red``, ``cp``/``cp.reduce`` bulk copies to global memory,
``multimem.st``/``.red``, ``sust``/``sured``, ``mbarrier`` updates, ``tensormap`` writes, ``discard`` (PTX ISA
9.0 "discard": the line's contents become indeterminate, a write) and any other instruction whose first operand
is a memory address (PTX ISA 9.0 "Data Movement and Conversion Instructions", "Parallel Synchronization and
Communication Instructions") -- is accepted only when its address provably points into an ``output`` or
``inout`` parameter's buffer or one of the module's own ``.global``/``.shared``/``.local`` variables.
Shared, local and param destinations never reach a caller's buffer and are skipped.

Provenance (a flow-insensitive fixed point over every definition of each register, as PTX is not SSA):

- pointer roots ``P``: ``ld.param`` resolved by **byte offset** against the entry's parameter layout (PTX ISA
  "Kernel Function Parameters": each ``.param`` at the next multiple of its alignment, its natural size unless
  ``.align`` says otherwise), never by the symbol named, so ``[y_param+-16]`` is ``x``; ``mov`` of a module
  variable; ``alloca``'s result (PTX ISA "Stack Manipulation Instructions: alloca": a per-thread ``.local``
  buffer, rooted as ``alloca_roots`` names it, one root per ``alloca`` instruction); carried through ``mov``,
  ``cvta``, 64-bit ``cvt``, ``add``, ``mapa``, ``selp``'s value operands and the addend of ``mad``. ``a - b`` is an offset (no root) only when ``a`` and ``b`` are both pointer-valued
  with the same single root; ``p - (p & 15)`` keeps ``p``'s root. Otherwise a root subtracted is kept
  **negated** (``-y``; so are the roots of ``neg`` and ``not``, PTX ISA "Integer Arithmetic Instructions: neg",
  "Logic and Shift Instructions: not": ~a = -a - 1): ``x - y`` has ``{x, -y}``, and ``y + (c - y)`` has
  ``{y, -y}`` plus c's roots. Only a root added and never subtracted vouches for an address (``_vouchers``): in
  ``y + (c - y)`` that is c's, whatever c is (round 12, ``rt12_cancel_global_state``). Sign aside, a negated
  root still counts as what the address derives from (an input subtracted is still an input's address).
- bit roots ``W``: a pointer's (or its bits') value through anything else (``and``/``or``/``xor``/shifts,
  ``mul``, narrowing ``cvt``, vector ``mov`` packing, ``shfl``, ``vote.ballot``, ``redux`` ...). Bits count as
  the buffer they came from: an address built from ``x``'s bits is an ``x`` address.
- one-bit roots ``N``: a predicate computed from a pointer (``setp``, ``vote.any``, an instruction's guard)
  and a value selected by one such predicate (an alignment test choosing an offset). Two one-bit values
  combined are bit roots: rebuilding an address bit by bit is caught, one alignment bit added to ``y`` is not.
- memory: a value loaded from memory (``ld``, ``atom``'s result ...) carries the roots of everything the
  kernel itself stores to memory (a pointer parked in a ``__device__`` slot comes back with its root) and of
  every variable whose address an initialiser names (``.global .u64 cell = counter;``, PTX ISA "Variables:
  Initializers": counter's root, as if stored; round 12), and an address no root can vouch for (a loaded
  value, a parameter's own address, all its pointer roots cancelled) carries the marker ``UNKNOWN``.
- calls: the functions the entry calls, directly or not, are analysed too, a callee's parameters carrying the
  roots of what its call sites pass (``provenance``); a call of an ``.alias`` prototype runs its aliasee (PTX
  ISA "Kernel and Function Directives: .alias"; round 12, ``rt12_alias_store``), an indirect call may run any
  function with a body; a callee may write the variables of any analysed function (a caller's ``.local``
  out-parameter reached through its pointer parameter: round 12, ``rt12_honest_out_param``). A call of a function
  without a body other than the CUDA system calls ptxas resolves
  (``SYSTEM_CALLS``: ``vprintf``, ``malloc``, ``free``, ``__assertfail``) is rejected, naming the call, and so
  is an indirect call in a module that declares one: what it writes cannot be seen. ``Provenance.called``
  names the functions a call runs (through ``.alias``) for other checks.

A write is rejected (``input_mutated``) when its address has no root at all (an absolute address, a value
loaded from memory, a tensor-map or surface handle), any root in ``P`` (negated or not) or ``W`` that is not an
output/inout parameter or module variable (an input, a scalar parameter's address, ``UNKNOWN``), or no pointer
root that vouches for it (bits alone, ``y & 0``; or every pointer added also subtracted, ``y + (K - y)``).
``Provenance.address_roots`` gives other checks the roots without their sign (``UNKNOWN`` added when none
vouches), so ``y + (counter - y)`` names the ``.global`` counter for race lint rule 5.

Costs one pass to collect the instructions and a few fixed-point sweeps (about 1-3 ms for a 2,000-instruction
entry); the canonical listing (for line numbers) is built only for a rejection. Cannot see: an offset added to
an output pointer that is rebuilt from an input's address through control flow (a branch per address bit) and
subtracted from the output's own rebuilt address, or a distance ``c - y`` laundered that way before it is added
to y (red-team rt_laundered_state RT_SPACE 2); a pointer negated by bit operations or multiplication
(``(y ^ -1) + 1``, ``y * -1``, ``mad``: bit roots, which cannot be told from honest alignment arithmetic such as
``y + (-y & 15)``, as offsets are not bounded); the sign of a root over several definitions of a register
(sets: a register that is y on one path and ``-y`` on another counts as cancelled, rejected). The dynamic
checks (inputs compared after every launch, read-only mappings in the fault check) remain behind it.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from population.ast import (
    Address,
    ArrayElement,
    Directive,
    Function,
    HandleAddress,
    Immediate,
    Instruction,
    OffsetExpr,
    ParenList,
    Register,
    Symbol,
    VarDecl,
    Vector,
)
from population.cfg import walk
from population.defuse import POINTER_TYPES, TYPE_BITS, destinations, sources
from population.kernel import Kernel
from population.printer import listing

UNKNOWN = "?"  # root marker: an address nothing vouches for (loaded from memory, a parameter's own address)
_EMPTY: frozenset[str] = frozenset()
_CLEAN = (_EMPTY, _EMPTY, _EMPTY)  # (P pointer roots, W bit roots, N one-bit roots)
_STATE_SPACES = ("global", "shared", "local", "param", "const")
# Opcodes that carry a pointer through (PTX ISA "Integer Arithmetic": add; "Data Movement": mov, cvta; mapa).
_POINTER_PASS = frozenset({"add", "addc", "mov", "cvta", "mapa"})
# The carry flag (PTX ISA "Extended-Precision Integer Arithmetic": ``add.cc``/``sub.cc``/``mad.cc`` write CC.CF,
# ``addc``/``subc``/``madc`` read it) is a register the operands do not name: modelled as CARRY, so a value
# rebuilt bit by bit through the carry (``add.cc v, v, v`` / ``addc acc, acc, acc``, round 11) keeps its roots.
CARRY = "%<carry>"
_READS_CARRY = frozenset({"addc", "subc", "madc"})
# Opcodes whose result is a predicate or a value of one bit of information per source predicate.
_ONE_BIT = frozenset({"setp", "set", "testp", "isspacep"})
# Instructions whose first operand is an address but which write nothing (hints, prefetches).
# Opcodes whose result is read from memory or unknown without naming an address operand.
_READS_MEMORY = frozenset({"atom", "call", "tex", "tld4", "suld", "ldmatrix"})
_NOT_WRITING = frozenset({"prefetch", "prefetchu", "applypriority", "createpolicy", "isspacep"})
# A pointer root subtracted (``c - y``) or negated (``neg``, ``not``: PTX ISA "Integer Arithmetic Instructions: neg",
# "Logic and Shift Instructions: not", ~a = -a - 1) is kept in P as NEG + root: ``y + (c - y)`` has P {y, -y} and
# c's roots, and y vouches for none of it (the y added back cancels the one subtracted: ``_vouchers``).
NEG = "-"
# The functions without a body that a ``call`` may name: the CUDA system calls ptxas resolves itself (the ones the
# repo's PTX uses: printf's ``vprintf`` in tests/data/calls_printf.ptx, the device heap's ``malloc``/``free`` in
# red-team rt_heap_state, ``assert``'s ``__assertfail``; CUDA C++ Programming Guide, "Formatted Output",
# "Dynamic Global Memory Allocation", "Assertion"). None of them writes a caller's buffer.
SYSTEM_CALLS = frozenset({"vprintf", "malloc", "free", "__assertfail"})
# An identifier in a variable's initialiser (PTX ISA "Identifiers"; numbers such as 0f3F800000 or 0x10 do not
# start one: the look-behind skips a letter inside a literal)
_IDENT = re.compile(r"(?<![\w$.])[A-Za-z_$%][\w$]*")


def _pos(roots) -> frozenset[str]:
    """Roots with the sign dropped: ``-p2`` counts as ``p2`` (what an address may derive from, sign aside)."""
    if not any(r.startswith(NEG) for r in roots):
        return frozenset(roots)
    return frozenset(r[1:] if r.startswith(NEG) else r for r in roots)


def _negated(roots) -> frozenset[str]:
    """Pointer roots of ``-a`` given a's: each root's sign flipped (``UNKNOWN`` stays unknown)."""
    return frozenset(r if r == UNKNOWN else r[1:] if r.startswith(NEG) else NEG + r for r in roots)


def _vouchers(P) -> frozenset[str]:
    """The pointer roots that vouch for a value with pointer roots P: those added and never subtracted (``y +
    (c - y)``: c's roots, not y). Without negated roots, P itself."""
    if not any(r.startswith(NEG) for r in P):
        return frozenset(P)
    neg = {r[1:] for r in P if r.startswith(NEG)}
    return frozenset(r for r in P if not r.startswith(NEG) and r not in neg)


@dataclass(frozen=True)
class InputStore:
    """One memory write whose address is not provably inside a buffer the kernel owns.

    line: 1-based line in the canonical listing of the module (the numbering of edit scripts and ptxas errors);
    text: that line; param: the ABI name of the input the address derives from (``"x"``), ``""`` when it
    derives from no parameter; index: that parameter's ``.param`` position (-1 when none); why: what the
    address derives from, in words.
    """

    line: int
    text: str
    param: str
    index: int
    why: str = ""

    def __str__(self) -> str:
        return f"line {self.line}: `{self.text.strip()}` {self.why}"


@dataclass
class InputStoreReport:
    """The check's findings: ``stores``, the writes to reject (empty: the entry passes); provenance: the
    analysis they came from (for other static checks of the same entry, e.g. ``evaluators.race_lint``)."""

    stores: list[InputStore]
    provenance: Provenance | None = None

    @property
    def ok(self) -> bool:
        return not self.stores

    def reason(self) -> str:
        """One line for the store's reason column: the first write and how many there are."""
        return first_finding("static input-store check", self.stores)


def first_finding(check: str, findings: Sequence[object], note: str = "") -> str:
    """A static check's reason line: ``"<check>: <first finding> (and <n> more<note>)"``, "" when there is none
    (``note`` is written only when there is more than one finding)."""
    if not findings:
        return ""
    more = f" (and {len(findings) - 1} more{note})" if len(findings) > 1 else ""
    return f"{check}: {findings[0]}{more}"


def destination_space(ins: Instruction) -> str:
    """State space of the memory a writing instruction modifies: the first state-space modifier (for copies,
    ``cp.async.bulk.dst.src``: the destination comes first), ``generic`` when none is named."""
    for m in ins.modifiers:
        base = m.split("::", 1)[0]
        if base in _STATE_SPACES:
            return base
    return "generic"


def writes_memory(ins: Instruction) -> bool:
    """Whether ``ins`` modifies memory (module docstring's list; ``cp.async.bulk.prefetch`` and the
    ``cp.async`` group bookkeeping do not)."""
    op, mods = ins.opcode, ins.modifiers
    if op in ("st", "atom", "red", "sust", "sured", "stmatrix", "discard", "tensormap"):
        return True
    if op == "multimem":
        return "ld_reduce" not in mods
    if op == "cp":
        return not any(m in mods for m in ("commit_group", "wait_group", "wait_all", "arrive", "prefetch"))
    if op == "mbarrier":
        return bool(mods) and mods[0] in ("init", "inval", "arrive", "arrive_drop", "expect_tx", "complete_tx")
    if op in _NOT_WRITING:
        return False
    return bool(ins.operands) and isinstance(ins.operands[0], (Address, HandleAddress))


def _address(ins: Instruction) -> Address | HandleAddress | None:
    return next((o for o in ins.operands if isinstance(o, (Address, HandleAddress))), None)


def param_layout(fn) -> list[tuple[int, int]]:
    """(byte offset, size in bytes) of each ``.param`` of ``fn`` in order: each placed at the next multiple of
    its alignment (``.align`` when given, else its element size), size = element size x array elements
    (PTX ISA 9.0 "Parameter State Space" / "Kernel Function Parameters")."""
    out: list[tuple[int, int]] = []
    off = 0
    for p in fn.params:
        elt = max(1, TYPE_BITS.get(p.type, 64) // 8)
        count = 1
        for d in p.dims:
            count *= d if d else 1
        align = p.align or elt
        off = -(-off // align) * align
        out.append((off, elt * count))
        off += elt * count
    return out


def _type_bits(ins: Instruction) -> list[int]:
    return [TYPE_BITS[m] for m in ins.modifiers if m in TYPE_BITS]


# Prefix of an alloca'd buffer's root (``alloca_roots``).
ALLOCA_ROOT = "s:alloca:"


def alloca_roots(fn) -> dict[int, str]:
    """id(instruction) -> root of each ``alloca`` of ``fn`` (``"s:alloca:<function>:<k>"``, the k-th in textual
    order): the per-thread ``.local`` buffer it returns, for the race lint's ``.local`` rules as if it were a
    ``.local`` variable (no PTX identifier holds a ``:``, so no variable's root collides with one)."""
    allocas = [loc.stmt for loc in walk(fn) if isinstance(loc.stmt, Instruction) and loc.stmt.opcode == "alloca"]
    return {id(ins): f"{ALLOCA_ROOT}{fn.name}:{k}" for k, ins in enumerate(allocas)}


class _Analysis:
    """Roots of every register of one entry (module docstring), computed by fixed-point sweeps."""

    def __init__(self, fn, module_vars: set[str], instrs: list[Instruction],
                 param_roots: list[tuple[frozenset, frozenset, frozenset]] | None = None,
                 memory: frozenset[str] = _EMPTY):
        self.fn = fn
        self.params = {p.name: i for i, p in enumerate(fn.params)}
        # a parameter declared as an array (``.param .u64 x[1]``) carries a pointer as a scalar one does (round
        # 11: the ABI check reads the type alone); a read of part of a longer one gives bit roots (load_param)
        self.pointer_params = {i for i, p in enumerate(fn.params) if p.type in POINTER_TYPES}
        self.layout = param_layout(fn)
        self.module_vars = module_vars
        self.instrs = instrs
        # a callee's ``.param`` i carries the roots of what its call sites pass there (None: the entry, whose
        # parameters are the roots ``p<i>``)
        self.param_roots = param_roots
        self.val: dict[str, tuple[frozenset, frozenset, frozenset]] = {}
        self.memory: frozenset[str] = memory  # roots of every value the kernel stores to memory
        self.allocas = alloca_roots(fn)

    # ------------------------------------------------------------------------------------------ operands
    def value(self, op) -> tuple[frozenset, frozenset, frozenset]:
        if isinstance(op, Register):
            return self.val.get(op.name, _CLEAN)
        if isinstance(op, Symbol):
            if op.name in self.module_vars:
                return (frozenset({"s:" + op.name}), _EMPTY, _EMPTY)
            if op.name in self.params:
                return (frozenset({UNKNOWN}), _EMPTY, _EMPTY)  # a parameter's own address
            return _CLEAN  # labels, functions
        if isinstance(op, Vector):
            parts = [self.value(e) for e in op.elements]
            return self.bits(parts)
        if isinstance(op, (OffsetExpr, ArrayElement)):  # ``sym+8``, ``%rd1+8``, ``arr[1]``: the base's roots
            return self.value(op.base)
        return _CLEAN

    @staticmethod
    def bits(parts) -> tuple[frozenset, frozenset, frozenset]:
        """Any value computed from ``parts`` other than by pointer arithmetic: pointer and bit roots become bit
        roots; one-bit roots stay one bit only when a single part carries roots and those are all one-bit."""
        tainted = [p for p in parts if p[0] or p[1] or p[2]]
        if not tainted:
            return _CLEAN
        if len(tainted) == 1 and not tainted[0][0] and not tainted[0][1]:
            return tainted[0]
        w: set[str] = set()
        for p in tainted:
            w |= _pos(p[0]) | p[1] | p[2]
        return (_EMPTY, frozenset(w), _EMPTY)

    @staticmethod
    def join(parts) -> tuple[frozenset, frozenset, frozenset]:
        """Pointer arithmetic (``add``): roots add up; two one-bit parts make bit roots."""
        P, W, N = set(), set(), set()
        ones = 0
        for p in parts:
            P |= p[0]
            W |= p[1]
            if p[2]:
                ones += 1
                N |= p[2]
        if ones > 1:
            return (frozenset(P), frozenset(W | N), _EMPTY)
        return (frozenset(P), frozenset(W), frozenset(N))

    @staticmethod
    def one_bit(parts) -> tuple[frozenset, frozenset, frozenset]:
        roots: set[str] = set()
        for p in parts:
            roots |= _pos(p[0]) | p[1] | p[2]
        return (_EMPTY, _EMPTY, frozenset(roots)) if roots else _CLEAN

    # ------------------------------------------------------------------------------------------ transfer
    def load_param(self, ins: Instruction, addr: Address, nregs: int) -> list[tuple]:
        """Roots of the registers an ``ld.param`` writes: the parameters whose bytes it reads (layout)."""
        base = addr.base
        if not isinstance(base, Symbol) or base.name not in self.params:
            return [(frozenset({UNKNOWN}), _EMPTY, _EMPTY)] * nregs
        start0 = self.layout[self.params[base.name]][0] + (addr.offset or 0)
        tb = _type_bits(ins)
        width = max(1, (tb[-1] if tb else 64) // 8)
        out = []
        for k in range(nregs):
            start, end = start0 + k * width, start0 + (k + 1) * width
            P, W, N = set(), set(), set()
            if start < 0 or end > (self.layout[-1][0] + self.layout[-1][1] if self.layout else 0):
                P.add(UNKNOWN)
            for i, (o, s) in enumerate(self.layout):
                if end <= o or start >= o + s:
                    continue
                if self.param_roots is not None:  # a callee: the roots its callers pass in parameter i
                    r = self.param_roots[i]
                    if (start, end) == (o, o + s):
                        P |= r[0]
                        W |= r[1]
                        N |= r[2]
                    else:
                        W |= _pos(r[0]) | r[1] | r[2]
                    continue
                if i not in self.pointer_params:
                    continue
                (P if (start, end) == (o, o + s) else W).add(f"p{i}")
            out.append((frozenset(P), frozenset(W), frozenset(N)))
        return out

    def call_arguments(self) -> list[tuple[Instruction, object, list[tuple[frozenset, frozenset, frozenset]]]]:
        """Each ``call`` of this function as (instruction, target operand, roots of its arguments in order): a
        register's or immediate's own roots, a ``.param`` variable's the union of what this function stores
        into it (``st.param.b64 [param0+0], %rd8``, the form nvcc emits). Run after ``run``."""
        stored: dict[str, tuple[frozenset, frozenset, frozenset]] = {}
        for ins in self.instrs:
            addr = _address(ins)
            if ins.opcode == "st" and destination_space(ins) == "param" and isinstance(addr, Address) \
                    and isinstance(addr.base, Symbol):
                parts = [self.value(o) for o in ins.operands if not isinstance(o, (Address, HandleAddress))]
                one = parts[0] if len(parts) == 1 else self.bits(parts)
                stored[addr.base.name] = self.join([stored.get(addr.base.name, _CLEAN), one])
        out = []
        for ins in self.instrs:
            if ins.opcode != "call":
                continue
            ops = ins.operands
            k = 1 if ops and isinstance(ops[0], ParenList) else 0  # (return values) come first
            target = _call_target(ins)
            args = ops[k + 1].elements if k + 1 < len(ops) and isinstance(ops[k + 1], ParenList) else ()
            roots = [stored[a.name] if isinstance(a, Symbol) and a.name in stored else self.value(a) for a in args]
            out.append((ins, target, roots))
        return out

    def transfer(self, ins: Instruction) -> list[tuple] | tuple:
        """Roots of ``ins``'s result (one tuple for every destination register, or a list per register)."""
        op, mods = ins.opcode, ins.modifiers
        srcs = ins.operands[1:]
        addr = _address(ins)
        if op in ("ld", "ldu") and "param" in ins.base_modifiers and isinstance(addr, Address):
            n = len(ins.operands[0].elements) if isinstance(ins.operands[0], Vector) else 1
            return self.load_param(ins, addr, n)
        if op == "alloca" and id(ins) in self.allocas:  # a fresh per-thread .local buffer
            return (frozenset({self.allocas[id(ins)]}), _EMPTY, _EMPTY)
        if addr is not None or op in _READS_MEMORY:
            # a value read from memory: whatever the kernel stored there, and nothing vouches for it as an
            # address on its own
            a = self.value(addr.base) if isinstance(addr, Address) else _CLEAN
            roots = set(self.memory)
            if not _vouchers(a[0]) or UNKNOWN in a[0] or any(r in self.params for r in a[0]):
                roots.add(UNKNOWN)
            return (frozenset(roots), _EMPTY, _EMPTY) if roots else _CLEAN
        parts = [self.value(o) for o in srcs]
        if op in _READS_CARRY:  # one bit of an earlier sum per instruction: bit roots
            parts.append(self.bits([self.val.get(CARRY, _CLEAN)]))
        if "cc" in mods:  # a second result, the carry, computed from the same operands (run: CARRY)
            main = self._transfer_parts(ins, op, mods, parts)
            return [main, self.bits(parts)]
        return self._transfer_parts(ins, op, mods, parts)

    def _transfer_parts(self, ins: Instruction, op: str, mods: tuple, parts: list) -> tuple:
        srcs = ins.operands[1:]
        if op in _POINTER_PASS:
            if op == "mov" and (isinstance(ins.operands[0], Vector) or any(isinstance(o, Vector) for o in srcs)):
                return self.bits(parts)
            return self.join(parts)
        if op == "cvt":
            tb = _type_bits(ins)
            return self.join(parts) if tb and all(b == 64 for b in tb) else self.bits(parts)
        if op == "sub" and len(parts) == 2:
            a, b = parts
            if b[0] and len(b[0]) == 1 and a[0] == b[0] and UNKNOWN not in a[0]:
                return self.bits([(_EMPTY, a[1], a[2]), (_EMPTY, b[1], b[2])])  # p - q: an offset
            # c - p: c's roots and p's negated (``y + (c - y)`` is c, not a y address: ``_vouchers``)
            return self.join([a, (_negated(b[0]), b[1], b[2])])
        if op in ("neg", "not") and len(parts) == 1 and parts[0][0]:
            return (_negated(parts[0][0]), parts[0][1], parts[0][2])  # -p, ~p = -p - 1
        if op in ("mad", "madc") and len(parts) == 3:
            return self.join([self.bits(parts[:2]), parts[2]])
        if op == "selp" and len(parts) == 3:
            return self.join([self.join(parts[:2]), self.one_bit(parts[2:])])
        if op in _ONE_BIT or (op == "vote" and "ballot" not in mods):
            return self.one_bit(parts)
        # one predicate or value per lane (per thread of the CTA for ``bar.red``), gathered: many bits
        if op in ("vote", "redux", "match") or (op in ("bar", "barrier") and "red" in mods):
            roots = self.one_bit(parts)[2]
            return (_EMPTY, roots, _EMPTY) if roots else _CLEAN
        return self.bits(parts)

    def stored_values(self, ins: Instruction) -> frozenset[str]:
        """Roots of the register values a writing instruction stores (for ``memory``)."""
        roots: set[str] = set()
        ops = ins.operands if not destinations(ins) else ins.operands[1:]
        for o in ops:
            if isinstance(o, (Address, HandleAddress)):
                continue
            v = self.value(o)
            roots |= v[0] | v[1] | v[2]
        return frozenset(roots)

    def run(self) -> None:
        """Worklist fixed point: every defining instruction once in order, then again whenever a register it
        reads (or ``memory``, for loads) changed, until nothing changes (the roots only grow; finite)."""
        plan = []  # (instruction, destinations, registers read, reads memory or names a symbol)
        users: dict[str, list[int]] = {}
        loads: list[int] = []
        writers = []
        for ins in self.instrs:
            if writes_memory(ins):
                writers.append(ins)
            d = destinations(ins)
            if not d:
                continue
            if "cc" in ins.modifiers:
                d = [*d, CARRY]
            k = len(plan)
            srcs = sources(ins) + ([CARRY] if ins.opcode in _READS_CARRY else [])
            special = (_address(ins) is not None or ins.opcode in _READS_MEMORY or ins.opcode == "alloca"
                       or any(isinstance(o, (Symbol, Vector, OffsetExpr, ArrayElement)) for o in ins.operands))
            plan.append((ins, d, srcs, special))
            for r in srcs:
                users.setdefault(r, []).append(k)
            if special:
                loads.append(k)
        val = self.val
        queue = deque(range(len(plan)))
        queued = set(queue)
        while True:
            while queue:
                k = queue.popleft()
                queued.discard(k)
                ins, d, srcs, special = plan[k]
                if not special and not any(r in val for r in srcs):
                    continue  # clean operands, no memory: a clean result
                out = self.transfer(ins)
                if ins.predicate is not None:  # a guarded definition is a one-bit selection
                    g = self.one_bit([val.get(ins.predicate.register.name, _CLEAN)])
                    if g[2]:
                        out = [self.join([o, g]) for o in out] if isinstance(out, list) else self.join([out, g])
                for j, r in enumerate(d):
                    v = out[min(j, len(out) - 1)] if isinstance(out, list) else out
                    if v == _CLEAN:
                        continue
                    old = val.get(r)
                    new = v if old is None else (old[0] | v[0], old[1] | v[1], old[2] | v[2])
                    if new != old:
                        val[r] = new
                        for u in users.get(r, ()):
                            if u not in queued:
                                queued.add(u)
                                queue.append(u)
            mem = set(self.memory)
            for ins in writers:
                mem |= self.stored_values(ins)
            if mem == self.memory:
                return
            self.memory = frozenset(mem)
            for u in loads:
                if u not in queued:
                    queued.add(u)
                    queue.append(u)


def _call_target(ins: Instruction):
    """The operand a ``call`` names as its callee (a Symbol, or a Register for an indirect call; None when
    missing): ``call (ret), f, (args)`` and ``call f, (args)`` (PTX ISA "Control Flow Instructions: call")."""
    ops = ins.operands
    k = 1 if ops and isinstance(ops[0], ParenList) else 0  # (return values) come first
    return ops[k] if k < len(ops) else None


def _callables(module) -> tuple[dict[str, Function], dict[str, str]]:
    """(the module's non-entry functions with a body, by name; its ``.alias`` directives, alias -> aliasee).

    ``.alias fAlias, fAliasee;`` (PTX ISA "Kernel and Function Directives: .alias", PTX 6.3) makes the prototype
    fAlias a second name of fAliasee, a function with a body: a call of fAlias runs fAliasee's body. The parser
    keeps the directive verbatim (``population.ast.Directive``, name ``alias``, text ``"fAlias, fAliasee"``)."""
    bodies: dict[str, Function] = {}
    aliases: dict[str, str] = {}
    for it in module.items:
        if isinstance(it, Function):
            if it.body is not None and not it.is_entry:
                bodies[it.name] = it
        elif isinstance(it, Directive) and it.name == "alias":
            names = [t.strip() for t in it.text.split(",")]
            if len(names) == 2 and all(names):
                aliases[names[0]] = names[1]
    return bodies, aliases


def _resolve(name: str, aliases: dict[str, str]) -> str:
    """The function a call of ``name`` runs: ``name`` through its ``.alias`` chain (cycles end it)."""
    seen = {name}
    while name in aliases and aliases[name] not in seen:
        name = aliases[name]
        seen.add(name)
    return name


def _module_vars(kernel: Kernel, fn) -> tuple[set[str], list[Instruction], frozenset[str]]:
    """Names of the module's and ``fn``'s own .global/.shared/.local variables, ``fn``'s instructions in textual
    order (``population.cfg.flat_instructions``), from one walk, and the roots (``"s:<name>"``) of the variables
    whose addresses the initialisers of the module's and ``fn``'s variables hold (``.global .u64 cell = counter;``,
    ``{a, b+8, generic(c)}``: PTX ISA "Variables: Initializers", a variable's address as its initial value)."""
    decls = [it for it in kernel.module.items if isinstance(it, VarDecl)]
    names = {it.name for it in decls if it.state_space in ("global", "shared", "local")}
    instrs = []
    for loc in walk(fn):
        st = loc.stmt
        if isinstance(st, Instruction):
            instrs.append(st)
        elif isinstance(st, VarDecl):
            decls.append(st)
            if st.state_space in ("global", "shared", "local"):
                names.add(st.name)
    init = frozenset("s:" + n for d in decls if d.initializer for n in _IDENT.findall(d.initializer) if n in names)
    return names, instrs, init


def input_stores(kernel: Kernel, buffer_kinds: Sequence[str], names: Sequence[str] | None = None
                 ) -> InputStoreReport:
    """Find the memory writes of ``kernel``'s entry, and of every function it calls, whose address is not
    provably inside an owned buffer.

    buffer_kinds: the ABI kind of each ``.param`` in order (``"input"``, ``"output"``, ``"inout"``,
    ``"scalar"``, as ``workloads.base.ParamSpec.kind``); names: their ABI names (default ``param<i>``).
    Returns an InputStoreReport (lines in the canonical listing). ValueError when the entry has no body.
    """
    names = list(names) if names is not None else [f"param{i}" for i in range(len(buffer_kinds))]
    prov = provenance(kernel)
    entry = prov._an
    allowed = {f"p{i}" for i, k in enumerate(buffer_kinds) if k in ("output", "inout")}
    # a callee may write a caller's variables through a pointer parameter (an out-parameter in the caller's .local
    # depot, a shared buffer): the variables of every analysed function are the kernel's own (round 12,
    # rt12_honest_out_param)
    allowed |= {"s:" + v for an in {id(a): a for a in (entry, *prov._owner.values())}.values() for v in an.module_vars}
    hits: list[tuple[Instruction, str, int, str]] = []
    for ins in prov.instructions:
        if ins.opcode == "call":
            why = prov._unchecked_call(ins)
            if why:
                an = prov._owner.get(id(ins), entry)
                hits.append((ins, "", -1, why + ("" if an is entry else
                                                  f" (in function {an.fn.name!r}, called from the entry)")))
            continue
        if not writes_memory(ins) or destination_space(ins) not in ("global", "generic"):
            continue
        an = prov._owner.get(id(ins), entry)
        where = "" if an is entry else f" (in function {an.fn.name!r}, called from the entry)"
        mvars = an.module_vars
        ok = allowed | {"s:" + v for v in mvars}
        addr = _address(ins)
        if isinstance(addr, HandleAddress) or addr is None:
            hits.append((ins, "", -1, "writes through a tensor-map or surface handle, not a provable buffer" + where))
            continue
        base = addr.base
        if isinstance(base, Symbol):
            if base.name in mvars:
                continue
            hits.append((ins, "", -1, f"writes to symbol {base.name!r}, not a variable of the module" + where))
            continue
        if isinstance(base, Immediate):
            hits.append((ins, "", -1, "writes to an absolute address" + where))
            continue
        P, W, _ = an.val.get(base.name, _CLEAN)
        roots = _pos(P) | W
        bad = sorted(r for r in roots if r not in ok)
        params = sorted(int(r[1:]) for r in bad if r.startswith("p"))
        if params:
            i = params[0]
            nm = names[i] if i < len(names) else f"param{i}"
            kind = buffer_kinds[i] if i < len(buffer_kinds) else "unknown"
            how = "through" if f"p{i}" in P and len(P) == 1 and not W else "with an address derived from"
            hits.append((ins, nm, i, f"writes {how} {kind} {nm!r} (param {i})" + where))
        elif UNKNOWN in bad:
            hits.append((ins, "", -1, "writes through an address loaded from memory or a parameter's own "
                                      "address: no output buffer vouches for it" + where))
        elif bad:
            hits.append((ins, "", -1, f"writes through an address derived from {bad[0]!r}" + where))
        elif P and not _vouchers(P):
            # every pointer added is also subtracted (``y + (c - y)``): the address is c's, whatever c is
            r = sorted(q[1:] for q in P if q.startswith(NEG))[0]
            nm = (names[int(r[1:])] if r.startswith("p") and int(r[1:]) < len(names) else r[2:] if
                  r.startswith("s:") else r)
            hits.append((ins, "", -1, f"writes through an address no pointer vouches for: {nm!r} is subtracted "
                                      f"from it as well as added (an address `y + (c - y)` is c's, not y's)" + where))
        elif roots and not P:
            # bit roots say a value was computed from a pointer other than by pointer arithmetic: any value
            # (``y & 0`` is 0), so they cannot vouch for an address (round 11: an absolute address + (y & 0))
            hits.append((ins, "", -1, f"writes through an address no output pointer vouches for: only bits of "
                                      f"{sorted(W)[0]!r}, not pointer arithmetic on it" + where))
        elif not roots:
            hits.append((ins, "", -1, "writes through an address derived from no output parameter or module "
                                      "variable (no provenance: a constant or a value loaded from memory)" + where))
    if not hits:
        return InputStoreReport([], prov)
    lines = {id(li.node): li for li in listing(kernel.module).lines if li.node is not None}
    stores = []
    for ins, pname, i, why in hits:
        li = lines.get(id(ins))
        stores.append(InputStore(li.lineno if li else 0, li.text if li else str(ins), pname, i, why))
    return InputStoreReport(stores, prov)


def check_input_stores(kernel: Kernel, workload) -> InputStoreReport:
    """``input_stores`` with the kinds and names of ``workload.abi`` (a ``workloads.base.Workload``)."""
    return input_stores(kernel, [p.kind for p in workload.abi], [p.name for p in workload.abi])


@dataclass
class Provenance:
    """The roots (module docstring) of every register of one entry and of the functions it calls, for other
    static checks.

    instructions: the entry's instructions in textual order (``population.cfg.flat_instructions``), then those
    of each function it calls (directly or not; ``functions`` order). functions: the entry first, then those
    callees (with a body). Roots are ``"p<i>"`` (the entry's ``.param`` i), ``"s:<name>"`` (a module or
    function variable) and ``UNKNOWN``; a callee's parameters carry the roots of what its call sites pass.
    """

    instructions: list[Instruction]
    _an: _Analysis
    functions: list[Function] = field(default_factory=list)
    _owner: dict[int, _Analysis] = field(default_factory=dict)  # id(instruction) -> its function's analysis
    _bodies: dict[str, Function] = field(default_factory=dict)  # the module's callable functions with a body
    _aliases: dict[str, str] = field(default_factory=dict)  # ``.alias`` name -> aliasee
    # the module's functions without a body (through ``.alias``) that are no system call: an indirect call may run one
    _unbodied: frozenset[str] = _EMPTY

    def called(self, ins: Instruction) -> list[str]:
        """Names of the functions with a body a ``call`` may run: its target through ``.alias`` (``_callables``),
        every one for an indirect call (through a register), none for a system call or a missing body."""
        target = _call_target(ins)
        if isinstance(target, Register):
            return list(self._bodies)
        if isinstance(target, Symbol):
            name = _resolve(target.name, self._aliases)
            return [name] if name in self._bodies else []
        return []

    def _unchecked_call(self, ins: Instruction) -> str:
        """Why the stores of a ``call`` cannot be checked ("" when they can): it names a function without a body
        that is no system call (``SYSTEM_CALLS``), or is an indirect call and the module declares one."""
        target = _call_target(ins)
        if isinstance(target, Symbol):
            name = _resolve(target.name, self._aliases)
            if name in self._bodies or name in SYSTEM_CALLS:
                return ""
            via = f" (an .alias of {name!r})" if name != target.name else ""
            return (f"calls {target.name!r}{via}, a function without a body in the module that is no CUDA system "
                    f"call ({', '.join(sorted(SYSTEM_CALLS))}): what it writes cannot be checked")
        if isinstance(target, Register) and self._unbodied:
            return (f"calls through a register, which may reach {min(self._unbodied)!r}, a function without a body "
                    "in the module that is no CUDA system call: what it writes cannot be checked")
        return ""

    def address_roots(self, ins: Instruction) -> frozenset[str]:
        """Pointer and bit roots of the memory address ``ins`` names (a symbol's own root; empty when it names
        none or only a constant address; ``UNKNOWN`` for a tensor-map or surface handle, and added when every
        pointer root is also subtracted: ``y + (c - y)`` with c rootless gives ``{y, UNKNOWN}``)."""
        an = self._owner.get(id(ins), self._an)
        addr = _address(ins)
        if isinstance(addr, HandleAddress):
            return frozenset({UNKNOWN})
        if addr is None or isinstance(addr.base, Immediate):
            return _EMPTY
        if isinstance(addr.base, Symbol):
            return frozenset({"s:" + addr.base.name}) if addr.base.name in an.module_vars else frozenset(
                {UNKNOWN})
        return _public_roots(an.val.get(addr.base.name, _CLEAN))

    def address_value(self, ins: Instruction, addr: Address | HandleAddress | None = None
                      ) -> tuple[frozenset[str], frozenset[str]]:
        """(pointer roots with their sign, bit roots) of the memory address ``ins`` names (``addr``, one of its
        operands; default the first address), apart: what ``address_roots`` merges. A symbol's own root is a
        pointer root; ``UNKNOWN`` for a handle or a symbol that is no variable; empty for no address or a
        constant one. Lets a check tell a pointer added (a voucher) from one subtracted or combined with its own
        bits (``y + mad(y, -1, K)``: P {y}, W {y})."""
        an = self._owner.get(id(ins), self._an)
        addr = addr if addr is not None else _address(ins)
        if isinstance(addr, HandleAddress):
            return frozenset({UNKNOWN}), _EMPTY
        if addr is None or isinstance(addr.base, Immediate):
            return _EMPTY, _EMPTY
        if isinstance(addr.base, Symbol):
            name = addr.base.name
            return frozenset({"s:" + name} if name in an.module_vars else {UNKNOWN}), _EMPTY
        P, W, _ = an.val.get(addr.base.name, _CLEAN)
        return P, W

    def register_roots(self, ins: Instruction, name: str) -> frozenset[str]:
        """Pointer roots (sign dropped) and bit roots of register ``name`` in the function that holds ``ins``."""
        P, W, _ = self._owner.get(id(ins), self._an).val.get(name, _CLEAN)
        return _pos(P) | W

    def source_roots(self, ins: Instruction) -> frozenset[str]:
        """Roots of the memory a copy reads (``cp``'s second address operand: ``cp.async...shared.global [dst],
        [src]``), as ``address_roots`` gives them for the first; empty when ``ins`` names no second address."""
        an = self._owner.get(id(ins), self._an)
        addrs = [o for o in ins.operands if isinstance(o, Address)]
        if len(addrs) < 2 or isinstance(addrs[1].base, Immediate):
            return _EMPTY
        base = addrs[1].base
        if isinstance(base, Symbol):
            return frozenset({"s:" + base.name}) if base.name in an.module_vars else frozenset({UNKNOWN})
        return _public_roots(an.val.get(base.name, _CLEAN))


def _public_roots(v: tuple[frozenset, frozenset, frozenset]) -> frozenset[str]:
    """An address's roots for other checks: pointer roots without their sign, bit roots, and ``UNKNOWN`` when no
    pointer root vouches for it though some were added (all cancelled by subtraction: ``_vouchers``)."""
    P, W, _ = v
    if not any(r.startswith(NEG) for r in P):
        return P | W
    return _pos(P) | W | (_EMPTY if _vouchers(P) else frozenset({UNKNOWN}))


# Rounds of the interprocedural fixed point (callee parameter roots and the shared memory roots only grow; a
# module with more call levels than this is analysed with what the rounds found, then every callee parameter is
# marked UNKNOWN: sound, coarser).
_CALL_ROUNDS = 16


def provenance(kernel: Kernel) -> Provenance:
    """Run the provenance analysis of ``kernel``'s entry and of every function it calls (ValueError when the
    entry has no body).

    A ``call`` passes the roots of its arguments to the callee's parameters (union over every call site, in
    any analysed function); a call of an ``.alias`` runs its aliasee (``_callables``); an indirect call (through a
    register) may reach every function of the module with a body; a function without a body (the system calls
    ``vprintf``, ``malloc``: resolved by ptxas) is not followed (``input_stores`` rejects a call of any other).
    Memory is shared: a value any of them loads carries the roots of whatever any of them stores, and of the
    addresses the variables' initialisers hold.
    """
    fn = kernel.module.function(kernel.entry)
    if fn.body is None:
        raise ValueError(f"entry {kernel.entry!r} has no body")
    bodies, aliases = _callables(kernel.module)
    declared = {_resolve(f.name, aliases) for f in kernel.module.functions if f.body is None and not f.is_entry}
    unbodied = frozenset(n for n in declared if n not in bodies and n not in SYSTEM_CALLS)
    mvars, instrs, init = _module_vars(kernel, fn)
    entry = _Analysis(fn, mvars, instrs, None, init)
    entry.run()
    callees: dict[str, _Analysis] = {}
    scanned: dict[str, tuple[set[str], list[Instruction], frozenset[str]]] = {}
    roots: dict[str, list[tuple[frozenset, frozenset, frozenset]]] = {}
    for rnd in range(_CALL_ROUNDS + 1):
        changed: set[str] = set()
        for an in [entry, *callees.values()]:
            for _, target, args in an.call_arguments():
                names = ([_resolve(target.name, aliases)] if isinstance(target, Symbol)
                         else list(bodies) if isinstance(target, Register) else [])
                for name in names:
                    f = bodies.get(name)
                    if f is None:
                        continue  # no body: a system call, or a call input_stores rejects
                    cur = roots.get(name) or [_CLEAN] * len(f.params)
                    new = [_Analysis.join([c, args[i] if i < len(args) else _CLEAN]) if rnd < _CALL_ROUNDS
                           else (frozenset({UNKNOWN}), c[1], c[2]) for i, c in enumerate(cur)]
                    if name not in roots or new != cur:
                        roots[name] = new
                        changed.add(name)
        memory = frozenset().union(entry.memory, *(a.memory for a in callees.values()))
        if not changed and all(a.memory == memory for a in [entry, *callees.values()]):
            break
        for name in set(callees) | changed:
            f = bodies[name]
            if name not in scanned:
                scanned[name] = _module_vars(kernel, f)
            mv, ins, f_init = scanned[name]
            callees[name] = _Analysis(f, mv, ins, roots[name], memory | f_init)
            callees[name].run()
        if entry.memory != memory:
            entry = _Analysis(fn, mvars, instrs, None, memory)
            entry.run()
    owner = {id(i): an for an in callees.values() for i in an.instrs}
    all_instrs = list(instrs) + [i for an in callees.values() for i in an.instrs]
    return Provenance(all_instrs, entry, [fn, *(an.fn for an in callees.values())], owner, bodies, aliases,
                      unbodied)
