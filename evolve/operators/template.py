"""Re-instantiate the workload's parametric seed with knobs near the parent's (a KNOBS edit).

A parent that is a template instance (its launch config carries every knob of ``workload.knob_space``) moves
``changes`` knobs one step along their value ladders (``workload.knob_space[name]``, in the order given);
any other parent (the naive seed, or an edited descendant) gets knobs sampled uniformly from the knob space,
so the search can jump onto the template family. The child is built by
``population.edits.apply_script(..., instantiate=workload.instantiate)``.

Candidate knob sets are checked with ``workload.check_knobs`` when the workload provides it (cheap, raises
ValueError), else by calling ``workload.instantiate`` (which raises ValueError for an invalid combination), so a
proposal never names knobs the template rejects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from evolve.operators.base import NoProposal, OperatorContext
from population.edits import EditScript, SetKnobs
from population.kernel import Kernel


def knob_space_of(workload: object) -> dict[str, tuple[int, ...]]:
    """``workload.knob_space`` as a dict of value tuples; NoProposal when the workload has none."""
    space = dict(getattr(workload, "knob_space", None) or {})
    if not space:
        raise NoProposal(f"workload {getattr(workload, 'name', workload)!r} has no template knobs")
    return {k: tuple(int(v) for v in vals) for k, vals in space.items()}


def is_template_instance(parent: Kernel, space: Mapping[str, tuple[int, ...]]) -> bool:
    """Whether the parent's launch knobs name a point of the knob space (every knob present, values in range)."""
    cur = dict(parent.launch.knobs)
    return all(k in cur and cur[k] in vals for k, vals in space.items())


def step_knobs(current: Mapping[str, int], space: Mapping[str, tuple[int, ...]], rng: np.random.Generator,
               changes: int = 1) -> dict[str, int]:
    """``current`` with ``changes`` distinct knobs (those with more than one value) moved one step up or down
    their ladder in ``space``."""
    names = [k for k in sorted(space) if len(space[k]) > 1]
    if not names:
        return dict(current)
    out = dict(current)
    for j in rng.permutation(len(names))[: max(1, changes)]:
        k = names[int(j)]
        vals = space[k]
        pos = vals.index(out[k]) if out.get(k) in vals else int(rng.integers(len(vals)))
        steps = [p for p in (pos - 1, pos + 1) if 0 <= p < len(vals)]
        out[k] = vals[steps[int(rng.integers(len(steps)))]]
    return out


def sample_knobs(space: Mapping[str, tuple[int, ...]], rng: np.random.Generator) -> dict[str, int]:
    """One value per knob, uniform over each ladder."""
    return {k: int(vals[int(rng.integers(len(vals)))]) for k, vals in sorted(space.items())}


def knobs_valid(workload: object, knobs: Mapping[str, int]) -> bool:
    """True when the workload accepts ``knobs``: ``check_knobs(knobs)`` (or, lacking it, ``instantiate``)
    does not raise ValueError."""
    validator = getattr(workload, "check_knobs", None) or workload.instantiate
    try:
        validator(dict(knobs))
    except ValueError:
        return False
    return True


@dataclass
class TemplateOperator:
    """Propose a KNOBS edit (module docstring).

    workload: the Workload whose template is re-instantiated (``ctx.workload`` wins when set).
    changes: knobs moved per proposal from a template parent. tries: candidates examined before NoProposal.
    validate: check candidates against the workload before proposing them. weight: sampling weight.
    """

    workload: object = None
    name: str = "template"
    weight: float = 1.0
    changes: int = 1
    tries: int = 16
    validate: bool = True

    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> EditScript:
        """A one-edit KNOBS script naming every template knob. NoProposal when the workload has no knobs
        or no valid neighbour was found in ``tries`` draws."""
        workload = ctx.workload if ctx.workload is not None else self.workload
        space = knob_space_of(workload)
        cur = {k: v for k, v in parent.launch.knobs if k in space}
        template = is_template_instance(parent, space)
        seen: set[tuple[tuple[str, int], ...]] = set()
        for _ in range(self.tries):
            knobs = step_knobs(cur, space, rng, self.changes) if template else sample_knobs(space, rng)
            key = tuple(sorted(knobs.items()))
            if (template and knobs == cur) or key in seen:
                continue
            seen.add(key)
            if self.validate and not knobs_valid(workload, knobs):
                continue
            return EditScript((SetKnobs(key),))
        raise NoProposal(f"no valid template knobs near {cur or 'the parent'} in {self.tries} draws")
