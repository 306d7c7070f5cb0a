"""Template jumps: re-instantiate the workload's template at a distant knob set in one step (a KNOBS edit).

The ``template`` operator moves one knob one rung; a good set for long rows (a thread-block cluster per row,
every chunk in registers) and one for short rows (16 rows per CTA) differ in four or five knobs at once, which
single steps rarely cross because the sets in between are slow. A jump goes to:

- with probability ``recommended_rate``: one of the workload's recommended sets (``workload.recommended_knobs``,
  e.g. RMSNorm's ``TUNED_KNOBS``): the one for the row length of the task the child is evaluated on
  (``ctx.task``) when the run is multi-task, else any of them;
- with probability ``crossover_rate``: the knobs of an inspiration elite (``ctx.inspirations``) that is a template
  instance, with ``mix`` of the parent's knobs kept (a uniform crossover in knob space);
- otherwise: a knob set drawn uniformly from the whole space and validated (``workload.check_knobs``).

A set equal to the parent's is never proposed. The child is built by ``population.edits.apply_script(...,
instantiate=workload.instantiate)`` as for the template operator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.template import (
    current_knobs,
    is_template_instance,
    knob_space_of,
    knobs_valid,
    late_knobs_of,
    sample_knobs,
)
from population.edits import EditScript, SetKnobs
from population.kernel import Kernel


def recommended_sets(workload: object, task: object = None) -> list[dict[str, int]]:
    """The workload's recommended knob sets for ``task`` (an ``evolve.tasks.Task``: one per row length of its
    shapes) or all of them (no task); [] when the workload recommends none."""
    rec = getattr(workload, "recommended_knobs", None)
    if rec is None:
        return []
    if task is None or not getattr(task, "shapes", None):
        return [dict(k) for k in rec()]
    out: list[dict[str, int]] = []
    for s in task.shapes:
        for k in rec(int(s[-1])):
            if k not in out:
                out.append(dict(k))
    return out


@dataclass
class TemplateJumpOperator:
    """Propose a KNOBS edit far from the parent (module docstring).

    workload: the Workload with a template (``ctx.workload`` wins when set); recommended_rate / crossover_rate:
    probabilities of the recommended-set and inspiration jumps (the rest: uniform); mix: per-knob probability of
    keeping the parent's value in the inspiration jump; tries: draws before NoProposal; weight: sampling weight.
    """

    workload: object = None
    name: str = "jump"
    weight: float = 1.0
    recommended_rate: float = 0.4
    crossover_rate: float = 0.3
    mix: float = 0.3
    tries: int = 32

    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> EditScript:
        """A one-edit KNOBS script naming every knob. NoProposal when the workload has no knobs or no valid set
        other than the parent's was found in ``tries`` draws."""
        workload = ctx.workload if ctx.workload is not None else self.workload
        space = knob_space_of(workload)
        late = late_knobs_of(workload)
        cur = current_knobs(parent, space, late)
        recommended = [k for k in recommended_sets(workload, ctx.task) if k != cur]
        donors = [current_knobs(k, space, late) for k, _ in ctx.inspirations if is_template_instance(k, space, late)]
        for _ in range(self.tries):
            u = rng.random()
            if recommended and u < self.recommended_rate:
                knobs = recommended[int(rng.integers(len(recommended)))]
            elif donors and u < self.recommended_rate + self.crossover_rate:
                knobs = self._cross(cur, donors[int(rng.integers(len(donors)))], space, rng)
            else:
                knobs = sample_knobs(space, rng)
            knobs = {k: int(knobs[k]) for k in sorted(space) if k in knobs}
            if knobs == cur or not knobs_valid(workload, knobs):
                continue
            return EditScript((SetKnobs(tuple(sorted(knobs.items()))),))
        raise NoProposal(f"no valid knob set away from {cur or 'the parent'} in {self.tries} draws")

    def _cross(self, cur: Mapping[str, int], donor: Mapping[str, int], space: Mapping[str, tuple[int, ...]],
               rng: np.random.Generator) -> dict[str, int]:
        out = {}
        for k in space:
            keep = k in cur and rng.random() < self.mix
            out[k] = int(cur[k] if keep else donor.get(k, cur.get(k, space[k][0])))
        return out
