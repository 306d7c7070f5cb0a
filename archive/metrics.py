"""Quality-diversity metrics of an archive: QD score, coverage, best and mean objective.

Definitions follow the QD literature (Pugh, Soros & Stanley 2016, "Quality Diversity: A New Frontier for
Evolutionary Computation"; the pyribs ``ArchiveStats`` conventions):

- QD score = sum over elites of ``(objective - qd_offset)``. The offset is the objective's floor (0 for a
  speedup, which cannot be negative) so that adding an elite never lowers the score; an offset above some
  elite's objective makes that elite's term negative (no clamping), so choose it at or below the floor.
- coverage = filled cells / total cells, in [0, 1].
- best / mean: max and arithmetic mean of the elites' objectives (None for an empty archive).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ArchiveStats:
    """Summary of an archive at one moment.

    qd_score: sum of (objective - qd_offset) over elites (objective units, e.g. speedup);
    coverage: n_elites / n_cells in [0, 1]; best / mean: max and mean elite objective, None when empty;
    n_elites: filled cells; n_cells: total cells of the grid; qd_offset: the offset used.
    """

    qd_score: float
    coverage: float
    best: float | None
    mean: float | None
    n_elites: int
    n_cells: int
    qd_offset: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The fields as a dict (for W&B summaries and metrics files)."""
        return asdict(self)


def qd_score(objectives: Iterable[float], qd_offset: float = 0.0) -> float:
    """Sum of ``objective - qd_offset`` over the given elite objectives (0.0 for none); ``math.fsum`` so the
    value does not depend on the order elites are visited in."""
    return math.fsum(o - qd_offset for o in objectives)


def coverage(n_elites: int, n_cells: int) -> float:
    """Filled fraction of the grid; ValueError when ``n_cells < 1`` or ``n_elites`` is out of [0, n_cells]."""
    if n_cells < 1:
        raise ValueError(f"coverage needs n_cells >= 1, got {n_cells}")
    if not 0 <= n_elites <= n_cells:
        raise ValueError(f"coverage needs 0 <= n_elites <= n_cells, got n_elites={n_elites}, n_cells={n_cells}")
    return n_elites / n_cells


def compute_stats(objectives: Sequence[float], n_cells: int, qd_offset: float = 0.0) -> ArchiveStats:
    """ArchiveStats for the given elite objectives on a grid of ``n_cells`` cells."""
    objs = [float(o) for o in objectives]
    return ArchiveStats(
        qd_score=qd_score(objs, qd_offset),
        coverage=coverage(len(objs), n_cells),
        best=max(objs) if objs else None,
        mean=math.fsum(objs) / len(objs) if objs else None,
        n_elites=len(objs),
        n_cells=n_cells,
        qd_offset=qd_offset,
    )


def area_under_curve(evaluations: Sequence[float], values: Sequence[float]) -> float:
    """Trapezoidal area under a metric-vs-evaluations curve (e.g. QD score over a run), a budget-aware way to
    compare algorithms that reach similar final values at different speeds.

    evaluations must be non-decreasing and the same length as values; ValueError otherwise.
    """
    if len(evaluations) != len(values):
        raise ValueError(f"area_under_curve: {len(evaluations)} evaluation counts but {len(values)} values")
    if any(b < a for a, b in itertools.pairwise(evaluations)):
        raise ValueError("area_under_curve: evaluation counts must be non-decreasing")
    return float(sum((x1 - x0) * (y0 + y1) / 2.0
                     for x0, x1, y0, y1 in zip(evaluations, evaluations[1:], values, values[1:])))
