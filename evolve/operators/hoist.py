"""Hoist loads ahead of the arithmetic that consumes them, inside one straight-line block.

In a bandwidth-bound loop body each thread should have all its loads in flight before the first use (Little's
law: bytes in flight = bandwidth x latency; V. Volkov, "Understanding Latency Hiding on GPUs", 2016): a body
that alternates ``ld``, ``fma``, ``ld``, ``fma`` (the sum of squares of a row) waits one memory latency per pair
when the compiler keeps the order. This rewrite list-schedules the block with the ``loads_first`` priority
(``evolve.operators.schedule``: loads as early as register and memory dependences allow, nothing crossing a
store that may alias, a barrier, a fence or an atomic), so every load of the block issues before the reduction
that consumes it.

Registered as ``REWRITE hoist_loads <line>`` (``population.edits.register_rewrite``), ``line`` being any line of
the block; ``HoistLoadsOperator`` proposes it for a block drawn at random among those where a load can move.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.common import Site, entry_sites, memory_effect, replace_stmts
from evolve.operators.schedule import blocks, dependence_graph, list_schedule
from population.edits import EditScript, Replace, Rewrite, register_rewrite
from population.kernel import Kernel


def _hoisted(block: list[Site]) -> list[int] | None:
    """The loads_first order of ``block``, None when it is the current order or the block has no global load."""
    instrs = [s.node for s in block]
    if not any(memory_effect(i).kind == "read" for i in instrs):
        return None
    order = list_schedule(instrs, dependence_graph(instrs), "loads_first", np.random.default_rng(0))
    return None if order == list(range(len(instrs))) else order


def hoist_edit(kernel: Kernel, line: int) -> Replace:
    """The REPLACE of the block holding canonical ``line`` with its loads hoisted. ValueError naming the line
    when no block holds it or no load of it can move earlier."""
    for block in blocks(entry_sites(kernel)):
        if block[0].line <= line <= block[-1].line:
            order = _hoisted(block)
            if order is None:
                raise ValueError(f"no load of the block at lines {block[0].line}-{block[-1].line} can move earlier")
            return replace_stmts(block[0].line, block[-1].line, [block[k].node for k in order])
    raise ValueError(f"line {line} is not inside a straight-line block of instructions of {kernel.entry!r}")


def _expand(kernel: Kernel, line: int, args: dict[str, int]) -> list[Replace]:
    if args:
        raise ValueError(f"unknown parameter(s) {sorted(args)}; hoist_loads takes none")
    return [hoist_edit(kernel, line)]


register_rewrite("hoist_loads", _expand)


@dataclass
class HoistLoadsOperator:
    """Propose ``REWRITE hoist_loads <line>`` for a block where a load can move earlier (module docstring).

    min_block: smallest block (instructions) considered; weight: sampling weight."""

    name: str = "hoist"
    weight: float = 1.0
    min_block: int = 3

    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> EditScript:
        """One REWRITE edit. NoProposal when no block of the entry has a load that can move earlier."""
        cands = [b for b in blocks(entry_sites(parent)) if len(b) >= self.min_block]
        for i in rng.permutation(len(cands)):  # the first block (in random order) where a load can move
            if _hoisted(cands[int(i)]) is not None:
                return EditScript((Rewrite("hoist_loads", cands[int(i)][0].line),))
        raise NoProposal(f"entry {parent.entry!r}: no block has a load that can move earlier")
