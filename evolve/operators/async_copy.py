"""Turn a row's 16-byte global loads into asynchronous copies into shared memory (``cp.async.cg``).

A thread that holds its slice of a long row in registers keeps every byte in flight in registers until it
arrives; ``cp.async`` moves the bytes from global memory into shared memory without staging them in
registers (they stay in flight in the memory system), and ``.cg`` caches them in L2 only, as the read-only
path of a row that is read once. The values come back into the same registers with one ``ld.shared`` per copy
after ``cp.async.wait_all``, at the first instruction that reads any of them:

    ld.global.nc.v4.u32 {%r1, %r2, %r3, %r4}, [%rd6];          cp.async.cg.shared.global [%ac_s0], [%rd6], 16;
    ld.global.nc.v4.u32 {%r5, %r6, %r7, %r8}, [%rd6+4096];  ->  cp.async.cg.shared.global [%ac_s0+4096], [%rd6+4096], 16;
    ...                                                         ...
    <first use of %r1 .. %r8>                                   cp.async.wait_all;
                                                                ld.shared.v4.u32 {%r1, %r2, %r3, %r4}, [%ac_s0];
                                                                ld.shared.v4.u32 {%r5, %r6, %r7, %r8}, [%ac_s0+4096];
                                                                <first use of %r1 .. %r8>

PTX ISA 9.0, "Data Movement and Conversion Instructions": ``cp.async`` (16-byte ``.cg`` copies, sm_80 and
later), ``cp.async.wait_all`` (equivalent to ``cp.async.commit_group`` followed by ``cp.async.wait_group 0``:
every prior ``cp.async`` of the executing thread is complete, and its writes are visible to that thread).

**Why per-thread slots and no CTA barrier.** Copy ``i`` of a thread lands in its own slot
``buffer + (i * T + tid) * 16`` (``T`` the CTA's threads; a warp's 32 slots of one copy are 512 contiguous
bytes, so the ``ld.shared.v4`` reads are free of bank conflicts). Only the thread that issued a copy reads
its slot, so ``cp.async.wait_all`` alone orders the copy before the read; no ``bar.sync`` is needed, and none
is inserted: the reload point may lie in a branch only some threads take (the template's guarded chunks),
where a CTA barrier would be undefined. The bulk form (``cp.async.bulk.shared::cluster.global.mbarrier::
complete_tx::bytes`` with an ``mbarrier``, "cp.async.bulk" and "mbarrier" in the same manual) needs the CTA's
bytes to be contiguous and a CTA-wide barrier phase: it would rewrite the address arithmetic of the whole row,
not a set of loads, and is not what this rewrite does.

**The pattern** (``REWRITE async_copy <line> [count=k]``, ``line`` the first load): from that load, in listing
order, the unpredicated 16-byte loads ``ld.global[.nc][.ca|.cg|.cs|.lu].v4.b32|u32|s32|f32`` (or
``.v2.b64|u64|s64|f64``) met before the first instruction ``P`` that reads a register any of them loaded,
at most ``count`` of them; the scan stops at any store, barrier, atomic, fence or call. The rewrite refuses
(ValueError, which an edit script reports as an EditApplyError; the operator raises NoProposal) unless:

- every destination register of a copied load has no other definition in the entry (so the slot always holds
  what the register would hold: a path that skips a copy leaves slot and register equally stale);
- on every control-flow path from a copied load, ``P`` comes before any reader of its registers, before the
  same load again (two copies in flight into one slot are unordered), before any store, barrier, atomic,
  fence or call, and before the thread ends (``population.cfg`` basic blocks, instruction-level search). A
  loop may reissue the copy after ``P``: the thread's ``ld.shared`` of the slot happens before the next copy's
  write, as an asynchronous copy is performed as if by a new thread started at its issue (libcu++ memory model,
  "Asynchronous operations");
- the entry has no indirect branch (``brx``), the module targets sm_80 or later, the launch block is
  ``(T, 1, 1)``;
- the entry's static shared memory plus the new buffer (``count * T * 16`` bytes) plus the launch's dynamic
  shared memory fits the per-block limit without opt-in of the target (``targets.occupancy.DeviceProps.
  shared_mem_per_block``, 48 KiB: a static ``.shared`` array cannot use the opt-in carve-out).

The slot address is computed once at the start of the entry from ``%tid.x``; a thread with ``%tid.x >= T`` or
a non-zero ``%tid.y``/``%tid.z`` executes ``trap`` there, so a later launch edit that changes the block shape
makes the kernel fail loudly instead of writing past the buffer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.common import (
    Site,
    entry_function,
    entry_sites,
    fresh_name,
    line_edits,
    memory_effect,
    reads,
    target_cc,
    used_names,
    writes,
)
from evolve.operators.common import (
    make_instruction as _ins,
)
from evolve.operators.vectorize import TYPE_BYTES
from population.analysis import flat_instructions
from population.ast import (
    Address,
    Immediate,
    Instruction,
    Predicate,
    Register,
    SpecialRegister,
    Symbol,
    VarDecl,
    Vector,
)
from population.cfg import basic_blocks
from population.edits import Edit, EditScript, Rewrite, register_rewrite
from population.kernel import Kernel
from population.printer import print_statement
from targets.occupancy import device_props

COPY_BYTES = 16
_VEC_TYPES = {"v4": ("b32", "u32", "s32", "f32"), "v2": ("b64", "u64", "s64", "f64")}
_CACHE_OPS = frozenset({"ca", "cg", "cs", "lu", "nc"})
MIN_CC = (8, 0)  # cp.async: sm_80 and later


@dataclass(frozen=True)
class Copy:
    """One load to copy: its flat instruction index, site, destination registers and address."""

    index: int
    site: Site
    dests: tuple[str, ...]
    address: Address


def copyable(ins: Instruction) -> bool:
    """Whether ``ins`` is an unpredicated, unordered 16-byte vector load from global memory (module docstring)."""
    if ins.opcode != "ld" or ins.predicate is not None or len(ins.operands) != 2:
        return False
    mods = list(ins.modifiers)
    if "global" not in mods or memory_effect(ins).kind != "read":
        return False
    vec = [m for m in mods if m in _VEC_TYPES]
    if len(vec) != 1:
        return False
    types = [m for m in mods if m in _VEC_TYPES[vec[0]]]
    if len(types) != 1 or set(mods) - {"global", vec[0], types[0]} - _CACHE_OPS:
        return False
    dst, addr = ins.operands
    return (isinstance(dst, Vector) and all(isinstance(e, Register) for e in dst.elements)
            and isinstance(addr, Address) and isinstance(addr.base, Register))


def static_shared_bytes(kernel: Kernel) -> int:
    """Bytes of the non-extern ``.shared`` variables of the module and of the entry (array dims x element bytes)."""
    decls = [i for i in kernel.module.items if isinstance(i, VarDecl)]
    decls += [s.node for s in entry_sites(kernel) if isinstance(s.node, VarDecl)]
    total = 0
    for d in decls:
        if d.state_space != "shared" or "extern" in d.linkage or any(x is None for x in d.dims):
            continue
        n = int(np.prod(d.dims)) if d.dims else 1
        total += n * TYPE_BYTES.get(d.type, 4)
    return total


def _successors(blocks, n_instr: int) -> list[list[int]]:
    """Instruction-level successors over ``blocks`` (flat instruction indices; empty blocks are passed through)."""
    first: dict[int, list[int]] = {}

    def entry_of(bid: int, seen: frozenset[int] = frozenset()) -> list[int]:
        if bid in first:
            return first[bid]
        b = blocks[bid]
        if b.start < b.end:
            out = [b.start]
        elif bid in seen:
            out = []
        else:
            out = sorted({i for s in b.successors for i in entry_of(s, seen | {bid})})
        first[bid] = out
        return out

    succ: list[list[int]] = [[] for _ in range(n_instr)]
    for b in blocks:
        for n in range(b.start, b.end):
            if n + 1 < b.end:
                succ[n] = [n + 1]
            else:
                succ[n] = sorted({i for s in b.successors for i in entry_of(s)})
    return succ


def _hazard(ins: Instruction) -> bool:
    """A store, barrier, fence, atomic or unknown instruction (``common.memory_effect``); a ``bra`` is control
    flow only."""
    return ins.opcode != "bra" and memory_effect(ins).kind in ("write", "barrier")


def _escapes(instrs: list[Instruction], succ: list[list[int]], start: int, stop: int, dests: set[str]) -> str | None:
    """Why a path from instruction ``start`` reaches trouble before ``stop`` (module docstring), or None."""
    todo = deque(succ[start])
    seen: set[int] = set()
    while todo:
        n = todo.popleft()
        if n == stop or n in seen:
            continue
        seen.add(n)
        ins = instrs[n]
        if n == start:
            return "the load can run again before the first use (a loop around it)"
        if reads(ins) & dests:
            return f"{print_statement(ins).strip()!r} reads a loaded register on a path that skips the first use"
        if ins.opcode in ("ret", "exit", "trap", "call", "brx"):
            return f"{ins.opcode} on a path from the load before the first use"
        if _hazard(ins):
            return f"{print_statement(ins).strip()!r} touches memory between the load and the first use"
        todo.extend(succ[n])
    return None


@dataclass(frozen=True)
class Plan:
    """A matched pattern: the copies, the flat index and site of the first use ``P``, the CTA threads."""

    copies: tuple[Copy, ...]
    use_index: int
    use_site: Site
    threads: int


def plan(kernel: Kernel, line: int, count: int | None = None) -> Plan:
    """Match the pattern at canonical ``line`` (module docstring). ValueError with the reason when it does not
    apply."""
    fn = entry_function(kernel)
    instrs = flat_instructions(fn)
    sites = [s for s in entry_sites(kernel) if isinstance(s.node, Instruction)]
    if len(sites) != len(instrs) or any(s.node is not i for s, i in zip(sites, instrs, strict=True)):
        raise ValueError("the entry's statements cannot be matched to its control-flow graph")
    start = next((k for k, s in enumerate(sites) if s.line == line), None)
    if start is None or not copyable(instrs[start]):
        raise ValueError(f"line {line} is not an unpredicated 16-byte ld.global (v4 of 32-bit or v2 of 64-bit)")
    if any(i.opcode == "brx" for i in instrs):
        raise ValueError("the entry has an indirect branch (brx)")
    if target_cc(kernel) < MIN_CC:
        raise ValueError(f"cp.async needs sm_80 or later; the module targets {kernel.module.target}")
    bx, by, bz = kernel.launch.block
    if by != 1 or bz != 1:
        raise ValueError(f"launch block {kernel.launch.block}: the per-thread slots need a (T, 1, 1) block")
    ndefs: dict[str, int] = {}
    for ins in instrs:
        for r in writes(ins):
            ndefs[r] = ndefs.get(r, 0) + 1
    copies: list[Copy] = []
    loaded: set[str] = set()
    limit = None  # the first reader of a loaded register, or the first hazard: the latest reload point
    for k in range(start, len(instrs)):
        ins = instrs[k]
        if reads(ins) & loaded:
            limit = k
            break
        if copyable(ins) and (count is None or len(copies) < count):
            dests = tuple(e.name for e in ins.operands[0].elements)  # type: ignore[union-attr]
            if all(ndefs.get(r, 0) == 1 for r in dests) and not set(dests) & reads(ins):
                copies.append(Copy(k, sites[k], dests, ins.operands[1]))  # type: ignore[arg-type]
                loaded |= set(dests)
                continue
            if not copies:
                raise ValueError(f"line {line}: a register it loads has another definition in the entry")
        if _hazard(ins) or ins.opcode in ("ret", "exit", "trap", "call"):
            limit = k
            break
    if limit is None:
        raise ValueError(f"line {line}: no instruction reads the loaded registers")
    # The reload point: the latest instruction up to ``limit`` that every path from every copy passes first
    # (a guarded first use is not one; the join after the guarded loads is).
    succ = _successors(basic_blocks(fn), len(instrs))
    why = ""
    for use in range(limit, copies[-1].index, -1):
        bad = next(((c, w) for c in copies if (w := _escapes(instrs, succ, c.index, use, set(c.dests)))), None)
        if bad is None:
            break
        if use == limit:
            why = f"line {bad[0].site.line}: {bad[1]}"
    else:
        raise ValueError(f"no point after the loads is passed on every path before their registers are read "
                         f"({why})")
    buffer = len(copies) * bx * COPY_BYTES
    props = device_props(target_cc(kernel))
    total = static_shared_bytes(kernel) + buffer + kernel.launch.dynamic_smem_bytes
    if total > props.shared_mem_per_block:
        raise ValueError(f"{len(copies)} copies x {bx} threads x 16 B = {buffer} B of shared memory; with the "
                         f"kernel's own {total - buffer} B that exceeds the {props.shared_mem_per_block} B per "
                         "block of the target (lower count=)")
    return Plan(tuple(copies), use, sites[use], bx)


def async_copy_edits(kernel: Kernel, line: int, count: int | None = None) -> list[Edit]:
    """The line edits of ``REWRITE async_copy <line> [count=k]`` (module docstring): the buffer declaration and
    slot setup before the entry's first instruction, each load replaced by its ``cp.async``, and the wait plus
    the ``ld.shared`` reloads before the first use. ValueError naming the reason when the pattern does not apply."""
    p = plan(kernel, line, count)
    fn = entry_function(kernel)
    taken = used_names(fn) | {i.name for i in kernel.module.items if isinstance(i, VarDecl)}
    taken |= {s.node.name for s in entry_sites(kernel) if isinstance(s.node, VarDecl)}
    buf = fresh_name(taken, "__async_copy_buf")
    tid, tmp, slot, bad = (Register(fresh_name(taken, stem)) for stem in ("%ac_t", "%ac_u", "%ac_s", "%ac_p"))
    stride = p.threads * COPY_BYTES
    decl = VarDecl(state_space="shared", type="b8", name=buf, align=COPY_BYTES, dims=(len(p.copies) * stride,))
    setup = [
        decl,
        _ins("mov", ("u32",), tid, SpecialRegister("%tid.y")),
        _ins("mov", ("u32",), tmp, SpecialRegister("%tid.z")),
        _ins("or", ("b32",), tmp, tmp, tid),
        _ins("mov", ("u32",), tid, SpecialRegister("%tid.x")),
        _ins("setp", ("ne", "u32"), bad, tmp, Immediate("0")),
        _ins("setp", ("ge", "or", "u32"), bad, tid, Immediate(str(p.threads)), bad),
        _ins("trap", (), pred=Predicate(bad)),
        _ins("mov", ("u32",), slot, Symbol(buf)),
        _ins("mad", ("lo", "u32"), slot, tid, Immediate(str(COPY_BYTES)), slot),
    ]
    repl: dict[int, list] = {}
    for i, c in enumerate(p.copies):
        dst = Address(slot, i * stride or None)
        repl[c.site.line] = [_ins("cp", ("async", "cg", "shared", "global"), dst, c.address,
                                  Immediate(str(COPY_BYTES)))]
    ins_p = p.use_site.node
    assert isinstance(ins_p, Instruction)
    reload = [_ins("cp", ("async", "wait_all"))]
    for i, c in enumerate(p.copies):
        ld = c.site.node
        assert isinstance(ld, Instruction)
        vec = next(m for m in ld.modifiers if m in _VEC_TYPES)
        typ = next(m for m in ld.modifiers if m in _VEC_TYPES[vec])
        reload.append(_ins("ld", ("shared", vec, typ), ld.operands[0], Address(slot, i * stride or None)))
    repl[p.use_site.line] = [*reload, ins_p]
    return line_edits(kernel, repl, setup)


def _expand(kernel: Kernel, line: int, args: dict[str, int]) -> list[Edit]:
    count = args.pop("count", None)
    if args:
        raise ValueError(f"unknown parameter(s) {sorted(args)}; async_copy takes count=k (k >= 1)")
    if count is not None and count < 1:
        raise ValueError(f"count={count}: must be >= 1")
    return async_copy_edits(kernel, line, count)


register_rewrite("async_copy", _expand)


def candidate_groups(kernel: Kernel, count: int | None = None) -> dict[int, int]:
    """Canonical line -> number of copies, for each line where ``REWRITE async_copy <line> [count=]`` applies
    (the first load of each group; a load inside an earlier group is not listed again)."""
    out: dict[int, int] = {}
    covered: set[int] = set()
    for s in entry_sites(kernel):
        if not isinstance(s.node, Instruction) or s.line in covered or not copyable(s.node):
            continue
        try:
            p = plan(kernel, s.line, count)
        except ValueError:
            continue
        out[s.line] = len(p.copies)
        covered |= {c.site.line for c in p.copies}
    return out


def candidate_lines(kernel: Kernel, count: int | None = None) -> list[int]:
    """The lines of ``candidate_groups``, in listing order."""
    return sorted(candidate_groups(kernel, count))


@dataclass
class AsyncCopyOperator:
    """Propose ``REWRITE async_copy <line>`` for a group of 16-byte global loads (module docstring).

    counts: values of ``count=`` drawn from (0: every load of the group); min_copies: smallest group proposed
    (a lone copy waited for at once only adds the shared-memory round trip); a group is drawn with probability
    proportional to its copies (the row's kept chunks before the short groups of other paths); weight:
    sampling weight."""

    name: str = "async_copy"
    weight: float = 1.0
    counts: tuple[int, ...] = (0,)
    min_copies: int = 2

    def __post_init__(self) -> None:
        if not self.counts or any(c < 0 for c in self.counts):
            raise ValueError(f"async_copy operator: counts must be >= 0 (0 = all), got {list(self.counts)}")
        if self.min_copies < 1:
            raise ValueError(f"async_copy operator: min_copies must be >= 1, got {self.min_copies}")

    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> EditScript:
        """One REWRITE edit. NoProposal when no group of at least ``min_copies`` 16-byte global loads of the
        entry can be copied."""
        count = int(self.counts[int(rng.integers(len(self.counts)))]) or None
        groups = {ln: n for ln, n in candidate_groups(parent, count).items() if n >= self.min_copies}
        if not groups:
            raise NoProposal(f"entry {parent.entry!r}: no group of {self.min_copies} or more 16-byte global loads "
                             "can become cp.async copies")
        lines = sorted(groups)
        sizes = np.array([groups[ln] for ln in lines], dtype=float)
        line = lines[int(rng.choice(len(lines), p=sizes / sizes.sum()))]
        return EditScript((Rewrite("async_copy", line, (("count", count),) if count else ()),))
