"""Re-instantiate the workload's parametric seed with knobs near the parent's (a KNOBS edit).

A parent that is a template instance (its launch config carries every knob of ``workload.knob_space``) moves
``changes`` knobs one step along their value ladders (``workload.knob_space[name]``, in the order given);
any other parent (the naive seed, or an edited descendant) gets knobs sampled uniformly from the knob space,
so the search can jump onto the template family. The child is built by
``population.edits.apply_script(..., instantiate=workload.instantiate)``.

Candidate knob sets are checked with ``workload.check_knobs`` when the workload provides it (cheap, raises
ValueError), else by calling ``workload.instantiate`` (which raises ValueError for an invalid combination), so a
proposal never names knobs the template rejects.

The parent's own PTX edits. A template parent may carry edits made after it was instantiated (``.maxnreg`` or
``.minnctapersm`` from the launch operator, a dynamic shared-memory size, launch knobs outside the template).
Re-instantiating from knobs alone would drop them while the lineage still credits the steps that made them, so
the KNOBS edit is followed by the parent's directive and launch differences from its own template instance
(``carried_edits``): DIRECTIVE and LAUNCH edits apply on top of the new instance. Edits to the instruction
body cannot be carried (their lines refer to the old instance's code); ``archive.lineage.template_step`` says
which were dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from evolve.operators.base import NoProposal, OperatorContext
from population.edits import EditScript, SetDirective, SetKnobs, SetLaunch
from population.kernel import Kernel


def knob_space_of(workload: object) -> dict[str, tuple[int, ...]]:
    """``workload.knob_space`` as a dict of value tuples; NoProposal when the workload has none."""
    space = dict(getattr(workload, "knob_space", None) or {})
    if not space:
        raise NoProposal(f"workload {getattr(workload, 'name', workload)!r} has no template knobs")
    return {k: tuple(int(v) for v in vals) for k, vals in space.items()}


def late_knobs_of(workload: object) -> dict[str, int]:
    """``workload.late_knobs`` (knob -> the value a launch config without it means; ``workloads.base.Workload``)
    as a dict; empty when the workload declares none."""
    return {k: int(v) for k, v in (getattr(workload, "late_knobs", None) or {}).items()}


def is_template_instance(parent: Kernel, space: Mapping[str, tuple[int, ...]],
                         late: Mapping[str, int] | None = None) -> bool:
    """Whether the parent's launch knobs name a point of the knob space: every knob present with a value in
    range, except a knob of ``late`` (``late_knobs_of``), which may be absent (it then has its late default)."""
    cur, late = dict(parent.launch.knobs), late or {}
    return all(cur[k] in vals if k in cur else k in late for k, vals in space.items())


def current_knobs(parent: Kernel, space: Mapping[str, tuple[int, ...]],
                  late: Mapping[str, int] | None = None) -> dict[str, int]:
    """The parent's value of every knob of ``space`` it carries, a ``late`` knob it leaves out at its default."""
    cur, late = dict(parent.launch.knobs), late or {}
    return {k: cur[k] if k in cur else late[k] for k in space if k in cur or k in late}


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


def directive_map(kernel: Kernel) -> dict[str, tuple[int, ...]]:
    """The performance directives of the kernel's entry: name (no dot) -> values."""
    fn = kernel.module.function(kernel.entry)
    return {d.name: tuple(int(v) for v in d.values) for d in fn.directives}


def carried_edits(parent: Kernel, base: Kernel, space: Mapping[str, tuple[int, ...]]
                  ) -> list[SetDirective | SetLaunch]:
    """The edits that turn ``base`` (the parent's template instance, ``workload.instantiate(parent knobs)``)
    into the parent outside its instruction body: DIRECTIVE set/remove per differing directive of the entry,
    and one LAUNCH for a differing dynamic shared-memory size or launch knobs outside ``space``. Applied after
    a KNOBS edit they keep those edits on the new instance (the block size follows the new knobs)."""
    out: list[SetDirective | SetLaunch] = []
    have, want = directive_map(base), directive_map(parent)
    for name in sorted(set(have) | set(want)):
        if have.get(name) != want.get(name):
            out.append(SetDirective(parent.entry, name, want.get(name)))
    extra = tuple((k, int(v)) for k, v in parent.launch.knobs if k not in space and dict(base.launch.knobs).get(k) != v)
    smem = parent.launch.dynamic_smem_bytes
    if extra or smem != base.launch.dynamic_smem_bytes:
        out.append(SetLaunch(dynamic_smem_bytes=smem if smem != base.launch.dynamic_smem_bytes else None,
                             knobs=extra))
    return out


@dataclass
class TemplateOperator:
    """Propose a KNOBS edit (module docstring).

    workload: the Workload whose template is re-instantiated (``ctx.workload`` wins when set).
    changes: knobs moved per proposal from a template parent. tries: candidates examined before NoProposal.
    validate: check candidates against the workload before proposing them. weight: sampling weight.
    keep_edits: carry the parent's directive and launch edits onto the new instance (``carried_edits``).
    """

    workload: object = None
    name: str = "template"
    weight: float = 1.0
    changes: int = 1
    tries: int = 16
    validate: bool = True
    keep_edits: bool = True

    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> EditScript:
        """A KNOBS edit naming every template knob, followed by the parent's carried edits (module docstring).
        NoProposal when the workload has no knobs or no valid neighbour was found in ``tries`` draws."""
        workload = ctx.workload if ctx.workload is not None else self.workload
        space = knob_space_of(workload)
        late = late_knobs_of(workload)
        cur = current_knobs(parent, space, late)
        template = is_template_instance(parent, space, late)
        seen: set[tuple[tuple[str, int], ...]] = set()
        for _ in range(self.tries):
            knobs = step_knobs(cur, space, rng, self.changes) if template else sample_knobs(space, rng)
            key = tuple(sorted(knobs.items()))
            if (template and knobs == cur) or key in seen:
                continue
            seen.add(key)
            if self.validate and not knobs_valid(workload, knobs):
                continue
            return EditScript((SetKnobs(key), *self._carry(parent, workload, space, template)))
        raise NoProposal(f"no valid template knobs near {cur or 'the parent'} in {self.tries} draws")

    def _carry(self, parent: Kernel, workload: object, space: Mapping[str, tuple[int, ...]],
               template: bool) -> list[SetDirective | SetLaunch]:
        if not (self.keep_edits and template):
            return []
        key = tuple(sorted(current_knobs(parent, space, late_knobs_of(workload)).items()))
        cache = self.__dict__.setdefault("_bases", {})
        base = cache.get(key)
        if base is None:
            try:
                base = workload.instantiate(dict(key))  # type: ignore[attr-defined]
            except ValueError:
                return []
            if len(cache) >= 64:
                cache.pop(next(iter(cache)))
            cache[key] = base
        return carried_edits(parent, base, space)
