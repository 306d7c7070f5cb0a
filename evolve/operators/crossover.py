"""Crossover for the GA: mix the launch configuration and template knobs of two parents.

The child is ``parent_a`` edited by the returned script, so its PTX body is ``parent_a``'s (or, for a KNOBS
edit, the template re-instantiated), and the genes that cross are the ones that do not depend on line numbers:

- template knobs (uniform crossover, each knob from either parent with probability 1/2) as one KNOBS edit
  when both parents are instances of the same template knob space;
- otherwise the launch block (when ``parent_a``'s entry reads ``%ntid``), workload launch knobs, and the
  performance directives ``.maxnreg``/``.maxntid``/``.reqntid``/``.minnctapersm`` of the two entries,
  each gene from either parent with probability 1/2, as LAUNCH and DIRECTIVE edits.

At least one gene is taken from ``parent_b`` (drawn among those that differ), so the child differs from
``parent_a``. Raises NoProposal when the parents agree on every gene.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.launch import reads_ntid
from population.edits import EditScript, SetDirective, SetKnobs, SetLaunch
from population.kernel import Kernel

DIRECTIVE_GENES = ("maxnreg", "maxntid", "reqntid", "minnctapersm")


def _uniform_pick(diff: list[str], rng: np.random.Generator) -> set[str]:
    """Genes taken from parent b: each with probability 1/2, at least one."""
    take = {g for g in diff if rng.random() < 0.5}
    if not take:
        take = {diff[int(rng.integers(len(diff)))]}
    return take


def crossover(parent_a: Kernel, parent_b: Kernel, rng: np.random.Generator, *,
              knob_space: dict[str, tuple[int, ...]] | None = None) -> EditScript:
    """An edit script that turns ``parent_a`` into a child carrying genes of ``parent_b`` (module docstring).

    knob_space: the workload's template knob space; when both parents carry all its knobs the knobs cross
    (a KNOBS edit, applied with ``instantiate=workload.instantiate``). Raises NoProposal when no gene differs.
    """
    ka, kb = dict(parent_a.launch.knobs), dict(parent_b.launch.knobs)
    if knob_space:
        names = sorted(knob_space)
        if all(n in ka for n in names) and all(n in kb for n in names):
            diff = [n for n in names if ka[n] != kb[n]]
            if diff:
                take = _uniform_pick(diff, rng)
                return EditScript((SetKnobs(tuple((n, kb[n] if n in take else ka[n]) for n in names)),))
    fa = parent_a.module.function(parent_a.entry)
    fb = parent_b.module.function(parent_b.entry)
    da = {d.name: tuple(d.values) for d in fa.directives}
    db = {d.name: tuple(d.values) for d in fb.directives}
    genes: dict[str, object] = {}
    if parent_a.launch.block != parent_b.launch.block and reads_ntid(parent_a):
        genes["block"] = parent_b.launch.block
    if parent_a.launch.dynamic_smem_bytes != parent_b.launch.dynamic_smem_bytes:
        genes["smem"] = parent_b.launch.dynamic_smem_bytes
    for k, v in kb.items():
        if (knob_space is None or k not in knob_space) and ka.get(k) != v:
            genes[f"knob:{k}"] = v
    for d in DIRECTIVE_GENES:
        if da.get(d) != db.get(d):
            genes[f"dir:{d}"] = db.get(d)
    if not genes:
        raise NoProposal("the parents share every launch gene and directive")
    take = _uniform_pick(sorted(genes), rng)
    block = genes["block"] if "block" in take else None
    smem = genes["smem"] if "smem" in take else None
    knobs = tuple((g.split(":", 1)[1], int(genes[g])) for g in sorted(take) if g.startswith("knob:"))
    edits: list = []
    if block is not None or smem is not None or knobs:
        edits.append(SetLaunch(block=block, dynamic_smem_bytes=smem, knobs=knobs))  # type: ignore[arg-type]
    for g in sorted(take):
        if g.startswith("dir:"):
            name = g.split(":", 1)[1]
            values = genes[g]
            edits.append(SetDirective(parent_a.entry, name, None if values is None else tuple(values)))
    # A block from b must still satisfy a's thread-count directives that are kept.
    if block is not None:
        threads = block[0] * block[1] * block[2]
        for d in ("maxntid", "reqntid"):
            kept = f"dir:{d}" not in take and d in da
            if kept and (d == "reqntid" or int(np.prod(da[d])) < threads):
                edits.append(SetDirective(parent_a.entry, d, tuple(block)))
    # .minnctapersm is ignored by ptxas without .maxntid: keep them together.
    final_dirs = {**da, **{g.split(":", 1)[1]: genes[g] for g in take if g.startswith("dir:")}}
    if final_dirs.get("minnctapersm") and not final_dirs.get("maxntid") and not final_dirs.get("reqntid"):
        edits.append(SetDirective(parent_a.entry, "maxntid", tuple(block or parent_a.launch.block)))
    return EditScript(tuple(edits))


@dataclass
class CrossoverOperator:
    """Operator wrapper: ``propose(parent, ctx, rng)`` crosses ``parent`` with the first inspiration in
    ``ctx.inspirations`` (the GA puts its second parent there). NoProposal without one."""

    workload: object = None
    name: str = "crossover"
    weight: float = 1.0

    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> EditScript:
        if not ctx.inspirations:
            raise NoProposal("crossover needs a second parent in ctx.inspirations")
        other = ctx.inspirations[0][0]
        workload = ctx.workload if ctx.workload is not None else self.workload
        space = dict(getattr(workload, "knob_space", None) or {}) or None
        return crossover(parent, other, rng, knob_space=space)
