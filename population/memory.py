"""Memory access sites of a PTX function: which instructions touch which state space, how many bytes each
thread moves per execution, and how deep in loops they sit (the input of static traffic estimates and of the
cache-hint and prefetch operators).

State spaces follow PTX ISA 9.0 "State Spaces" (``.global .shared .local .param .const``; an ``ld``/``st``
without one is generic, "Generic Addressing"). Instruction forms follow "Data Movement and Conversion
Instructions" (``ld``, ``ldu``, ``st``, ``prefetch``, ``cp.async``,
``cp.async.bulk``, ``cp.reduce.async.bulk``, ``st.async``, ``red.async``, ``ldmatrix``, ``stmatrix``,
``multimem``) and "Parallel Synchronization and Communication Instructions" (``atom``, ``red``). Texture/surface instructions and the shared-memory operands of
``wgmma`` descriptors are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from population.ast import Address, Function, Immediate, Instruction
from population.cfg import basic_blocks, flat_instructions, loop_depths
from population.defuse import TYPE_BITS

STATE_SPACES = ("global", "shared", "local", "param", "const")
KINDS = ("load", "store", "atomic", "reduction", "async_copy", "prefetch")
#: Vector modifiers and their element counts (PTX ISA "Vectors").
VECTOR_WIDTHS = {"v2": 2, "v4": 4, "v8": 8}


@dataclass(frozen=True)
class MemorySite:
    """One instruction that accesses memory.

    instruction: the Instruction node (the very object in the function body).
    index: its position in ``flat_instructions(fn)``.
    kind: ``"load" | "store" | "atomic" | "reduction" | "async_copy" | "prefetch"``.
    state_space: ``"global" | "shared" | "local" | "param" | "const" | "generic"``; for copies between two
        spaces, the global side when there is one (that is where DRAM traffic goes), else the source.
    width_bytes: bytes one thread moves per execution: vector count x element size (a ``ld.v4.f32`` is 16);
        for ``cp.async`` the cp-size operand; for bulk copies the size operand when it is an immediate
        (bytes per instruction, issued by one thread); 0 when not statically known or for a prefetch.
    vector: 1, 2, 4 or 8 (the ``.vN`` modifier).
    type: element type without the dot (``"f32"``), or None when the instruction has none.
    loop_depth: natural-loop nesting depth of the instruction's basic block (0 = straight-line code).
    block: id of that basic block in ``basic_blocks(fn)``.
    address: the memory operand, or None.
    """

    instruction: Instruction
    index: int
    kind: str
    state_space: str
    width_bytes: int
    vector: int
    type: str | None
    loop_depth: int
    block: int
    address: Address | None = None


def _space(mod: str) -> str | None:
    base = mod.split("::", 1)[0]
    return base if base in STATE_SPACES else None


def _spaces(instr: Instruction) -> list[str]:
    return [s for s in (_space(m) for m in instr.modifiers) if s is not None]


def classify(instr: Instruction) -> tuple[str, str] | None:
    """(kind, state_space) of a memory instruction, or None when ``instr`` does not access memory
    (mbarrier and fence instructions are synchronisation, not data movement)."""
    op = instr.opcode
    mods = instr.modifiers
    spaces = _spaces(instr)
    if op == "cp":
        if any(m in mods for m in ("commit_group", "wait_group", "wait_all", "arrive")):
            return None  # cp.async group bookkeeping and cp.async.mbarrier.arrive move no data
        if "prefetch" in mods:
            return "prefetch", "global"
        kind = "reduction" if "reduce" in mods else "async_copy"
        if "global" in spaces:
            return kind, "global"
        # cp.async.bulk.dst.src: the last space named is the source
        return kind, spaces[-1] if spaces else "generic"
    if op in ("ld", "ldu"):
        return "load", spaces[0] if spaces else "generic"
    if op == "st":
        return "store", spaces[0] if spaces else "generic"
    if op == "atom":
        return "atomic", spaces[0] if spaces else "generic"
    if op == "red":
        return "reduction", spaces[0] if spaces else "generic"
    if op in ("prefetch", "prefetchu"):
        return "prefetch", spaces[0] if spaces else "generic"
    if op == "ldmatrix":
        return "load", "shared"
    if op == "stmatrix":
        return "store", "shared"
    if op == "multimem":
        if "ld_reduce" in mods:
            return "load", "global"
        return ("store" if "st" in mods else "reduction"), "global"
    return None


def _width(instr: Instruction, kind: str) -> tuple[int, int, str | None]:
    """(width_bytes, vector, element type)."""
    mods = instr.modifiers
    vector = next((VECTOR_WIDTHS[m] for m in mods if m in VECTOR_WIDTHS), 1)
    types = [m for m in mods if m in TYPE_BITS and m != "pred"]
    elem = types[-1] if types else None
    if instr.opcode in ("ldmatrix", "stmatrix"):
        # .x1/.x2/.x4: one 32-bit register per 8x8 b16 matrix per thread (PTX ISA "ldmatrix")
        n = next((int(m[1:]) for m in mods if m in ("x1", "x2", "x4")), 1)
        return 4 * n, 1, elem
    if kind == "prefetch":
        return 0, 1, None
    if instr.opcode == "cp":
        # cp.async[.bulk] [dst], [src], size, ...: the third operand is the byte count (cp-size / size);
        # tensor copies take their extent from the tensor map, unknown here.
        if "tensor" not in mods and len(instr.operands) >= 3 and isinstance(instr.operands[2], Immediate):
            return int(instr.operands[2].value), 1, elem
        return 0, 1, elem
    if elem is None:
        return 0, vector, None
    return max(TYPE_BITS[elem] // 8, 1) * vector, vector, elem


def memory_sites(fn: Function) -> list[MemorySite]:
    """Every memory-accessing instruction of ``fn`` in textual order (scopes flattened) with its kind, state
    space, width per thread, loop depth and basic block (see :class:`MemorySite`)."""
    instrs = flat_instructions(fn)
    blocks = basic_blocks(fn)
    depths = loop_depths(fn, blocks)
    owner = [0] * len(instrs)
    for blk in blocks:
        owner[blk.start:blk.end] = [blk.id] * (blk.end - blk.start)
    out: list[MemorySite] = []
    for i, ins in enumerate(instrs):
        c = classify(ins)
        if c is None:
            continue
        kind, space = c
        width, vector, elem = _width(ins, kind)
        b = owner[i]
        addr = next((o for o in ins.operands if isinstance(o, Address)), None)
        out.append(MemorySite(ins, i, kind, space, width, vector, elem, depths[b], b, addr))
    return out
