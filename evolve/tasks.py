"""Tasks for multi-task search: shape buckets over the row length, each with the shapes it is evaluated on.

Multi-task MAP-Elites (J.-B. Mouret, G. Maguire, "Quality Diversity for Multi-task Optimization", GECCO 2020)
keeps an elite per (task, cell) and lets a solution found for one task be tried on the others. Here a task is a
range of the last shape axis (the row length N of RMSNorm): ``(lo, hi]`` elements, with the benchmark shapes that
fall in it. A kernel need not serve every shape: the run's product is a dispatch, one kernel per task
(``archive.dispatch``).

The task is a dimension of the archive (``TaskSet.dimension()``: descriptor ``"task"``, one bin per task), so
every algorithm uses it: MAP-Elites and the island model select parents across tasks; the engine decides on which
task each child is evaluated (``TaskSet.choose``): the parent's task, or with probability ``neighbour_rate`` a
task at most ``radius`` buckets away; and after a child becomes the best of task ``t`` it is tried as it is on
the neighbouring tasks ``t - 1`` and ``t + 1`` (``transfer``; each try is an evaluation, counted in the budget;
a transferred kernel that becomes the best there travels on).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from archive.grid import Dimension

Shape = tuple[int, ...]
TASK_FEATURE = "task"


@dataclass(frozen=True)
class Task:
    """One shape bucket. index: its position (the archive's task bin); lo, hi: the row-length range
    ``(lo, hi]`` in elements (``hi`` None: unbounded); shapes: the shapes a candidate for this task is evaluated
    on (at least one, each inside the range)."""

    index: int
    lo: int
    hi: int | None
    shapes: tuple[Shape, ...]

    @property
    def name(self) -> str:
        """``"N<=384"``, ``"384<N<=768"``, ``"N>196608"``: a label for tables and metrics."""
        if self.lo <= 0:
            return f"N<={self.hi}" if self.hi is not None else "N>0"
        return f"{self.lo}<N<={self.hi}" if self.hi is not None else f"N>{self.lo}"

    @property
    def key(self) -> str:
        """``"t00"``, ``"t01"`` ...: the task's label in metric names (W&B keys), free of ``<`` and ``=``."""
        return f"t{self.index:02d}"

    def contains(self, n: int) -> bool:
        """Whether row length ``n`` falls in ``(lo, hi]``."""
        return n > self.lo and (self.hi is None or n <= self.hi)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "lo": self.lo, "hi": self.hi,
                "shapes": [list(s) for s in self.shapes]}


@dataclass(frozen=True)
class TaskSet:
    """The tasks of a run, in increasing row length, covering every N >= 1 (the first starts at 0, the last is
    unbounded). neighbour_rate: probability that a child is evaluated on a task other than its parent's;
    radius: how many buckets away that task may be; transfer: neighbours on each side a new best of a task is tried on
    (0: none). Raises ValueError when the tasks do not cover (0, inf) in order or a task has no shape."""

    tasks: tuple[Task, ...]
    neighbour_rate: float = 0.2
    radius: int = 1
    transfer: int = 1
    _edges: tuple[int, ...] = field(default=(), init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError("tasks: need at least one task")
        prev = 0
        for i, t in enumerate(self.tasks):
            if t.index != i:
                raise ValueError(f"tasks[{i}]: index {t.index}, expected {i}")
            if t.lo != prev:
                raise ValueError(f"tasks[{i}] ({t.name}): starts at {t.lo}, the previous task ends at {prev}")
            if not t.shapes:
                raise ValueError(f"tasks[{i}] ({t.name}): no shape to evaluate on")
            for s in t.shapes:
                if not t.contains(int(s[-1])):
                    raise ValueError(f"tasks[{i}] ({t.name}): shape {s} is outside the task's range")
            if t.hi is None and i != len(self.tasks) - 1:
                raise ValueError(f"tasks[{i}] ({t.name}): only the last task may be unbounded")
            prev = t.hi if t.hi is not None else prev
        if self.tasks[-1].hi is not None:
            raise ValueError(f"tasks: the last task ({self.tasks[-1].name}) must be unbounded (hi null)")
        if not 0.0 <= self.neighbour_rate <= 1.0:
            raise ValueError(f"tasks.neighbour_rate: must be in [0, 1], got {self.neighbour_rate}")
        if self.radius < 1:
            raise ValueError(f"tasks.radius: must be >= 1, got {self.radius}")
        if self.transfer < 0:
            raise ValueError(f"tasks.transfer: must be >= 0, got {self.transfer}")
        object.__setattr__(self, "_edges", tuple(t.hi for t in self.tasks[:-1]))  # type: ignore[misc]

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, i: int) -> Task:
        return self.tasks[i]

    def task_of(self, n: int) -> Task:
        """The task whose range holds row length ``n`` (elements); ValueError for n < 1."""
        if n < 1:
            raise ValueError(f"row length must be >= 1, got {n}")
        for t in self.tasks:
            if t.contains(n):
                return t
        raise AssertionError("unreachable: the tasks cover (0, inf)")

    def dimension(self) -> Dimension:
        """The archive axis: feature ``"task"``, bin ``i`` holds task index ``i`` (edges -1, 0, 1, ...)."""
        return Dimension(TASK_FEATURE, tuple(float(x) for x in range(-1, len(self.tasks))), "task")

    def neighbours(self, index: int, radius: int | None = None) -> list[int]:
        """Task indices at distance 1..radius from ``index``, nearest first (lower before higher)."""
        r = self.radius if radius is None else radius
        out = []
        for d in range(1, r + 1):
            out += [i for i in (index - d, index + d) if 0 <= i < len(self.tasks)]
        return out

    def choose(self, parent_task: int | None, rng: np.random.Generator) -> int:
        """The task a child of a parent from ``parent_task`` is evaluated on (module docstring); a parent
        without a task (none yet) sends its child to a task drawn uniformly."""
        if parent_task is None or not 0 <= parent_task < len(self.tasks):
            return int(rng.integers(len(self.tasks)))
        if len(self.tasks) > 1 and rng.random() < self.neighbour_rate:
            near = self.neighbours(parent_task)
            return int(near[int(rng.integers(len(near)))])
        return int(parent_task)

    def transfer_targets(self, index: int) -> list[int]:
        """Tasks a new best of task ``index`` is tried on: ``transfer`` neighbours each side."""
        return self.neighbours(index, self.transfer) if self.transfer else []

    def to_json(self) -> dict[str, Any]:
        return {"tasks": [t.to_json() for t in self.tasks], "neighbour_rate": self.neighbour_rate,
                "radius": self.radius, "transfer": self.transfer}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TaskSet:
        tasks = tuple(Task(int(t["index"]), int(t["lo"]), None if t["hi"] is None else int(t["hi"]),
                           tuple(tuple(int(v) for v in s) for s in t["shapes"])) for t in d["tasks"])
        return cls(tasks, float(d.get("neighbour_rate", 0.2)), int(d.get("radius", 1)), int(d.get("transfer", 1)))


def midpoint_edges(ns: Iterable[int]) -> list[int]:
    """Bucket edges between consecutive distinct row lengths at their geometric midpoint (rounded down), e.g.
    256, 512, 1024 -> [362, 724]: each bucket holds one of the given lengths."""
    xs = sorted(set(int(n) for n in ns))
    return [int(math.sqrt(a * b)) for a, b in itertools.pairwise(xs)]


def build_tasks(shapes: Sequence[Shape], edges: Sequence[int] | None = None, *, neighbour_rate: float = 0.2,
                radius: int = 1, transfer: int = 1) -> TaskSet:
    """Tasks over ``shapes`` (their last axis is the row length). edges: increasing upper bounds of every task
    but the last (None: ``midpoint_edges`` of the shapes' row lengths, one task per distinct length). Each task
    gets the shapes inside its range. ValueError (naming ``tasks.edges``) for unsorted edges or a bucket without
    a shape."""
    shapes = [tuple(int(v) for v in s) for s in shapes]
    if not shapes:
        raise ValueError("tasks: no shapes to build tasks over")
    e = midpoint_edges(s[-1] for s in shapes) if edges is None else [int(x) for x in edges]
    if any(b <= a for a, b in itertools.pairwise(e)) or (e and e[0] < 1):
        raise ValueError(f"tasks.edges: must be increasing positive integers, got {e}")
    bounds = [0, *e, None]
    tasks = []
    for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        inside = tuple(s for s in shapes if s[-1] > lo and (hi is None or s[-1] <= hi))
        if not inside:
            rng = f"({lo}, {hi if hi is not None else 'inf'}]"
            raise ValueError(f"tasks.edges: bucket {i} {rng} holds none of the shapes' row lengths "
                             f"{sorted({s[-1] for s in shapes})}")
        tasks.append(Task(i, int(lo), None if hi is None else int(hi), inside))
    return TaskSet(tuple(tasks), neighbour_rate=neighbour_rate, radius=radius, transfer=transfer)


def task_axis(archive: Any) -> int:
    """Index of ``archive``'s ``"task"`` dimension (``TaskSet.dimension``); ValueError when it has none."""
    return [d.name for d in archive.dims].index(TASK_FEATURE)


def task_stats(archive: Any, tasks: TaskSet) -> dict[str, dict[str, float]]:
    """Per task (by ``Task.key``, ``t00`` ...): qd_score (sum of its elites' objective minus the archive's qd_offset), coverage (its
    filled cells / its cells), best (max objective, NaN when empty), n_elites. The archive's own qd_score is the
    sum over tasks."""
    axis = task_axis(archive)
    per_task_cells = archive.n_cells // archive.dims[axis].n_bins
    by_task: dict[int, list[float]] = {}
    for e in archive.elites():
        by_task.setdefault(int(e.cell[axis]), []).append(e.objective)
    out: dict[str, dict[str, float]] = {}
    for t in tasks.tasks:
        objs = by_task.get(t.index, [])
        out[t.key] = {"qd_score": float(sum(o - archive.qd_offset for o in objs)),
                       "coverage": len(objs) / per_task_cells, "best": max(objs) if objs else float("nan"),
                       "n_elites": float(len(objs))}
    return out


def best_per_task(archive: Any, tasks: TaskSet) -> dict[int, Any]:
    """task index -> the archive's best elite of that task (highest objective, earliest added on ties); tasks
    without an elite are left out."""
    axis = task_axis(archive)
    best: dict[int, Any] = {}
    for e in archive.elites():
        t = int(e.cell[axis])
        cur = best.get(t)
        if cur is None or (e.objective, -e.added) > (cur.objective, -cur.added):
            best[t] = e
    return best
