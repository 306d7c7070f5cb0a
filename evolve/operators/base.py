"""The operator contract: every mutation operator turns a parent kernel into an edit script.

Operators never evaluate anything and never touch the archive directly; the engine applies the script
(``population.edits.apply_script``), compiles, evaluates and records. An operator that has nothing to propose
for a parent raises ``NoProposal`` with the reason, which the engine records (never silently dropped).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from population.kernel import Kernel


class NoProposal(Exception):
    """The operator cannot produce an edit for this parent (e.g. no load without a cache hint left)."""


@dataclass
class OperatorContext:
    """What an operator may read when proposing.

    workload: the ``workloads`` Workload being optimised (seeds, knob space, shapes).
    parent_result: the parent's EvalResult (measurements), or None for an unevaluated seed.
    inspirations: other elites (Kernel, EvalResult) pairs, e.g. from other archive cells.
    lessons: short text lines from the lessons memory, most useful first.
    failure: for a repair role, the child that failed and its status/reason.
    task: in a multi-task run, the ``evolve.tasks.Task`` (row-length range and shapes) the child will be
    evaluated on, so an operator may specialise for it; None otherwise.
    """

    workload: Any
    parent_result: Any = None
    inspirations: list[tuple[Kernel, Any]] = field(default_factory=list)
    lessons: list[str] = field(default_factory=list)
    failure: tuple[Kernel, Any] | None = None
    task: Any = None


class Operator(Protocol):
    """A mutation operator. ``name`` is what the store, bandit and lessons memory key on."""

    name: str

    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> Any:
        """Return a ``population.edits.EditScript`` for ``parent``; raise NoProposal when none applies."""
        ...
