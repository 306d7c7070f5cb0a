"""Crossover for the GA: mix the template knobs, launch configuration, directives and body hunks of two parents.

The child is ``parent_a`` edited by the returned script (for a KNOBS edit, the template re-instantiated); the
genes that cross are:

- template knobs (uniform crossover, each knob from either parent with probability 1/2) as one KNOBS edit
  when both parents are instances of the same template knob space;
- otherwise the launch block (when ``parent_a``'s entry reads ``%ntid``), workload launch knobs, the
  performance directives ``.maxnreg``/``.maxntid``/``.reqntid``/``.minnctapersm`` of the two entries, and the
  self-contained hunks in which the two entries' bodies differ (``line_hunks``: e.g. a load whose hints one
  lineage changed, a loop the other unrolled), each gene from either parent with probability 1/2, as LAUNCH,
  DIRECTIVE and REPLACE/INSERT/DELETE edits.

At least one gene is taken from ``parent_b`` (drawn among those that differ), so the child differs from
``parent_a``. Raises NoProposal when the parents agree on every gene.
"""

from __future__ import annotations

import difflib
from collections import Counter
from dataclasses import dataclass

import numpy as np

from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.common import (
    cached_listing,
    entry_function,
    labels_of,
    reads,
    used_names,
    writes,
)
from evolve.operators.launch import reads_ntid
from population.analysis import branch_target, flat_instructions
from population.ast import Instruction, Label, RegDecl, Scope
from population.edits import Delete, EditScript, Insert, Replace, SetDirective, SetKnobs, SetLaunch
from population.kernel import Kernel
from population.printer import LineInfo

DIRECTIVE_GENES = ("maxnreg", "maxntid", "reqntid", "minnctapersm")


def _uniform_pick(diff: list[str], rng: np.random.Generator) -> set[str]:
    """Genes taken from parent b: each with probability 1/2, at least one."""
    take = {g for g in diff if rng.random() < 0.5}
    if not take:
        take = {diff[int(rng.integers(len(diff)))]}
    return take


def _transferable(li: LineInfo) -> bool:
    return isinstance(li.node, Instruction | Label)


def _whole_statements(lines: list[LineInfo]) -> bool:
    """Whether ``lines`` are whole statements of one body list: instructions, labels and complete ``{ }``
    scopes (whose insides may also declare registers, which stay local to the scope)."""
    depth = 0
    bodies: set[int] = set()
    for li in lines:
        if depth == 0:
            if not (_transferable(li) or isinstance(li.node, Scope)):
                return False
            bodies.add(id(li.body))
            depth += isinstance(li.node, Scope)
        elif li.node is None and li.text.strip() == "}":
            depth -= 1
        elif isinstance(li.node, Scope):
            depth += 1
        elif not isinstance(li.node, Instruction | Label | RegDecl):
            return False
    return depth == 0 and len(bodies) <= 1


@dataclass
class _Hunk:
    edit: Replace | Insert | Delete
    defines: set[str]
    removes: set[str]
    targets: set[str]
    reads: set[str]
    writes: set[str]
    removed_reads: set[str]
    removed_writes: set[str]
    removed: list[Instruction]

    def touches(self) -> set[str]:
        return self.reads | self.writes | self.removed_reads | self.removed_writes

    def removed_targets(self) -> set[str]:
        return {t for t in (branch_target(n) for n in self.removed) if t is not None}

    def linked(self, other: _Hunk, labels_a: set[str]) -> bool:
        """Same gene: one jumps to a label new to ``a`` that the other defines, one removes a jump to a label
        the other removes, or one (un)defines a register the other touches (an instruction moved by a schedule
        is a deletion here and an insertion there)."""
        if (self.targets - labels_a) & other.defines or self.removed_targets() & other.removes:
            return True
        return bool((self.writes | self.removed_writes) & other.touches())


def _hunk(edit: Replace | Insert | Delete, ra: list[LineInfo], rb: list[LineInfo]) -> _Hunk:
    nodes = [li.node for li in rb]
    ins = [n for n in nodes if isinstance(n, Instruction)]
    h = _Hunk(edit, {n.name for n in nodes if isinstance(n, Label)},
              {li.node.name for li in ra if isinstance(li.node, Label)},
              {t for t in (branch_target(n) for n in ins) if t is not None}, set(), set(), set(), set(), [])
    for n in ins:
        h.reads |= reads(n)
        h.writes |= writes(n)
    for n in (li.node for li in ra):
        if isinstance(n, Instruction):
            h.removed.append(n)
            h.removed_reads |= reads(n)
            h.removed_writes |= writes(n)
    return h


def _group_ok(members: list[_Hunk], labels_a: set[str], names_a: set[str], a_writes: Counter,
              a_jumps: Counter) -> bool:
    """The rules of ``line_hunks`` for one group: labels it removes are defined again or no longer jumped to,
    its jumps land on labels that exist, it reads only registers ``a`` has or it writes, and every register
    whose definitions it removes keeps one (in ``a`` or in the group)."""
    defines = set().union(*(h.defines for h in members))
    targets = set().union(*(h.targets for h in members))
    read = set().union(*(h.reads for h in members))
    written = set().union(*(h.writes for h in members))
    dropped = set().union(*(h.removes for h in members)) - defines  # labels of a the group removes for good
    removed = [n for h in members for n in h.removed]
    removed_jumps = Counter(t for t in (branch_target(n) for n in removed) if t is not None)
    removed_writes = Counter(r for n in removed for r in writes(n))
    for lab in dropped:
        if a_jumps[lab] - removed_jumps[lab] > 0 or lab in targets:
            return False
    if not targets <= (labels_a - dropped) | defines:
        return False
    if not read <= names_a | written:
        return False
    return all(r in written or a_writes[r] > k for r, k in removed_writes.items())


def line_hunks(parent_a: Kernel, parent_b: Kernel) -> list[tuple[Replace | Insert | Delete, ...]]:
    """The differences between the two entries' canonical bodies (``difflib.SequenceMatcher`` over non-blank
    lines) that can be carried from ``parent_b`` into ``parent_a``, as groups of edits in ``parent_a``'s line
    numbers; each group is one gene.

    A hunk qualifies when every line it touches on both sides is an instruction or a label of one body list.
    Hunks linked by labels (one jumps to a label another defines, as the exit test and exit label of an
    unrolled loop) or by registers (one writes or stops writing a register the other touches, as the two
    halves of an instruction a schedule moved) form one group. A group is kept when the labels it removes from
    ``a`` it defines again or nothing jumps to any more, its branches jump to labels that exist, every register
    it reads is already used in ``a`` or written by the group (so it never reads a value only an untaken group
    of ``b`` computes), and every register whose definitions it removes is still written (elsewhere in ``a`` or
    by the group). Groups are disjoint, so any subset applies together. Empty when the entries differ in name.
    """
    if parent_a.entry != parent_b.entry:
        return []
    la = [li for li in cached_listing(parent_a.module).lines if li.function == parent_a.entry and li.text.strip()]
    lb = [li for li in cached_listing(parent_b.module).lines if li.function == parent_b.entry and li.text.strip()]
    ta, tb = [li.text.strip() for li in la], [li.text.strip() for li in lb]
    fa = entry_function(parent_a)
    labels_a, names_a = labels_of(fa), used_names(fa)
    hunks: list[_Hunk] = []
    matcher = difflib.SequenceMatcher(None, ta, tb, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        ra, rb = la[i1:i2], lb[j1:j2]
        if not (_whole_statements(ra) and _whole_statements(rb)):
            continue
        lines = tuple(li.text.strip() for li in rb)
        if tag == "insert":
            if i1 == 0 or not _transferable(la[i1 - 1]):
                continue
            edit: Replace | Insert | Delete = Insert(la[i1 - 1].lineno, lines)
        elif lines:
            edit = Replace(ra[0].lineno, ra[-1].lineno, lines)
        else:
            edit = Delete(ra[0].lineno, ra[-1].lineno)
        hunks.append(_hunk(edit, ra, rb))
    # group hunks linked by labels new to a (union-find over hunk indices)
    parent = list(range(len(hunks)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for x, hx in enumerate(hunks):
        for y, hy in enumerate(hunks):
            if x != y and hx.linked(hy, labels_a):
                parent[find(x)] = find(y)
    groups: dict[int, list[_Hunk]] = {}
    for x, h in enumerate(hunks):
        groups.setdefault(find(x), []).append(h)
    a_ins = flat_instructions(fa)
    a_writes = Counter(r for n in a_ins for r in writes(n))
    a_jumps = Counter(t for t in (branch_target(n) for n in a_ins) if t is not None)
    return [tuple(h.edit for h in members) for members in groups.values()
            if _group_ok(members, labels_a, names_a, a_writes, a_jumps)]


def crossover(parent_a: Kernel, parent_b: Kernel, rng: np.random.Generator, *,
              knob_space: dict[str, tuple[int, ...]] | None = None,
              late_knobs: dict[str, int] | None = None) -> EditScript:
    """An edit script that turns ``parent_a`` into a child carrying genes of ``parent_b`` (module docstring).

    knob_space: the workload's template knob space; when both parents carry all its knobs the knobs cross
    (a KNOBS edit, applied with ``instantiate=workload.instantiate``); a knob of ``late_knobs`` a parent leaves
    out counts at its late default (``workloads.base.Workload.late_knobs``). Raises NoProposal when no gene
    differs.
    """
    late = late_knobs or {}
    ka, kb = dict(parent_a.launch.knobs), dict(parent_b.launch.knobs)
    if knob_space:
        ka = {**{n: v for n, v in late.items() if n in knob_space}, **ka}
        kb = {**{n: v for n, v in late.items() if n in knob_space}, **kb}
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
    for i, hunk in enumerate(line_hunks(parent_a, parent_b)):
        genes[f"line:{i:05d}"] = hunk
    if not genes:
        raise NoProposal("the parents share every launch gene, directive and transferable line of the entry")
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
    for g in sorted(take):
        if g.startswith("line:"):
            edits.extend(genes[g])  # type: ignore[arg-type]
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
        late = {k: int(v) for k, v in (getattr(workload, "late_knobs", None) or {}).items()}
        return crossover(parent, other, rng, knob_space=space, late_knobs=late)
