"""Memory access sites of a PTX function: which instructions touch which state space, how many bytes each
thread moves per execution, and how deep in loops they sit (the input of static traffic estimates and of the
cache-hint and prefetch operators).

State spaces follow PTX ISA 9.0 "State Spaces" (``.global .shared .local .param .const``; an ``ld``/``st``
without one is generic, "Generic Addressing"). Instruction forms follow "Data Movement and Conversion
Instructions" (``ld``, ``ldu``, ``st``, ``prefetch``, ``cp.async``,
``cp.async.bulk``, ``cp.async.bulk.tensor``, ``cp.reduce.async.bulk``, ``st.async``, ``red.async``,
``ldmatrix``, ``stmatrix``, ``multimem``), "Parallel Synchronization and Communication Instructions"
(``atom``, ``red``), "Warp Level Matrix Multiply-Accumulate Instructions" (``wmma.load`` / ``wmma.store``),
"Asynchronous Warpgroup Level Matrix Multiply-Accumulate" (``wgmma.mma_async``: its shared-memory A and B
operands, read through matrix descriptors) and "Texture / Surface Instructions" (``tex``, ``tld4``, ``suld``,
``sust``: texture and surface memory live in global memory).

Matrix instructions move a whole matrix per warp (wmma, ldmatrix, stmatrix) or warpgroup (wgmma); their
``width_bytes`` is that matrix's bytes divided by the threads that share the instruction, so that
``width_bytes x threads`` is the traffic of one execution, as for ``ld``/``st``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from population.ast import Address, Function, Immediate, Instruction, Vector
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
    if op == "wmma":
        if "load" in mods or "store" in mods:
            return ("load" if "load" in mods else "store"), spaces[0] if spaces else "generic"
        return None  # wmma.mma works on registers
    if op == "wgmma":
        # the A (unless in registers) and B operands of wgmma.mma_async are read from shared memory
        return ("load", "shared") if "mma_async" in mods else None
    if op in ("tex", "tld4"):
        return "load", "global"
    if op == "suld":
        return "load", "global"
    if op == "sust":
        return "store", "global"
    if op == "sured":
        return "reduction", "global"
    if op == "multimem":
        if "ld_reduce" in mods:
            return "load", "global"
        return ("store" if "st" in mods else "reduction"), "global"
    return None


_SHAPE = re.compile(r"m(\d+)n(\d+)(?:k(\d+))?$")
#: Element bits of the wmma / wgmma element types beyond TYPE_BITS (single-bit ``.b1``).
_MATRIX_BITS = {**TYPE_BITS, "b1": 1}


def _shape(mods: tuple[str, ...]) -> tuple[int, int, int] | None:
    for m in mods:
        hit = _SHAPE.match(m)
        if hit:
            return int(hit.group(1)), int(hit.group(2)), int(hit.group(3) or 0)
    return None


def _wmma_width(mods: tuple[str, ...]) -> tuple[int, str | None]:
    """Bytes per thread of a ``wmma.load.{a,b,c}`` / ``wmma.store.d``: the M x K (a), K x N (b) or M x N
    (c, d) matrix of the ``.mMnNkK`` shape at the element type's width, over the warp's 32 threads (PTX ISA
    "wmma.load", "wmma.store"). 0 when the shape or type is not written."""
    shape = _shape(mods)
    types = [m for m in mods if m in _MATRIX_BITS]
    if shape is None or not types:
        return 0, None
    m, n, k = shape
    which = next((x for x in mods if x in ("a", "b", "c", "d")), "c")
    elems = {"a": m * k, "b": k * n}.get(which, m * n)
    return elems * _MATRIX_BITS[types[-1]] // 8 // 32, types[-1]


def _wgmma_width(instr: Instruction) -> tuple[int, str | None]:
    """Shared-memory bytes per thread of ``wgmma.mma_async.mMnNkK.dtype.atype.btype d, a, b, ...``: the
    M x K A matrix when ``a`` is a descriptor (a register Vector ``{...}`` holds A in registers instead;
    ``.sp`` halves A) plus the K x N B matrix, over the warpgroup's 128 threads (PTX ISA "wgmma.mma_async")."""
    mods = instr.modifiers
    shape = _shape(mods)
    types = [m for m in mods if m in _MATRIX_BITS]
    if shape is None or not types:
        return 0, None
    m, n, k = shape
    a_type, b_type = (types[-2], types[-1]) if len(types) >= 3 else (types[-1], types[-1])
    a_in_registers = len(instr.operands) > 1 and isinstance(instr.operands[1], Vector)
    a_bits = 0 if a_in_registers else m * k * _MATRIX_BITS[a_type] // (2 if "sp" in mods else 1)
    return (a_bits + k * n * _MATRIX_BITS[b_type]) // 8 // 128, b_type


def _width(instr: Instruction, kind: str) -> tuple[int, int, str | None]:
    """(width_bytes, vector, element type)."""
    mods = instr.modifiers
    vector = next((VECTOR_WIDTHS[m] for m in mods if m in VECTOR_WIDTHS), 1)
    types = [m for m in mods if m in TYPE_BITS and m != "pred"]
    elem = types[-1] if types else None
    op = instr.opcode
    if op in ("ldmatrix", "stmatrix"):
        # .x1/.x2/.x4 matrices of the .shape per warp (PTX ISA "ldmatrix", "stmatrix"): an 8x8 b16 (m8n8) or
        # an 8x16 b8 (m8n16) matrix is 128 bytes, one 32-bit register per thread; m16n16 b8 is 256 bytes.
        n = next((int(m[1:]) for m in mods if m in ("x1", "x2", "x4")), 1)
        per = 8 if "m16n16" in mods else 4
        return per * n, 1, elem
    if op == "wmma":
        width, t = _wmma_width(mods)
        return width, 1, t
    if op == "wgmma":
        width, t = _wgmma_width(instr)
        return width, 1, t
    if op in ("tex", "tld4"):
        # tex.geom.v4.dtype.ctype: the destination type comes first (PTX ISA "tex"); tld4 always gathers 4
        dtype = types[0] if types else None
        n = 4 if op == "tld4" else vector
        return (max(TYPE_BITS[dtype] // 8, 1) * n if dtype else 0), n, dtype
    if kind == "prefetch":
        return 0, 1, None
    if instr.opcode == "cp":
        # cp.async[.bulk] [dst], [src], size, ...: the third operand is the byte count (cp-size / size);
        # tensor copies take their extent from the tensor map, unknown here.
        if "tensor" not in mods and len(instr.operands) >= 3 and isinstance(instr.operands[2], Immediate):
            # cp.async: 4, 8 or 16 bytes per thread; cp.async.bulk: bytes for the one issuing thread
            return int(instr.operands[2].value), 1, elem
        return 0, 1, elem
    if elem is None:
        return 0, vector, None
    return max(TYPE_BITS[elem] // 8, 1) * vector, vector, elem


def _address(ins: Instruction, space: str) -> Address | None:
    """The memory operand of the accessed ``space``: for a copy between spaces (``cp.async.shared.global
    [dst], [src]``), the one on the global side when the instruction names the spaces in dst, src order; the
    first Address otherwise. Texture, surface and tensor-map addresses (``[handle, {coords}]``) are not
    Addresses: None when no plain Address is left."""
    addrs = [o for o in ins.operands if isinstance(o, Address)]
    if not addrs:
        return None
    if ins.opcode == "cp" and len(addrs) >= 2 and "tensor" not in ins.modifiers:
        spaces = _spaces(ins)
        if len(spaces) >= 2 and space in spaces[:2]:
            return addrs[spaces.index(space)]
    if ins.opcode == "cp" and "tensor" in ins.modifiers:
        # the global side is the tensor map ([tmap, {coords}]); the plain Addresses are shared / mbarrier
        return None if space == "global" else addrs[0]
    return addrs[0]


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
        addr = _address(ins, space)
        out.append(MemorySite(ins, i, kind, space, width, vector, elem, depths[b], b, addr))
    return out
