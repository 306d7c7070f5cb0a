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
5. Total = bytes per CTA on that path * CTAs.

It says nothing about caching: bytes re-read by a second pass or by every CTA (a weight vector) are
requested bytes; the static evaluator decides which of them reach DRAM.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import networkx as nx

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
from population.ast import Address, Function, Instruction, Register, Symbol

_MAX_PATH_STATES = 512  # distinct per-node byte totals kept while enumerating paths (the cheapest)
UNKNOWN_GROUP = "?"


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
    the same for loads and stores together (their ratio is the body's mean access width per thread)."""

    loop: int | None
    bytes_per_cta: float
    load_bytes_per_iteration: int
    loads_per_iteration: int
    access_bytes_per_iteration: int = 0
    accesses_per_iteration: int = 0

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
    in flight, a memory-level-parallelism proxy; straight-line code counts as one body).
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
            if ins.opcode == "ld" and "param" in ins.modifiers:
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


@dataclass(frozen=True)
class _Prepared:
    """The shape-independent part of the estimate for one function."""

    sites: list[tuple[MemorySite, str]]
    inner: dict[int, Loop]
    condensed: nx.DiGraph
    block_to_node: dict[int, int]
    remainder_loops: frozenset[int]
    group_elt: dict[str, int]
    edge_decisions: dict[tuple[int, int], list[tuple[str, bool] | None]]
    topo_order: tuple[int, ...] = ()
    preds: dict[int, tuple[int, ...]] = field(default_factory=dict)
    sinks: tuple[int, ...] = ()
    live_conditions: dict[int, frozenset[str]] = field(default_factory=dict)


def _live_conditions(condensed: nx.DiGraph, topo: tuple[int, ...],
                     decisions: dict[tuple[int, int], list[tuple[str, bool] | None]]) -> dict[int, frozenset[str]]:
    """Per component: the conditions tested on edges reachable from it (entering it included)."""
    live: dict[int, frozenset[str]] = {}
    for n in reversed(topo):
        conds = {d[0] for p in condensed.predecessors(n) for d in decisions.get((p, n), []) if d is not None}
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
        if ins.opcode == "ld" and "param" in ins.modifiers:
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
                    ) -> dict[tuple[int, int], list[tuple[str, bool] | None]]:
    """For each edge between components that is not a zero-trip bypass: the (condition, value) its branch
    implies when that condition tests two or more branches (rule 4b), else None. Component pairs joined only
    by bypass edges are absent."""
    memo: dict[str, str] = {}
    cond: dict[int, str] = {}
    guards: dict[str, int] = {}
    for b in blocks:
        t = b.terminator
        if t is not None and t.opcode == "bra" and t.predicate is not None:
            cond[b.id] = _value_key(t.predicate.register.name, du, memo)
            guards[cond[b.id]] = guards.get(cond[b.id], 0) + 1
    out: dict[tuple[int, int], list[tuple[str, bool] | None]] = {}
    for u, v in g.edges:
        cu, cv = block_to_node[u], block_to_node[v]
        if cu == cv or (u, v) in bypass:
            continue
        dec: tuple[str, bool] | None = None
        t = blocks[u].terminator
        if u in cond and guards[cond[u]] >= 2:
            taken = g.edges[u, v].get("kind") == "branch"
            dec = (cond[u], taken != t.predicate.negated)
        lst = out.setdefault((cu, cv), [])
        if dec not in lst:
            lst.append(dec)
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
    condensed = nx.condensation(g)
    loop_list = loops(fn, g)
    inner = _innermost(loop_list)
    group_elt: dict[str, int] = {}
    for st, grp in kept:
        if st.vector == 1 and st.width_bytes > 0 and st.kind in ("load", "store"):
            group_elt[grp] = min(group_elt.get(grp, st.width_bytes), st.width_bytes)
    mapping = dict(condensed.graph["mapping"])
    decisions = _edge_decisions(blocks, g, du, mapping, _zero_trip_bypasses(blocks, g, loop_list))
    topo = tuple(nx.lexicographical_topological_sort(condensed))
    return _Prepared(kept, inner, condensed, mapping, _remainder_loops(kept, inner), group_elt, decisions,
                     topo_order=topo,
                     preds={n: tuple(sorted(condensed.predecessors(n))) for n in condensed},
                     sinks=tuple(sorted(n for n in condensed if condensed.out_degree(n) == 0)),
                     live_conditions=_live_conditions(condensed, topo, decisions))


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
) -> TrafficEstimate:
    """Estimated global bytes requested by launching entry ``fn`` with ``grid`` x ``block`` (module docstring).

    grid, block: 1 to 3 positive ints (CTAs, threads per CTA); elements_per_cta_sweep: elements one CTA
    streams per pass (``Workload.elements_per_cta_sweep``); element_bytes: size of one streamed element
    (2 for bf16; default: the narrowest scalar global load of the entry, or 4).

    Raises ValueError on non-positive launch dimensions, a negative sweep or a function without a body.
    Analyses ``fn`` afresh; use ``TrafficModel`` to estimate several launches of one function.
    """
    return TrafficModel(fn).estimate(grid, block, elements_per_cta_sweep, element_bytes=element_bytes)


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
                 element_bytes: int | None = None) -> TrafficEstimate:
        """As ``estimate_traffic`` for this model's function."""
        return _estimate(self._prep, grid, block, elements_per_cta_sweep, element_bytes)


def _estimate(prep: _Prepared, grid: Sequence[int], block: Sequence[int], elements_per_cta_sweep: int,
              element_bytes: int | None) -> TrafficEstimate:
    if not grid or not block or any(int(d) < 1 for d in (*grid, *block)):
        raise ValueError(f"grid {tuple(grid)} and block {tuple(block)} must be positive")
    if elements_per_cta_sweep < 0:
        raise ValueError(f"elements_per_cta_sweep must be >= 0, got {elements_per_cta_sweep}")
    ctas = math.prod(int(d) for d in grid)
    threads = math.prod(int(d) for d in block)
    elt = element_bytes or _default_element_bytes(prep.sites)

    # Elements a thread advances per iteration of each loop: the smallest group total (rule 3).
    per_loop_group: dict[int, dict[str, float]] = {}
    for s, grp in prep.sites:
        lp = prep.inner.get(s.block)
        if lp is not None and s.width_bytes > 0:
            d = per_loop_group.setdefault(lp.header, {})
            d[grp] = d.get(grp, 0.0) + s.width_bytes / elt
    trips = {h: (elements_per_cta_sweep / (threads * min(d.values())) if min(d.values()) > 0 else 0.0)
             for h, d in per_loop_group.items()}
    for h in prep.remainder_loops:
        trips[h] = 0.0

    counted: list[SiteTraffic] = []
    # node -> {(group, direction, body): bytes per CTA}; body = loop header, None for straight-line code
    weights: dict[int, dict[tuple[str, str, int | None], float]] = {}
    loads_in_body: dict[int | None, int] = {}
    load_width_in_body: dict[int | None, int] = {}
    acc_in_body: dict[int | None, int] = {}
    acc_width_in_body: dict[int | None, int] = {}
    for s, grp in prep.sites:
        lp = prep.inner.get(s.block)
        bulk = s.kind in ("async_copy", "reduction") and "bulk" in s.instruction.modifiers
        if lp is not None:
            execs = trips.get(lp.header, 0.0)
        else:
            execs = 1.0 / threads if bulk else 1.0
        bytes_cta = execs * threads * s.width_bytes
        header = lp.header if lp is not None else None
        counted.append(SiteTraffic(s.index, s.kind, s.width_bytes, grp, header, execs, bytes_cta))
        if not (lp is not None and lp.header in prep.remainder_loops):
            acc_in_body[header] = acc_in_body.get(header, 0) + 1
            acc_width_in_body[header] = acc_width_in_body.get(header, 0) + s.width_bytes
            if _direction(s.kind) == "load":
                loads_in_body[header] = loads_in_body.get(header, 0) + 1
                load_width_in_body[header] = load_width_in_body.get(header, 0) + s.width_bytes
        node = prep.block_to_node[s.block]
        key = (grp, _direction(s.kind), header)
        w = weights.setdefault(node, {})
        w[key] = w.get(key, 0.0) + bytes_cta

    # Group element sizes: the narrowest scalar access of the group (x: u16 -> 2, w: f32 -> 4), else elt.
    sweep_of = {g: float(elements_per_cta_sweep * prep.group_elt.get(g, elt)) for _, g in prep.sites}
    required = {(g, _direction(s.kind)) for s, g in prep.sites if g != UNKNOWN_GROUP and s.width_bytes > 0}

    # Enumerate the distinct (byte totals, branch decisions) of the paths through the DAG of strongly connected
    # components. Identical increments collapse, so guarded unrolled chunks give a handful of totals, not 2^n.
    keys = sorted({k for w in weights.values() for k in w}, key=lambda k: (k[0], k[1], -1 if k[2] is None else k[2]))
    index = {k: i for i, k in enumerate(keys)}
    zero = (0.0,) * len(keys)
    add_vec: dict[int, tuple[float, ...]] = {}
    for node, w in weights.items():
        vec = list(zero)
        for k, v in w.items():
            vec[index[k]] += v
        add_vec[node] = tuple(vec)

    cap = [sweep_of[k[0]] if k[2] is None else math.inf for k in keys]
    states: dict[int, set[tuple[tuple[float, ...], frozenset[tuple[str, bool]]]]] = {}
    for node in prep.topo_order:
        preds = prep.preds[node]
        incoming: set[tuple[tuple[float, ...], frozenset[tuple[str, bool]]]] = set()
        if not preds:
            incoming.add((zero, frozenset()))
        for pnode in preds:
            decisions = prep.edge_decisions.get((pnode, node), [])
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
            out = set(sorted(out, key=lambda st: (sum(st[0]), st[0], sorted(st[1])))[:_MAX_PATH_STATES])
        states[node] = out
    complete = sorted({st[0] for n in prep.sinks for st in states.get(n, ())}, key=lambda t: (sum(t), t))

    pair_of = [(k[0], k[1]) for k in keys]

    def covers(t: tuple[float, ...]) -> bool:
        tot: dict[tuple[str, str], float] = {}
        for pair, v in zip(pair_of, t):
            tot[pair] = tot.get(pair, 0.0) + v
        return all(tot.get(k, 0.0) >= sweep_of[k[0]] * (1 - 1e-9) for k in required)

    def charged(t: tuple[float, ...]) -> tuple[float, ...]:
        # Straight-line bytes per key are capped at one sweep: guarded chunks past the row's end do not run.
        return tuple(min(v, c) for v, c in zip(t, cap))

    # The cheapest path that sweeps every buffer once (rule 4); the costliest path when none does.
    covering = sorted((t for t in complete if covers(t)), key=lambda t: (sum(charged(t)), t))
    chosen = covering[0] if covering else (complete[-1] if complete else zero)
    final = dict(zip(keys, charged(chosen)))
    load_cta = sum(v for (_, d, _), v in final.items() if d == "load")
    store_cta = sum(v for (_, d, _), v in final.items() if d == "store")
    sweeps: dict[str, float] = {}
    body_bytes: dict[int | None, float] = {}
    for (grp, _, body), v in final.items():
        if sweep_of.get(grp, 0.0) > 0:
            sweeps[grp] = sweeps.get(grp, 0.0) + v / sweep_of[grp]
        body_bytes[body] = body_bytes.get(body, 0.0) + v
    bodies = tuple(BodyTraffic(b, v, load_width_in_body.get(b, 0), loads_in_body.get(b, 0),
                               acc_width_in_body.get(b, 0), acc_in_body.get(b, 0))
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
    )
