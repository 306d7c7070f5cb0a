"""List-scheduling variants inside one basic block.

A *block* here is a maximal run of instructions printed on consecutive canonical lines of one body list (a
function body or one ``{ }`` scope), cut at labels, scopes, declarations and after a branch/ret/exit/call; such a
run is straight-line code, so any topological order of its dependence DAG computes the same values.

Dependences (edge i -> j for i before j):

- registers: read-after-write, write-after-read, write-after-write, from ``population.analysis`` sources and
  destinations; a guard predicate counts as a read (its definition stays before its uses);
- memory (``common.memory_effect``): a store orders with every load and store of a state space that may alias it
  (generic aliases global, shared and local); loads may pass loads;
- barriers: ``bar``/``barrier``, ``fence``/``membar``, atomics and reductions, ``cp.async``, ``mbarrier``,
  ``call``, ordered loads/stores (``.volatile .relaxed .acquire .release``), ``%clock`` reads and any opcode this
  module does not know order with every instruction, so nothing moves across them;
- the block's terminator stays last.

Priorities (list scheduling, Gibbons & Muchnick, "Efficient instruction scheduling for a pipelined
architecture", SIGPLAN 1986): ``loads_first`` (issue loads as early as dependences allow, to overlap their
latency), ``stores_last``, ``critical_path`` (longest latency-weighted path to the block's end first; latencies
``LATENCY`` are rough sm_90 figures in cycles) and ``random`` (any ready instruction).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.common import (
    Site,
    entry_sites,
    is_terminator,
    memory_effect,
    reads,
    replace_stmts,
    writes,
)
from population.ast import Instruction
from population.edits import EditScript
from population.kernel import Kernel
from population.printer import print_statement

POLICIES = ("loads_first", "stores_last", "critical_path", "random")

# Rough issue-to-use latencies on sm_90 in cycles, for the critical-path priority only (global from the
# L2-hit end; shared memory about 30; ALU about 4; MUFU transcendental about 16).
LATENCY = {"global": 400, "generic": 400, "local": 400, "shared": 30, "param": 30, "const": 30}
MUFU = frozenset({"rsqrt", "rcp", "sqrt", "ex2", "lg2", "sin", "cos", "tanh", "div"})


def blocks(sites: list[Site]) -> list[list[Site]]:
    """Straight-line runs of instruction sites (module docstring), in listing order."""
    out: list[list[Site]] = []
    cur: list[Site] = []
    for s in sites:
        ok = isinstance(s.node, Instruction)
        if ok and cur:
            prev = cur[-1]
            ok_cont = s.body is prev.body and s.line == prev.line + 1 and not is_terminator(prev.node)
            if not ok_cont:
                out.append(cur)
                cur = []
        if ok:
            cur.append(s)
        elif cur:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def dependence_graph(instrs: list[Instruction]) -> nx.DiGraph:
    """The dependence DAG over indices 0..n-1 of ``instrs`` (module docstring for the rules)."""
    g = nx.DiGraph()
    g.add_nodes_from(range(len(instrs)))
    eff = [memory_effect(i) for i in instrs]
    rd = [reads(i) for i in instrs]
    wr = [writes(i) for i in instrs]
    last = len(instrs) - 1
    for j in range(len(instrs)):
        for i in range(j):
            if (wr[i] & (rd[j] | wr[j])) or (rd[i] & wr[j]):
                g.add_edge(i, j)
            elif "barrier" in (eff[i].kind, eff[j].kind) or eff[i].conflicts(eff[j]):
                g.add_edge(i, j)
            elif j == last and is_terminator(instrs[j]):
                g.add_edge(i, j)
    return g


def _latency(ins: Instruction) -> int:
    e = memory_effect(ins)
    if e.kind == "read":
        return LATENCY.get(e.space, 400)
    if ins.opcode in MUFU:
        return 16
    return 4


def list_schedule(instrs: list[Instruction], g: nx.DiGraph, policy: str, rng: np.random.Generator) -> list[int]:
    """A topological order of ``g`` chosen by ``policy`` (one of POLICIES); ties keep the original order."""
    if policy not in POLICIES:
        raise ValueError(f"unknown schedule policy {policy!r}; allowed: {list(POLICIES)}")
    n = len(instrs)
    height = [0] * n
    if policy == "critical_path":
        for v in reversed(list(nx.topological_sort(g))):
            height[v] = _latency(instrs[v]) + max((height[s] for s in g.successors(v)), default=0)
    noise = rng.random(n)

    def key(v: int) -> tuple:
        kind = memory_effect(instrs[v]).kind
        if policy == "loads_first":
            return (0 if kind == "read" else 1, v)
        if policy == "stores_last":
            return (1 if kind == "write" else 0, v)
        if policy == "critical_path":
            return (-height[v], v)
        return (noise[v],)

    indeg = {v: g.in_degree(v) for v in g}
    ready = [v for v in g if indeg[v] == 0]
    order: list[int] = []
    while ready:
        ready.sort(key=key)
        v = ready.pop(0)
        order.append(v)
        for s in g.successors(v):
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return order


@dataclass
class ScheduleOperator:
    """Reorder the instructions of one basic block (module docstring).

    policies: the priorities drawn from; min_block: smallest block (instructions) worth reordering;
    weight: sampling weight.
    """

    name: str = "schedule"
    weight: float = 1.0
    policies: tuple[str, ...] = POLICIES
    min_block: int = 3

    def __post_init__(self) -> None:
        bad = [p for p in self.policies if p not in POLICIES]
        if bad or not self.policies:
            raise ValueError(f"schedule operator: policies {bad or list(self.policies)} invalid; "
                             f"allowed: {list(POLICIES)}")
        self.policies = tuple(self.policies)

    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> EditScript:
        """One REPLACE of a block's lines with the block in a new valid order. NoProposal when every block
        admits only its current order under every policy."""
        runs = [b for b in blocks(entry_sites(parent)) if len(b) >= self.min_block]
        if not runs:
            raise NoProposal(f"entry {parent.entry!r} has no straight-line block of >= {self.min_block} "
                             "instructions")
        policies = list(self.policies)
        for bi in rng.permutation(len(runs)):
            run = runs[int(bi)]
            instrs = [s.node for s in run]
            g = dependence_graph(instrs)
            texts = [print_statement(i) for i in instrs]
            for pi in rng.permutation(len(policies)):
                order = list_schedule(instrs, g, policies[int(pi)], rng)
                if [texts[k] for k in order] != texts:  # swapping identical lines changes nothing
                    return EditScript((replace_stmts(run[0].line, run[-1].line, [instrs[k] for k in order]),))
        raise NoProposal("no block has another valid order under the configured policies")
