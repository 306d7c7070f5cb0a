"""Static input-store check: does any instruction of an entry write memory through an input pointer?

A kernel may not write its inputs, not even as scratch that it restores before it returns (another stream, the
caller's residual branch or a read-only mapping would see it). The gate compares inputs after each launch,
which such a kernel passes, so this check runs on the PTX before any GPU time.

Method: for every memory-writing instruction of the entry (``st``, ``atom``, ``red``, ``cp``/``cp.reduce``
bulk copies to global memory, ``st.async``/``red.async``, ``multimem.st``/``.red``, ``sust``/``sured``;
PTX ISA 9.0 "Data Movement and Conversion Instructions" and "Parallel Synchronization and Communication
Instructions") whose destination state space is global or generic, the pointer provenance of the address's base
register is traced backwards over def-use chains (the definitions of ``population.defuse.destinations``): a value loaded with
``ld.param`` from a 64-bit ``.param`` carries that parameter; arithmetic, ``mov``, ``cvta``, ``selp`` and
``cvt`` carry the union of their operands' provenance (a conservative union over every definition, as PTX is
not SSA); a difference of two pointers into the same buffers (``sub``) is an offset and carries none; predicates
carry none; a value loaded from memory carries the marker ``UNKNOWN`` (a laundered pointer: the dynamic checks
must catch those). The entry's ``.param`` list is matched to the workload ABI by position: a store whose
address derives from a parameter of kind ``input`` is an input store (``inout`` buffers may be written).
Shared, local and param destinations never reach an input buffer and are skipped.

Costs a def-use pass over the entry (a few ms for a 2,000-instruction kernel). Cannot see: a pointer laundered
through memory, an address rebuilt from an integer that was never derived from the parameter (e.g. a pointer
guessed from another buffer's address plus a constant), writes by a callee (``call`` targets are not followed,
the ABI's kernels have none). The dynamic checks (inputs compared after every launch and after the benchmark,
read-only mappings where the driver allows) cover those.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from population.ast import Address, Function, Instruction, Register, Symbol
from population.cfg import flat_instructions
from population.defuse import POINTER_TYPES, destinations, operand_types, sources
from population.kernel import Kernel
from population.printer import listing

UNKNOWN = "?"  # provenance marker: the value came from memory

# Opcodes whose result is a plain function of their register operands (PTX ISA "Integer Arithmetic", "Logic
# and Shift", "Comparison and Selection", "Data Movement and Conversion": mov/cvt/cvta).
_ARITH = frozenset({
    "add", "sub", "mul", "mad", "mul24", "mad24", "sad", "div", "rem", "abs", "neg", "min", "max", "and", "or",
    "xor", "not", "cnot", "lop3", "shf", "shl", "shr", "prmt", "bfe", "bfi", "selp", "slct", "mov", "cvt", "cvta",
    "addc", "subc", "madc", "szext", "bmsk", "mapa", "shfl", "brev", "copysign", "fma",
})
# Opcodes whose result never holds a pointer (predicates, counts, special values).
_NO_POINTER = frozenset({"setp", "set", "testp", "isspacep", "vote", "match", "activemask", "popc", "clz",
                         "bfind", "fns", "getctarank", "redux", "createpolicy"})
_STATE_SPACES = ("global", "shared", "local", "param", "const")


@dataclass(frozen=True)
class InputStore:
    """One instruction that writes memory through an input buffer.

    line: 1-based line in the canonical listing of the module (the numbering of edit scripts and ptxas errors);
    text: that line; param: the ABI name of the input written (``"x"``); index: the ``.param`` position.
    """

    line: int
    text: str
    param: str
    index: int

    def __str__(self) -> str:
        return f"line {self.line}: `{self.text.strip()}` writes through input {self.param!r} (param {self.index})"


@dataclass
class InputStoreReport:
    """The check's findings: ``stores`` (writes through an input: reject), ``laundered`` (writes whose address
    came from memory: not provable either way, left to the dynamic checks) as listing lines."""

    stores: list[InputStore]
    laundered: list[int]

    @property
    def ok(self) -> bool:
        return not self.stores

    def reason(self) -> str:
        """One line for the store's reason column: the first store and how many there are."""
        if not self.stores:
            return ""
        more = f" (and {len(self.stores) - 1} more)" if len(self.stores) > 1 else ""
        return f"static input-store check: {self.stores[0]}{more}"


def _destination_space(ins: Instruction) -> str:
    """State space of the memory a writing instruction modifies: the first state-space modifier (for copies,
    ``cp.async.bulk.dst.src``: the destination comes first), ``generic`` when none is named."""
    for m in ins.modifiers:
        base = m.split("::", 1)[0]
        if base in _STATE_SPACES:
            return base
    return "generic"


def _writes_memory(ins: Instruction) -> bool:
    op, mods = ins.opcode, ins.modifiers
    if op in ("st", "atom", "red", "sust", "sured", "stmatrix"):
        return True
    if op == "multimem":
        return "ld_reduce" not in mods
    if op == "cp":
        if any(m in mods for m in ("commit_group", "wait_group", "wait_all", "arrive", "prefetch")):
            return False
        return True
    return False


def _provenance(fn: Function, defs: dict[str, list[Instruction]], reg: str, params: dict[str, int],
                memo: dict[str, frozenset[str]]) -> frozenset[str]:
    """Pointer parameters (names) and UNKNOWN that register ``reg``'s value may derive from (see module)."""
    if reg in memo:
        return memo[reg]
    memo[reg] = frozenset()  # cycle (loop-carried): contributes nothing new on this path
    out: set[str] = set()
    for ins in defs.get(reg, ()):
        op = ins.opcode
        if op in ("ld", "ldu"):
            addr = next((o for o in ins.operands if isinstance(o, Address)), None)
            if "param" in ins.modifiers and addr is not None and isinstance(addr.base, Symbol):
                if addr.base.name in params:
                    out.add(addr.base.name)
                # scalar params carry no pointer
            else:
                out.add(UNKNOWN)
            continue
        if op in _NO_POINTER:
            continue
        if op not in _ARITH:
            out.add(UNKNOWN)  # atom results, call returns, anything unusual: from memory or unknown
            continue
        preds = {r for r, t, _ in operand_types(ins) if t == "pred"}
        regs = [r for r in sources(ins) if r not in preds and not (ins.predicate is not None
                                                                  and r == ins.predicate.register.name)]
        for o in ins.operands[1:]:
            if isinstance(o, Symbol) and o.name in params:  # mov.u64 %rd, x_param (the param's address)
                out.add(o.name)
        parts = [_provenance(fn, defs, r, params, memo) for r in regs]
        if op in ("sub", "subc") and len(parts) == 2 and parts[0] and parts[0] == parts[1] and UNKNOWN not in parts[0]:
            continue  # p - q with p, q in the same buffer(s): an offset, not a pointer
        for p in parts:
            out |= p
    memo[reg] = frozenset(out)
    return memo[reg]


def input_stores(kernel: Kernel, buffer_kinds: Sequence[str], names: Sequence[str] | None = None
                 ) -> InputStoreReport:
    """Find the instructions of ``kernel``'s entry that write through an input buffer.

    buffer_kinds: the ABI kind of each ``.param`` in order (``"input"``, ``"output"``, ``"inout"``,
    ``"scalar"``, as ``workloads.base.ParamSpec.kind``); names: their ABI names (default ``param<i>``).
    Returns an InputStoreReport (lines in the canonical listing). ValueError when the entry has no body.
    """
    fn = kernel.module.function(kernel.entry)
    if fn.body is None:
        raise ValueError(f"entry {kernel.entry!r} has no body")
    names = list(names) if names is not None else [f"param{i}" for i in range(len(buffer_kinds))]
    pointer_params = {p.name: i for i, p in enumerate(fn.params) if p.type in POINTER_TYPES}
    inputs = {pname: i for pname, i in pointer_params.items()
              if i < len(buffer_kinds) and buffer_kinds[i] == "input"}
    instrs = flat_instructions(fn)
    defs: dict[str, list[Instruction]] = {}  # register -> the instructions writing it (def-use, defs only)
    for ins in instrs:
        for r in destinations(ins):
            defs.setdefault(r, []).append(ins)
    memo: dict[str, frozenset[str]] = {}
    hits: list[tuple[Instruction, str]] = []
    laundered: list[Instruction] = []
    for ins in instrs:
        if not _writes_memory(ins) or _destination_space(ins) not in ("global", "generic"):
            continue
        addr = next((o for o in ins.operands if isinstance(o, Address)), None)
        if addr is None:
            continue
        if isinstance(addr.base, Symbol):
            roots = frozenset({addr.base.name})
        elif isinstance(addr.base, Register):
            roots = _provenance(fn, defs, addr.base.name, pointer_params, memo)
        else:
            continue
        written = sorted(r for r in roots if r in inputs)
        if written:
            hits.append((ins, written[0]))
        elif UNKNOWN in roots:
            laundered.append(ins)
    if not hits and not laundered:
        return InputStoreReport([], [])
    lines = {id(li.node): li for li in listing(kernel.module).lines if li.node is not None}
    stores = []
    for ins, pname in hits:
        li = lines.get(id(ins))
        i = inputs[pname]
        stores.append(InputStore(li.lineno if li else 0, li.text if li else str(ins), names[i], i))
    return InputStoreReport(stores, [lines[id(i)].lineno for i in laundered if id(i) in lines])


def check_input_stores(kernel: Kernel, workload) -> InputStoreReport:
    """``input_stores`` with the kinds and names of ``workload.abi`` (a ``workloads.base.Workload``)."""
    return input_stores(kernel, [p.kind for p in workload.abi], [p.name for p in workload.abi])
