"""Static estimate of the global-memory bytes one entry requests, from its PTX alone. An estimate, not a count.

Inputs: the entry's memory sites (``population.analysis.memory_sites``: kind, state space, bytes per thread
per execution), its natural loops, the launch (CTAs, threads per CTA) and ``elements_per_cta_sweep``, the
number of elements one CTA streams in one pass over its share of the data (from the workload).

The model, stated once:

1. Which accesses count: ``.global`` sites, and generic ones whose address derives from a pointer parameter
   (nvcc emits generic accesses to global buffers when it cannot prove the space). Prefetches count 0.
   Each site is put in a *group*: the pointer parameter(s) its address is computed from, found by walking
   def-use chains back to ``ld.param`` (``"?"`` when none is reached).
2. Straight-line sites run once per thread (guards are ignored). A bulk copy (``cp.async.bulk``, issued by
   one elected thread) runs once per CTA.
3. A loop that holds global accesses is assumed to sweep the CTA's share of the data once per pass:
   ``trips = elements_per_cta_sweep / (threads * E)``, where E, the elements each thread advances per
   iteration, is the smallest over the loop's groups of (sum of the group's access widths / element size).
   With 16-byte bf16 loads of x plus two 16-byte fp32 loads of w per iteration, E = 8 from x. Two loops that
   each sweep a row count twice. Enclosing loops do not multiply an inner loop's trips (an inner loop is
   assumed to tile the same sweep).
   3b. When nvcc unrolls a loop k times it emits a remainder loop for the last ``trips mod k`` iterations;
   a loop whose accesses times an integer k >= 2 equal another loop's is taken for such a remainder and
   counted 0 (its iterations belong to the unrolled loop's sweep).
4. Kernels with alternative paths (a vector path and a scalar fallback, a keep-in-registers path and a
   streaming path) are charged for one path through the control-flow graph with loops collapsed (strongly
   connected components), not for the sum of all paths: the *cheapest path that sweeps every buffer the
   kernel touches at least once* (each (group, direction) moves at least
   ``elements_per_cta_sweep * group element size`` bytes; the group element size is that of its narrowest
   scalar access, else ``element_bytes``). That is the path a well-formed launch takes: an early exit
   sweeps nothing, and guarded straight-line chunks (``if (c < nchunks)``, a row kept in registers) count
   only as many as the row needs. Coverage counts straight-line sites once per thread; the bytes charged
   for straight-line code are capped at one sweep per (group, direction), since guarded chunks past the
   row's end do not run. When no path sweeps everything, the costliest path is charged.
   4b. Branches on the same condition are correlated: a path that takes one such branch and skips another
   is infeasible. Conditions are compared by value numbering (a predicate's defining ``setp`` over operands
   traced through single definitions, ``mov`` copies and ``ld.param``), so ``N < 16392`` tested before pass 1
   and again before pass 2 (a keep-the-row-in-registers decision) is one decision, and nvcc's single
   ``tid < N`` guard of both passes cannot be "skip pass 1, run pass 2".
   4c. A branch that skips a loop entirely (from outside the loop straight to a block the loop exits to, while
   the other way leads into the loop) is the zero-trip case; since every loop is assumed to sweep, such
   bypass edges (and early exits that land where a loop exits) are not taken.
   4d. Mid-body exits: a loop whose latch tests the exit (a do-while, as nvcc emits) and that also leaves
   from a predicated branch earlier in its body (the exit test after each copy of an unrolled body, a row
   guard ``if (row >= M) break`` inside a row loop) runs its whole body on every iteration but the last;
   rules 3 and 7 count trips for the whole body, so such exits are not taken (every access of the body is
   multiplied by the loop's trips, never only a prefix of the body). A predicate register written more than
   once (each unrolled copy writes its own exit test) holds a different value at each branch on it: such
   branches are separate conditions for rule 4b.
   4e. The coverage requirement counts only code that a launch with these parameters can reach (rule 6): a
   scalar fallback the parameters rule out sets no requirement for the vector path that runs.
5. Total = bytes per CTA on that path * CTAs.
6. Uniform values (``evaluators.uniform``): with the scalar parameters of the launch given (``params``), a
   branch whose predicate depends only on parameters and immediates (``N < 520``: keep the row in registers;
   ``N % 8 == 0``: the vector path) is decided: only its taken edge is followed. Pointers are taken aligned.
7. Counted loops: a loop whose exit test compares an induction register (one definition outside the loop,
   one ``add r, r, step`` inside) against a uniform bound, from a uniform start, runs a known number of times
   T (``for (it = 0; it < ROW_ITERS; ++it)``: T = ROW_ITERS). Such a loop is not a sweep: every access inside
   it executes T times as often (its straight-line cap is T sweeps), and the sweep loops inside it sweep once
   per iteration. Only loops that are not counted follow rule 3.
   7b. Unrolled counted loops: a body holding k increments of the induction register, each in a block of its
   own that ends in an exit test of it (one of them the latch; what nvcc and the ``unroll`` operator emit
   when unrolling a loop whose trip count is known only at run time), is k copies of the source loop's body.
   T is simulated increment by increment as in rule 7; the unrolled body runs T / k times (fractional when
   k does not divide T: the copies are alike, so the total is T copies' worth), so each copy's accesses run
   T / k times and the straight-line cap stays T sweeps.
8. Shared buffers: a group whose addresses never depend on the CTA's index (``%ctaid``, ``%clusterid``) is
   read by every CTA alike (a weight vector); ``TrafficEstimate.shared_groups`` names them, so the cost model
   can charge their re-reads to L2, not DRAM.
9. Synchronisation on the charged path, per CTA: CTA barriers (``bar``/``barrier`` other than
   ``barrier.cluster``), cluster barriers (``barrier.cluster.wait``) and distributed-shared-memory loads
   (``mapa`` address mappings and ``ld.shared::cluster``), counted like accesses (once per execution, times
   loop trips).

It says nothing about caching: bytes re-read by a second pass or by every CTA (a weight vector) are
requested bytes; the static evaluator decides which of them reach DRAM.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx

from evaluators.uniform import UniformValues
from population.analysis import (
    POINTER_TYPES,
    Loop,
    MemorySite,
    basic_blocks,
    cfg,
    destinations,
    flat_instructions,
    loops,
    memory_sites,
    sources,
)
from population.ast import Address, Function, Instruction, Register, SpecialRegister, Symbol

_MAX_PATH_STATES = 32  # per-node path states kept while enumerating paths (most coverage, then cheapest)
_MAX_TRIPS = 1 << 20  # a counted loop simulated past this many iterations is treated as a sweep loop
UNKNOWN_GROUP = "?"
SYNC_GROUP = "__sync__"  # pseudo group of the synchronisation counters (rule 9); never a buffer
CTA_INDEX_REGISTERS = ("%ctaid", "%clusterid", "%cluster_ctaid")


@dataclass(frozen=True)
class SiteTraffic:
    """One counted global access: flat instruction index, kind (load/store/atomic/reduction/async_copy),
    width_bytes per execution, group (pointer parameter(s) the address derives from), loop (header block of
    the innermost loop, None for straight-line code), executions per thread per CTA, bytes per CTA."""

    index: int
    kind: str
    width_bytes: int
    group: str
    loop: int | None
    executions_per_thread: float
    bytes_per_cta: float


@dataclass(frozen=True)
class BodyTraffic:
    """One loop body (``loop`` = header block id) or the straight-line code (``loop`` None) on the charged
    path (rule 4): bytes_per_cta it moves there; load_bytes_per_iteration: bytes of global loads one thread issues
    per iteration (per execution of the straight-line code), what it can have in flight at once;
    loads_per_iteration: the number of those load sites; access_bytes_per_iteration / accesses_per_iteration:
    the same for loads and stores together (their ratio is the body's mean access width per thread);
    iterations_per_cta: how often one thread runs the body per CTA (loop trips times enclosing counted loops;
    1 for straight-line code outside loops); partitioned_load_bytes_per_cta: the body's loads of buffers that
    are not shared by all CTAs (rule 8), the bytes that stream from DRAM; distinct_load_bytes_per_iteration: the
    widths of the body's distinct (buffer, width) loads of such buffers, i.e. one copy of an unrolled body;
    sweep: the body is a sweep loop (rule 3), not straight-line code or a counted loop."""

    loop: int | None
    bytes_per_cta: float
    load_bytes_per_iteration: int
    loads_per_iteration: int
    access_bytes_per_iteration: int = 0
    accesses_per_iteration: int = 0
    iterations_per_cta: float = 1.0
    partitioned_load_bytes_per_cta: float = 0.0
    distinct_load_bytes_per_iteration: int = 0
    sweep: bool = False

    @property
    def mean_width_bytes(self) -> float:
        """Mean bytes per thread per access in this body (0 when it has none)."""
        return self.access_bytes_per_iteration / self.accesses_per_iteration if self.accesses_per_iteration else 0.0


@dataclass(frozen=True)
class TrafficEstimate:
    """Estimated global-memory bytes requested by one launch (module docstring has the model).

    bytes: total over all CTAs on the charged path (rule 4; float, bytes); load_bytes / store_bytes: its
    split (atomics and reductions count as stores); bytes_per_cta; ctas; threads_per_cta; element_bytes:
    the streamed element size used; sweeps: group -> bytes per CTA / (elements_per_cta_sweep * the group's
    element size) on that path (2.0 = the group's data is read twice); sites: every counted site; bodies: the loop bodies (and straight-line code) on that path with
    their bytes; max_width_bytes: widest global access (bytes per thread);
    loads_per_iteration: most global load sites in one loop body (the independent loads a thread can have
    in flight, a memory-level-parallelism proxy; straight-line code counts as one body);
    group_bytes: (group, "load"|"store") -> bytes per CTA on the charged path; shared_groups: groups whose
    addresses do not depend on the CTA index (rule 8: every CTA reads the same data);
    cta_barriers / cluster_barriers / dsmem_loads: per CTA on the charged path (rule 9);
    loop_trips: header block -> iterations T of each counted loop (rule 7) at this launch (for a loop unrolled
    into k copies, rule 7b, the source loop's iterations: its body runs T / k times);
    decided_branches: how many conditional branches the parameter values decided (rule 6).
    """

    bytes: float
    load_bytes: float
    store_bytes: float
    bytes_per_cta: float
    ctas: int
    threads_per_cta: int
    element_bytes: int
    sweeps: dict[str, float] = field(default_factory=dict)
    sites: tuple[SiteTraffic, ...] = ()
    bodies: tuple[BodyTraffic, ...] = ()
    max_width_bytes: int = 0
    loads_per_iteration: int = 0
    group_bytes: dict[tuple[str, str], float] = field(default_factory=dict)
    shared_groups: frozenset[str] = frozenset()
    cta_barriers: float = 0.0
    cluster_barriers: float = 0.0
    dsmem_loads: float = 0.0
    loop_trips: dict[int, int] = field(default_factory=dict)
    decided_branches: int = 0

    def group_sweeps(self, group: str) -> float:
        """Sweeps of ``group`` per CTA (0.0 when the group is not accessed)."""
        return self.sweeps.get(group, 0.0)


class _Defs:
    """Register -> defining instructions (only the ``defs`` half of ``population.analysis.def_use``; the
    estimate never needs the uses, and building them costs as much again)."""

    def __init__(self, fn: Function) -> None:
        self.defs: dict[str, list[Instruction]] = {}
        for ins in flat_instructions(fn):
            for r in destinations(ins):
                self.defs.setdefault(r, []).append(ins)

    def defs_of(self, reg: str) -> list[Instruction]:
        return self.defs.get(reg, [])


def _pointer_params(fn: Function) -> set[str]:
    return {p.name for p in fn.params if p.type in POINTER_TYPES}


def _roots(reg: str, du, pointer_params: set[str], memo: dict[str, frozenset[str]]) -> frozenset[str]:
    """Pointer parameters ``reg``'s value is computed from (iterative DFS over def-use, cycle-safe)."""
    if reg in memo:
        return memo[reg]
    found: set[str] = set()
    seen = {reg}
    stack = [reg]
    while stack:
        r = stack.pop()
        if r in memo:
            found |= memo[r]
            continue
        for ins in du.defs_of(r):
            if ins.opcode == "ld" and "param" in ins.base_modifiers:
                for op in ins.operands:
                    if isinstance(op, Address) and isinstance(op.base, Symbol) and op.base.name in pointer_params:
                        found.add(op.base.name)
                continue
            for s in sources(ins):
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
    memo[reg] = frozenset(found)
    return memo[reg]


def _group(site: MemorySite, du, pointer_params: set[str], memo: dict[str, frozenset[str]]) -> str:
    addr = site.address
    if addr is None:
        return UNKNOWN_GROUP
    if isinstance(addr.base, Symbol):
        return addr.base.name  # a pointer parameter, or a module-level .global variable
    if isinstance(addr.base, Register):
        roots = _roots(addr.base.name, du, pointer_params, memo)
        return "+".join(sorted(roots)) if roots else UNKNOWN_GROUP
    return UNKNOWN_GROUP


def _innermost(loop_list: Sequence[Loop]) -> dict[int, Loop]:
    inner: dict[int, Loop] = {}
    for lp in loop_list:  # outermost first, so deeper loops overwrite
        for b in lp.blocks:
            if b not in inner or inner[b].depth < lp.depth:
                inner[b] = lp
    return inner


def _direction(kind: str) -> str:
    return "load" if kind in ("load", "async_copy") else "store"


# One underlying CFG edge of a component edge: (its rule-4b decision or None, source block, whether it is the
# branch-taken edge of a predicated ``bra`` (None: an unconditional edge)).
_EdgeRef = tuple[tuple[str, bool] | None, int, bool | None]


@dataclass(frozen=True)
class _CountedLoop:
    """A loop's exit test in counted form (rule 7): ``setp`` ``test`` compares induction register ``iv``
    (operand ``iv_pos`` of the setp's sources) with the other operand; ``init`` defines iv outside the loop,
    ``step`` is the increment's other operand; the loop continues while the predicate (xor ``negated``)
    equals ``continue_when``; ``copies``: how many increments (each followed by its exit test) the body holds,
    k for a loop unrolled k times with an exit after every copy (rule 7b)."""

    header: int
    test: Instruction
    iv_pos: int
    init: Instruction
    step: object
    negated: bool
    continue_when: bool
    copies: int = 1


@dataclass(frozen=True)
class _Prepared:
    """The shape-independent part of the estimate for one function."""

    sites: list[tuple[MemorySite, str]]
    inner: dict[int, Loop]
    condensed: nx.DiGraph
    block_to_node: dict[int, int]
    remainder_loops: frozenset[int]
    group_elt: dict[str, int]
    edge_decisions: dict[tuple[int, int], list[_EdgeRef]]
    topo_order: tuple[int, ...] = ()
    preds: dict[int, tuple[int, ...]] = field(default_factory=dict)
    sinks: tuple[int, ...] = ()
    live_conditions: dict[int, frozenset[str]] = field(default_factory=dict)
    fn: Function | None = None
    defs: dict[str, list[Instruction]] = field(default_factory=dict)
    loops_by_header: dict[int, Loop] = field(default_factory=dict)
    branch_predicates: dict[int, tuple[str, bool]] = field(default_factory=dict)
    counted: dict[int, _CountedLoop] = field(default_factory=dict)
    shared_groups: frozenset[str] = frozenset()
    sync_sites: tuple[tuple[str, int], ...] = ()  # (counter name, block id), rule 9


def _live_conditions(condensed: nx.DiGraph, topo: tuple[int, ...],
                     decisions: dict[tuple[int, int], list[_EdgeRef]]) -> dict[int, frozenset[str]]:
    """Per component: the conditions tested on edges reachable from it (entering it included)."""
    live: dict[int, frozenset[str]] = {}
    for n in reversed(topo):
        conds = {d[0][0] for p in condensed.predecessors(n) for d in decisions.get((p, n), []) if d[0] is not None}
        for succ in condensed.successors(n):
            conds |= live[succ]
        live[n] = frozenset(conds)
    return live


def _zero_trip_bypasses(blocks, g: nx.DiGraph, loop_list: Sequence[Loop]) -> set[tuple[int, int]]:
    """Edges G -> X that skip a loop L entirely (rule 4c): G outside L ends in a predicated branch, X is a
    block L exits to, and G's other successor reaches L's header without passing through X."""
    out: set[tuple[int, int]] = set()
    for lp in loop_list:
        targets = {v for _, v in lp.exits}
        for b in blocks:
            if b.id in lp.blocks or len(b.successors) != 2:
                continue
            for x in b.successors:
                if x not in targets:
                    continue
                other = next(y for y in b.successors if y != x)
                if other == lp.header or (other in g and nx.has_path(g.subgraph(n for n in g if n != x), other,
                                                                     lp.header)):
                    out.add((b.id, x))
    return out


def _mid_body_exits(blocks, loop_list: Sequence[Loop]) -> set[tuple[int, int]]:
    """Exit edges (rule 4d) that leave a loop from a predicated branch in a non-latch block of a loop that
    also exits from a latch; the path walk does not take them."""
    out: set[tuple[int, int]] = set()
    for lp in loop_list:
        latches = set(lp.latches)
        if not any(u in latches for u, _ in lp.exits):
            continue
        for u, v in lp.exits:
            if u not in latches and len(blocks[u].successors) == 2:
                out.add((u, v))
    return out


def _value_key(reg: str, du, memo: dict[str, str], depth: int = 0) -> str:
    """A name for the value a register holds, equal for registers computed the same way from the same
    parameters (local value numbering through single definitions: ``ld.param`` of one parameter, ``mov``
    copies, and the same opcode over equal operands). Registers written more than once keep their name."""
    if reg in memo:
        return memo[reg]
    defs = du.defs_of(reg)
    key = reg
    if len(defs) == 1 and depth < 8:
        ins = defs[0]
        if ins.opcode == "ld" and "param" in ins.base_modifiers:
            sym = next((op.base.name for op in ins.operands if isinstance(op, Address) and isinstance(op.base, Symbol)),
                       None)
            key = f"param:{sym}" if sym else reg
        else:
            parts = []
            for op in ins.operands[1:]:
                if isinstance(op, Register):
                    parts.append(_value_key(op.name, du, memo, depth + 1))
                else:
                    parts.append(getattr(op, "text", None) or getattr(op, "name", None) or repr(op))
            key = reg if ins.predicate is not None else (
                parts[0] if ins.opcode == "mov" and len(parts) == 1 else f"{ins.full_opcode}({','.join(parts)})")
    memo[reg] = key
    return key


def _edge_decisions(blocks, g: nx.DiGraph, du, block_to_node: dict[int, int], bypass: set[tuple[int, int]]
                    ) -> dict[tuple[int, int], list[_EdgeRef]]:
    """For each edge between components that is not a zero-trip bypass, its underlying CFG edges: the
    (condition, value) the branch implies when that condition tests two or more branches (rule 4b, else None),
    the source block, and whether the edge is a predicated branch's taken edge (rule 6; None when the source
    block has no predicated branch). Component pairs joined only by bypass edges are absent."""
    memo: dict[str, str] = {}
    cond: dict[int, str] = {}
    guards: dict[str, int] = {}
    for b in blocks:
        t = b.terminator
        if t is not None and t.opcode == "bra" and t.predicate is not None:
            reg = t.predicate.register.name
            # A predicate written more than once (an unrolled loop's exit test in every chunk) holds a
            # different value at each branch: such branches are not one condition.
            cond[b.id] = _value_key(reg, du, memo) if len(du.defs_of(reg)) <= 1 else f"{reg}@{b.id}"
            guards[cond[b.id]] = guards.get(cond[b.id], 0) + 1
    out: dict[tuple[int, int], list[tuple[str, bool] | None]] = {}
    for u, v in g.edges:
        cu, cv = block_to_node[u], block_to_node[v]
        if cu == cv or (u, v) in bypass:
            continue
        dec: tuple[str, bool] | None = None
        t = blocks[u].terminator
        taken = g.edges[u, v].get("kind") == "branch"
        if u in cond and guards[cond[u]] >= 2:
            dec = (cond[u], taken != t.predicate.negated)
        ref = (dec, u, taken if u in cond else None)
        lst = out.setdefault((cu, cv), [])
        if ref not in lst:
            lst.append(ref)
    return out


def _remainder_loops(sites: list[tuple[MemorySite, str]], inner: dict[int, Loop]) -> frozenset[int]:
    """Headers of loops that are the remainder of an unrolled loop (rule 3b): their accesses, as a multiset
    of (group, direction, width), times an integer k >= 2 equal another loop's."""
    sig: dict[int, Counter[tuple[str, str, int]]] = {}
    for s, grp in sites:
        lp = inner.get(s.block)
        if lp is not None:
            sig.setdefault(lp.header, Counter())[(grp, _direction(s.kind), s.width_bytes)] += 1
    out = set()
    for a, sa in sig.items():
        for b, sb in sig.items():
            if a == b or set(sa) != set(sb):
                continue
            ratios = {sb[k] / sa[k] for k in sa}
            if len(ratios) == 1 and (k := ratios.pop()) >= 2 and k == int(k):
                out.add(a)
                break
    return frozenset(out)


def _depends_on_cta(reg: str, du, memo: dict[str, bool]) -> bool:
    """Whether ``reg``'s value is computed from a CTA-index special register (rule 8; iterative DFS)."""
    if reg in memo:
        return memo[reg]
    seen, stack, found = {reg}, [reg], False
    while stack and not found:
        r = stack.pop()
        if memo.get(r):
            found = True
            break
        for ins in du.defs_of(r):
            if any(isinstance(op, SpecialRegister) and op.name.startswith(CTA_INDEX_REGISTERS)
                   for op in ins.operands[1:]):
                found = True
                break
            for src in sources(ins):
                if src not in seen:
                    seen.add(src)
                    stack.append(src)
    memo[reg] = found
    return found


def _shared_groups(sites: list[tuple[MemorySite, str]], du) -> frozenset[str]:
    memo: dict[str, bool] = {}
    varying: set[str] = set()
    groups: set[str] = set()
    for s, grp in sites:
        if grp == UNKNOWN_GROUP:
            continue
        groups.add(grp)
        a = s.address
        if a is not None and isinstance(a.base, Register) and _depends_on_cta(a.base.name, du, memo):
            varying.add(grp)
    return frozenset(groups - varying)


def _operand_key(op: object) -> str:
    if isinstance(op, Register):
        return f"reg:{op.name}"
    return str(getattr(op, "text", None) or getattr(op, "name", None) or repr(op))


def _reaching_def(block, reg: str, du) -> Instruction | None:
    """The definition of ``reg`` that reaches ``block``'s terminator: the last one in the block (None when it is
    predicated: it may not execute), else the register's only definition, else None."""
    for ins in reversed(block.instructions[:-1]):
        if reg in destinations(ins):
            return ins if ins.predicate is None else None
    defs = du.defs_of(reg)
    return defs[0] if len(defs) == 1 else None


def _increment_step(inc: Instruction, iv: str) -> object | None:
    """The step of ``add iv, iv, step`` (either operand order), or None when ``inc`` is not such an add."""
    if inc.opcode != "add" or inc.predicate is not None or len(inc.operands) != 3:
        return None
    a, c = inc.operands[1], inc.operands[2]
    if isinstance(a, Register) and a.name == iv:
        return c
    if isinstance(c, Register) and c.name == iv:
        return a
    return None


def _counted_loops(blocks, loop_list: Sequence[Loop], du) -> dict[int, _CountedLoop]:
    """Loops whose exit test has the counted form of rule 7 (whether the start, step and bound are uniform is
    decided per launch, in ``_loop_trips``), unrolled ones included (rule 7b)."""
    out: dict[int, _CountedLoop] = {}
    for lp in loop_list:
        loop_ins = {id(ins) for bb in lp.blocks for ins in blocks[bb].instructions}
        exit_tests: dict[int, tuple[Instruction, bool, bool]] = {}  # block -> (setp, negated, continue_when)
        for bid in sorted(lp.blocks):
            b = blocks[bid]
            t = b.terminator
            if t is None or t.opcode != "bra" or t.predicate is None or len(b.successors) != 2:
                continue
            inside = [s in lp.blocks for s in b.successors]
            if inside[0] == inside[1]:
                continue
            test = _reaching_def(b, t.predicate.register.name, du)
            if test is not None and test.opcode == "setp":
                # successors[0] is the branch target: the loop goes on when the branch is taken iff it is inside
                exit_tests[bid] = (test, t.predicate.negated, inside[0])
        for test, negated, continue_when in exit_tests.values():
            found = None
            for pos, op in enumerate(test.operands[1:3]):
                if not isinstance(op, Register):
                    continue
                defs = du.defs_of(op.name)
                in_loop = [d for d in defs if id(d) in loop_ins]
                outside = [d for d in defs if id(d) not in loop_ins]
                if len(outside) != 1 or not in_loop:
                    continue
                steps = [_increment_step(d, op.name) for d in in_loop]
                if any(st is None for st in steps) or len({_operand_key(st) for st in steps}) != 1:
                    continue
                if len(in_loop) > 1 and not _unrolled_copies(blocks, lp, in_loop, op.name, exit_tests):
                    continue
                found = _CountedLoop(lp.header, test, pos, outside[0], steps[0], negated, continue_when,
                                     copies=len(in_loop))
                break
            if found is not None:
                out[lp.header] = found
                break
    return out


def _unrolled_copies(blocks, lp: Loop, increments: list[Instruction], iv: str,
                     exit_tests: Mapping[int, tuple[Instruction, bool, bool]]) -> bool:
    """Rule 7b: every increment of ``iv`` sits in a block of its own that ends in an exit test of ``iv``
    (the signature of a counted loop unrolled with an exit after each copy), one of them the latch."""
    where: list[int] = []
    for inc in increments:
        bid = next((b for b in lp.blocks if any(ins is inc for ins in blocks[b].instructions)), None)
        if bid is None or bid not in exit_tests:
            return False
        test = exit_tests[bid][0]
        if not any(isinstance(op, Register) and op.name == iv for op in test.operands[1:3]):
            return False
        where.append(bid)
    return len(set(where)) == len(where) and any(b in lp.latches for b in where)


def _sync_sites(blocks) -> tuple[tuple[str, int], ...]:
    out: list[tuple[str, int]] = []
    for b in blocks:
        for ins in b.instructions:
            if ins.opcode in ("bar", "barrier"):
                if "cluster" in ins.modifiers:
                    if "wait" in ins.modifiers:
                        out.append(("cluster_barriers", b.id))
                elif any(m in ins.modifiers for m in ("sync", "red")) or not ins.modifiers:
                    out.append(("cta_barriers", b.id))
            elif ins.opcode == "mapa" or (ins.opcode == "ld" and "shared::cluster" in ins.modifiers):
                out.append(("dsmem_loads", b.id))
    return tuple(out)


def _prepare(fn: Function) -> _Prepared:
    blocks = basic_blocks(fn)
    g = cfg(fn, blocks)
    du = _Defs(fn)
    ptrs = _pointer_params(fn)
    memo: dict[str, frozenset[str]] = {}
    kept: list[tuple[MemorySite, str]] = []
    for s in memory_sites(fn):
        if s.kind == "prefetch" or s.state_space not in ("global", "generic"):
            continue
        grp = _group(s, du, ptrs, memo)
        if s.state_space == "generic" and grp == UNKNOWN_GROUP:
            continue  # a generic access not traceable to a global buffer may well be shared or local
        kept.append((s, grp))
    loop_list = loops(fn, g)
    # Rule 4 walks the CFG with the natural loops' back edges removed: a path runs each loop body once, along
    # one path through it (every iteration takes the same uniform decisions), and the body's accesses are
    # weighted by its trips. Cycles that are no natural loop (irreducible) are collapsed into one node.
    acyclic = g.copy()
    acyclic.remove_edges_from([(latch, lp.header) for lp in loop_list for latch in lp.latches])
    condensed = nx.condensation(acyclic)
    inner = _innermost(loop_list)
    group_elt: dict[str, int] = {}
    for st, grp in kept:
        if st.vector == 1 and st.width_bytes > 0 and st.kind in ("load", "store"):
            group_elt[grp] = min(group_elt.get(grp, st.width_bytes), st.width_bytes)
    mapping = dict(condensed.graph["mapping"])
    decisions = _edge_decisions(blocks, acyclic, du, mapping, _zero_trip_bypasses(blocks, g, loop_list)
                                 | _mid_body_exits(blocks, loop_list))
    topo = tuple(nx.lexicographical_topological_sort(condensed))
    branch_predicates = {b.id: (b.terminator.predicate.register.name, b.terminator.predicate.negated)
                         for b in blocks if b.terminator is not None and b.terminator.opcode == "bra"
                         and b.terminator.predicate is not None and len(b.successors) == 2}
    return _Prepared(kept, inner, condensed, mapping, _remainder_loops(kept, inner), group_elt, decisions,
                     topo_order=topo,
                     preds={n: tuple(sorted(condensed.predecessors(n))) for n in condensed},
                     sinks=tuple(sorted(n for n in condensed if condensed.out_degree(n) == 0)),
                     live_conditions=_live_conditions(condensed, topo, decisions),
                     fn=fn, defs=du.defs, loops_by_header={lp.header: lp for lp in loop_list},
                     branch_predicates=branch_predicates, counted=_counted_loops(blocks, loop_list, du),
                     shared_groups=_shared_groups(kept, du), sync_sites=_sync_sites(blocks))


def _loop_trips(prep: _Prepared, uv: UniformValues) -> dict[int, int]:
    """Iterations of each counted loop at this launch (rule 7): simulated from the uniform start, step and
    bound; loops whose values are not uniform, or that run past ``_MAX_TRIPS``, are left out."""
    from evaluators.uniform import _CMP, _wrap

    out: dict[int, int] = {}
    for h, c in prep.counted.items():
        try:
            start = uv._eval(c.init, 0)
        except (ArithmeticError, ValueError, TypeError, IndexError):
            start = None
        step = uv.operand(c.step)
        other = uv.operand(c.test.operands[2 - c.iv_pos])
        cmp = next((m for m in c.test.modifiers if m in _CMP), None)
        typ = next((m for m in c.test.modifiers if m[:1] in "subf" and m[1:].isdigit()), None)
        if None in (start, step, other, cmp) or isinstance(start, bool) or step == 0:
            continue
        utyp = ("u" + typ[1:]) if typ and typ[0] in "ub" else typ

        def goes_on(iv: int | float, c: _CountedLoop = c, other=other, cmp: str = cmp, utyp=utyp) -> bool:
            a, b = (iv, other) if c.iv_pos == 0 else (other, iv)
            r = _CMP[cmp](_wrap(a, utyp), _wrap(b, utyp))
            return (r != c.negated) == c.continue_when

        n, iv = 1, start + step  # the increment runs before the test (nvcc's latch form)
        while goes_on(iv) and n < _MAX_TRIPS:
            n += 1
            iv += step
        if n < _MAX_TRIPS:
            out[h] = n
    return out


def _decided(prep: _Prepared, uv: UniformValues) -> dict[int, bool]:
    """Block -> whether its conditional branch is taken, for branches on uniform predicates (rule 6)."""
    out: dict[int, bool] = {}
    for b, (reg, negated) in prep.branch_predicates.items():
        v = uv.value(reg)
        if isinstance(v, bool):
            out[b] = v != negated
    return out


def _default_element_bytes(sites: list[tuple[MemorySite, str]]) -> int:
    widths = [s.width_bytes // s.vector for s, _ in sites if s.kind == "load" and s.width_bytes > 0]
    return max(min(widths), 1) if widths else 4


def estimate_traffic(
    fn: Function,
    grid: Sequence[int],
    block: Sequence[int],
    elements_per_cta_sweep: int,
    *,
    element_bytes: int | None = None,
    params: Mapping[str, int | float] | None = None,
) -> TrafficEstimate:
    """Estimated global bytes requested by launching entry ``fn`` with ``grid`` x ``block`` (module docstring).

    grid, block: 1 to 3 positive ints (CTAs, threads per CTA); elements_per_cta_sweep: elements one CTA
    streams per pass (``Workload.elements_per_cta_sweep``); element_bytes: size of one streamed element
    (2 for bf16; default: the narrowest scalar global load of the entry, or 4); params: the launch's scalar
    parameter values by ``.param`` name (``evaluators.uniform.param_values``), which decide uniform branches
    and counted loops (rules 6, 7); without them no branch is decided and no loop is counted.

    Raises ValueError on non-positive launch dimensions, a negative sweep or a function without a body.
    Analyses ``fn`` afresh; use ``TrafficModel`` to estimate several launches of one function.
    """
    return TrafficModel(fn).estimate(grid, block, elements_per_cta_sweep, element_bytes=element_bytes,
                                     params=params)


class TrafficModel:
    """The control-flow, loop and def-use analysis of one entry, done once, for estimates at many launches.

    Raises ValueError when ``fn`` has no body. The function must not be mutated afterwards.
    """

    def __init__(self, fn: Function) -> None:
        if fn.body is None:
            raise ValueError(f"function {fn.name} has no body to estimate traffic for")
        self.fn = fn
        self._prep = _prepare(fn)

    def estimate(self, grid: Sequence[int], block: Sequence[int], elements_per_cta_sweep: int, *,
                 element_bytes: int | None = None,
                 params: Mapping[str, int | float] | None = None) -> TrafficEstimate:
        """As ``estimate_traffic`` for this model's function."""
        return _estimate(self._prep, grid, block, elements_per_cta_sweep, element_bytes, params)


def _loop_chain(prep: _Prepared, block: int) -> list[Loop]:
    """The loops holding ``block``, innermost first."""
    out: list[Loop] = []
    lp = prep.inner.get(block)
    while lp is not None:
        out.append(lp)
        lp = prep.loops_by_header.get(lp.parent) if lp.parent is not None else None
    return out


def _estimate(prep: _Prepared, grid: Sequence[int], block: Sequence[int], elements_per_cta_sweep: int,
              element_bytes: int | None, params: Mapping[str, int | float] | None = None) -> TrafficEstimate:
    if not grid or not block or any(int(d) < 1 for d in (*grid, *block)):
        raise ValueError(f"grid {tuple(grid)} and block {tuple(block)} must be positive")
    if elements_per_cta_sweep < 0:
        raise ValueError(f"elements_per_cta_sweep must be >= 0, got {elements_per_cta_sweep}")
    ctas = math.prod(int(d) for d in grid)
    threads = math.prod(int(d) for d in block)
    elt = element_bytes or _default_element_bytes(prep.sites)

    if params is not None and prep.fn is not None:
        uv = UniformValues(prep.fn, params, prep.defs)
        trips_counted = _loop_trips(prep, uv)
        decided = _decided(prep, uv)
    else:
        trips_counted, decided = {}, {}

    # Rule 7b: the body of a counted loop unrolled into k copies runs T / k times (T its source trips).
    runs = {h: n / prep.counted[h].copies for h, n in trips_counted.items()}
    # Per block: innermost loop (any kind), innermost sweep loop (not counted), counted multiplicities.
    chain_info: dict[int, tuple[int | None, Loop | None, float, float, float]] = {}

    def info(b: int) -> tuple[int | None, Loop | None, float, float, float]:
        """(body key = innermost loop header, innermost sweep loop, runs of the block from all enclosing counted
        loops, the same from counted loops nested inside the sweep loop, and the source iterations T of the
        enclosing counted loops: the sweeps the code makes, k copies of a body each sweeping once per run)."""
        if b not in chain_info:
            chain = _loop_chain(prep, b)
            sweep = next((lp for lp in chain if lp.header not in trips_counted), None)
            mult = math.prod(runs[lp.header] for lp in chain if lp.header in runs)
            inner_mult = math.prod(runs[lp.header] for lp in chain
                                   if lp.header in runs and sweep is not None and lp.depth > sweep.depth)
            iters = math.prod(trips_counted[lp.header] for lp in chain if lp.header in trips_counted)
            chain_info[b] = (chain[0].header if chain else None, sweep, float(mult), float(inner_mult), float(iters))
        return chain_info[b]

    # Elements a thread advances per iteration of each sweep loop: the smallest group total (rule 3).
    per_loop_group: dict[int, dict[str, float]] = {}
    for s, grp in prep.sites:
        _, sweep, _, inner_mult, _ = info(s.block)
        if sweep is not None and s.width_bytes > 0:
            d = per_loop_group.setdefault(sweep.header, {})
            d[grp] = d.get(grp, 0.0) + s.width_bytes * inner_mult / elt
    trips = {h: (elements_per_cta_sweep / (threads * min(d.values())) if min(d.values()) > 0 else 0.0)
             for h, d in per_loop_group.items()}
    for h in prep.remainder_loops:
        if h not in trips_counted:
            trips[h] = 0.0

    counted: list[SiteTraffic] = []
    # node -> {(group, direction, body): bytes per CTA}; body = innermost loop header, None for straight-line
    weights: dict[int, dict[tuple[str, str, int | None], float]] = {}
    body_cap_mult: dict[int | None, float] = {}
    body_iters: dict[int | None, float] = {}
    distinct_loads: dict[int | None, set[tuple[str, int]]] = {}
    sweep_body: dict[int | None, bool] = {}
    loads_in_body: dict[int | None, int] = {}
    load_width_in_body: dict[int | None, int] = {}
    acc_in_body: dict[int | None, int] = {}
    acc_width_in_body: dict[int | None, int] = {}
    for s, grp in prep.sites:
        header, sweep, mult, _, iters = info(s.block)
        bulk = s.kind in ("async_copy", "reduction") and "bulk" in s.instruction.modifiers
        if sweep is not None:
            execs = trips.get(sweep.header, 0.0) * mult
            body_cap_mult[header] = math.inf
        else:
            execs = (1.0 / threads if bulk else 1.0) * mult
            body_cap_mult[header] = iters
        body_iters[header] = (trips.get(sweep.header, 0.0) * mult) if sweep is not None else mult
        bytes_cta = execs * threads * s.width_bytes
        counted.append(SiteTraffic(s.index, s.kind, s.width_bytes, grp, header, execs, bytes_cta))
        if not (sweep is not None and sweep.header in prep.remainder_loops and header == sweep.header):
            acc_in_body[header] = acc_in_body.get(header, 0) + 1
            acc_width_in_body[header] = acc_width_in_body.get(header, 0) + s.width_bytes
            if _direction(s.kind) == "load":
                loads_in_body[header] = loads_in_body.get(header, 0) + 1
                load_width_in_body[header] = load_width_in_body.get(header, 0) + s.width_bytes
                if grp not in prep.shared_groups:
                    distinct_loads.setdefault(header, set()).add((grp, s.width_bytes))
        sweep_body[header] = sweep is not None and sweep.header == header
        node = prep.block_to_node[s.block]
        key = (grp, _direction(s.kind), header)
        w = weights.setdefault(node, {})
        w[key] = w.get(key, 0.0) + bytes_cta
    for name, b in prep.sync_sites:  # rule 9: counters ride along the byte totals, never charged as bytes
        header, sweep, mult, _, iters = info(b)
        execs = trips.get(sweep.header, 0.0) * mult if sweep is not None else mult
        node = prep.block_to_node[b]
        key = (SYNC_GROUP, name, header)
        w = weights.setdefault(node, {})
        w[key] = w.get(key, 0.0) + execs
        body_cap_mult.setdefault(header, math.inf if sweep is not None else iters)

    # Group element sizes: the narrowest scalar access of the group (x: u16 -> 2, w: f32 -> 4), else elt.
    sweep_of = {g: float(elements_per_cta_sweep * prep.group_elt.get(g, elt)) for _, g in prep.sites}
    def allowed(refs: list[_EdgeRef]) -> list[tuple[str, bool] | None]:
        out: list[tuple[str, bool] | None] = []
        for dec, u, taken in refs:
            if taken is not None and u in decided and decided[u] != taken:
                continue  # rule 6: the parameters send this branch the other way
            if dec not in out:
                out.append(dec)
        return out

    # Components a launch with these parameters can reach (rule 6): code on a path the parameters rule out (the
    # scalar fallback of a vector kernel) sets no coverage requirement.
    reachable: set[int] = set()
    for node in prep.topo_order:
        preds = prep.preds[node]
        if not preds or any(p in reachable and allowed(prep.edge_decisions.get((p, node), [])) for p in preds):
            reachable.add(node)
    # Coverage (rule 4): each (group, direction) sweeps its data once per execution of the code that moves it
    # least often: once per CTA, or once per iteration of a counted row loop that holds every such access.
    required: dict[tuple[str, str], float] = {}
    for s, g in prep.sites:
        if g != UNKNOWN_GROUP and s.width_bytes > 0 and prep.block_to_node[s.block] in reachable:
            pair = (g, _direction(s.kind))
            required[pair] = min(required.get(pair, math.inf), info(s.block)[4])
    required = {pair: m * sweep_of[pair[0]] for pair, m in required.items()}

    # Enumerate the distinct (byte totals, branch decisions) of the paths through the DAG of strongly connected
    # components. Identical increments collapse, so guarded unrolled chunks give a handful of totals, not 2^n.
    keys = sorted({k for w in weights.values() for k in w}, key=lambda k: (k[0], k[1], -1 if k[2] is None else k[2]))
    index = {k: i for i, k in enumerate(keys)}
    is_bytes = [k[0] != SYNC_GROUP for k in keys]
    zero = (0.0,) * len(keys)
    add_vec: dict[int, tuple[float, ...]] = {}
    for node, w in weights.items():
        vec = list(zero)
        for k, v in w.items():
            vec[index[k]] += v
        add_vec[node] = tuple(vec)

    # Straight-line bytes (also inside counted loops) are capped at one sweep per execution of their code.
    cap = [sweep_of[k[0]] * body_cap_mult.get(k[2], 1.0) if k[0] != SYNC_GROUP else math.inf for k in keys]

    def byte_sum(t: tuple[float, ...]) -> float:
        return sum(v for v, b in zip(t, is_bytes) if b)

    pair_of = [(k[0], k[1]) for k in keys]

    def pair_totals(t: tuple[float, ...]) -> dict[tuple[str, str], float]:
        tot: dict[tuple[str, str], float] = {}
        for pair, v in zip(pair_of, t):
            tot[pair] = tot.get(pair, 0.0) + v
        return tot

    def progress(t: tuple[float, ...]) -> float:
        """How much of the coverage requirement a partial path has met (pruning keeps the most advanced)."""
        tot = pair_totals(t)
        return sum(min(1.0, tot.get(k, 0.0) / r) for k, r in required.items() if r > 0)

    states: dict[int, set[tuple[tuple[float, ...], frozenset[tuple[str, bool]]]]] = {}
    for node in prep.topo_order:
        preds = prep.preds[node]
        incoming: set[tuple[tuple[float, ...], frozenset[tuple[str, bool]]]] = set()
        if not preds:
            incoming.add((zero, frozenset()))
        for pnode in preds:
            decisions = allowed(prep.edge_decisions.get((pnode, node), []))
            for totals, assigned in states[pnode]:
                for dec in decisions:
                    if dec is None:
                        incoming.add((totals, assigned))
                    elif (dec[0], not dec[1]) not in assigned:  # one condition decided both ways: infeasible
                        incoming.add((totals, assigned | {dec}))
        live = prep.live_conditions.get(node, frozenset())
        # Forget decisions no later branch tests: paths that differ only in them merge.
        incoming = {(t, a if a <= live else frozenset(d for d in a if d[0] in live)) for t, a in incoming}
        add = add_vec.get(node)
        # Straight-line entries are clamped at one sweep as they accumulate: past it they change neither the
        # charged bytes nor coverage, and clamping merges paths that differ only in surplus chunks.
        out = ({(tuple(min(x + y, c) for x, y, c in zip(t, add, cap)), a) for t, a in incoming}
               if add else incoming)
        if len(out) > _MAX_PATH_STATES:
            out = set(sorted(out, key=lambda st: (-progress(st[0]), byte_sum(st[0]), st[0],
                                                  sorted(st[1])))[:_MAX_PATH_STATES])
        states[node] = out
    complete = sorted({st[0] for n in prep.sinks for st in states.get(n, ())}, key=lambda t: (byte_sum(t), t))

    def covers(t: tuple[float, ...]) -> bool:
        tot = pair_totals(t)
        return all(tot.get(k, 0.0) >= r * (1 - 1e-9) for k, r in required.items())

    def charged(t: tuple[float, ...]) -> tuple[float, ...]:
        # Straight-line bytes per key are capped at one sweep: guarded chunks past the row's end do not run.
        return tuple(min(v, c) for v, c in zip(t, cap))

    # The cheapest path that sweeps every buffer once (rule 4); the costliest path when none does.
    covering = sorted((t for t in complete if covers(t)), key=lambda t: (byte_sum(charged(t)), t))
    chosen = covering[0] if covering else (complete[-1] if complete else zero)
    final = dict(zip(keys, charged(chosen)))
    sync = {"cta_barriers": 0.0, "cluster_barriers": 0.0, "dsmem_loads": 0.0}
    group_bytes: dict[tuple[str, str], float] = {}
    sweeps: dict[str, float] = {}
    body_bytes: dict[int | None, float] = {}
    body_part_loads: dict[int | None, float] = {}
    for (grp, d, body), v in final.items():
        if grp == SYNC_GROUP:
            sync[d] += v
            continue
        if d == "load" and grp not in prep.shared_groups:
            body_part_loads[body] = body_part_loads.get(body, 0.0) + v
        group_bytes[(grp, d)] = group_bytes.get((grp, d), 0.0) + v
        if sweep_of.get(grp, 0.0) > 0:
            sweeps[grp] = sweeps.get(grp, 0.0) + v / sweep_of[grp]
        body_bytes[body] = body_bytes.get(body, 0.0) + v
    load_cta = sum(v for (_, d), v in group_bytes.items() if d == "load")
    store_cta = sum(v for (_, d), v in group_bytes.items() if d == "store")
    bodies = tuple(BodyTraffic(b, v, load_width_in_body.get(b, 0), loads_in_body.get(b, 0),
                               acc_width_in_body.get(b, 0), acc_in_body.get(b, 0),
                               max(1.0, body_iters.get(b, 1.0)), body_part_loads.get(b, 0.0),
                               sum(w for _, w in distinct_loads.get(b, ())), sweep_body.get(b, False))
                   for b, v in sorted(body_bytes.items(), key=lambda kv: (kv[0] is not None, kv[0] or 0)) if v > 0)
    per_cta = load_cta + store_cta
    return TrafficEstimate(
        bytes=per_cta * ctas,
        load_bytes=load_cta * ctas,
        store_bytes=store_cta * ctas,
        bytes_per_cta=per_cta,
        ctas=ctas,
        threads_per_cta=threads,
        element_bytes=elt,
        sweeps=sweeps,
        sites=tuple(counted),
        bodies=bodies,
        max_width_bytes=max((s.width_bytes for s, _ in prep.sites), default=0),
        loads_per_iteration=max(loads_in_body.values(), default=0),
        group_bytes=group_bytes,
        shared_groups=prep.shared_groups,
        cta_barriers=sync["cta_barriers"],
        cluster_barriers=sync["cluster_barriers"],
        dsmem_loads=sync["dsmem_loads"],
        loop_trips=dict(trips_counted),
        decided_branches=len(decided),
    )
