"""Which gate checks run at one evaluation: a pure function of the evaluation counter and a secret key.

The gate plan (``gate.gate_plan``) has small checks (at most ``gate.SMALL_CHECK_ELEMENTS`` elements: runs 1-4)
and large ones (runs 1-2). Two parts cost the most and close cheats that other checks also close (GATE.md,
"Schedule"): run 4 of a small check (a launch on the same buffers, then the inputs changed in place in part,
another eps and the outputs holding the old answer) and the large checks. ``select`` spreads them over
evaluations:

- run 4 goes to the small checks whose plan index ``j`` has ``(j + round + key) % STALE_PERIOD == 0``: a third
  of them per evaluation, every one of them once in any STALE_PERIOD consecutive evaluations. The gate plan lists
  each small shape's checks consecutively (one per distribution), so with three checks a shape every small shape
  gets run 4 at every evaluation, under a distribution that rotates;
- large check ``l`` (its index among the large checks in plan order) runs when
  ``(l + round + key // STALE_PERIOD) % LARGE_PERIOD == 0``: with two large checks one of them at every
  evaluation, each every other evaluation;
- the index check (``index_check``: one launch at a shape of more than 2^31 elements, for workloads that declare
  one, ``Workload.index_shapes``) runs when ``(round + key // (STALE_PERIOD * LARGE_PERIOD)) % INDEX_PERIOD == 0``:
  one evaluation in INDEX_PERIOD;
- runs 1-3 of every small check and the fault check run at every evaluation.

``round`` is the evaluator's evaluation counter (``GPUPool``), ``key`` a secret drawn when the pool starts (from
the OS unless the pool is seeded), so a kernel sees, at any check, run 4 with probability 1/3 and a large check
with probability 1/2, the index check with probability 1/INDEX_PERIOD, and cannot tell which evaluation it is.
Profiles: ``rotating`` (the above), ``full``
(everything, every evaluation: final verification, gate stability, a request without a schedule) and ``v1``
(runs 1-2 of every small check and every large check, no index check: the cost of gate v1, for measuring the
loop against it; not a gate to search with).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Evaluations over which every small check gets run 4 once (a third of them per evaluation).
STALE_PERIOD = 3
# Evaluations over which every large check runs once (half of them per evaluation).
LARGE_PERIOD = 2
# Evaluations over which the index check runs once (a kernel wrong only past 2^31 elements changes no number of
# the search: every timed shape holds at most 2^31; the full profile, final verification, runs it every time).
INDEX_PERIOD = 4
PROFILES = ("rotating", "full", "v1")


@dataclass(frozen=True)
class GateSchedule:
    """The schedule of one evaluation: ``profile`` (PROFILES), ``round`` (the evaluation counter, >= 0) and
    ``key`` (the evaluator's secret, >= 0). ValueError on an unknown profile or a negative round or key."""

    profile: str = "full"
    round: int = 0
    key: int = 0

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"gate schedule profile must be one of {PROFILES}, got {self.profile!r}")
        if self.round < 0 or self.key < 0:
            raise ValueError(f"gate schedule round and key must be >= 0, got {self.round}, {self.key}")

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "round": int(self.round), "key": int(self.key)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> GateSchedule:
        """The schedule of a request's ``gate_schedule`` entry. None (absent), or an entry without ``profile``:
        ``full``, the class default (what a request without a schedule has always run: every check). Every
        schedule the pool sends and every store row records comes from ``to_json``, which always names the
        profile, so no recorded evaluation depends on this default. ValueError as the constructor."""
        if not d:
            return cls()
        return cls(str(d.get("profile", cls.profile)), int(d.get("round", 0)), int(d.get("key", 0)))


@dataclass(frozen=True)
class Selection:
    """What runs at one evaluation: ``finite`` (run 3 on every small check), ``stale`` (indices, among the small
    checks in plan order, of those that get run 4), ``large`` (indices, among the large checks in plan order, of
    those that run), ``index`` (the index check, for a workload with ``index_shapes``)."""

    finite: bool
    stale: frozenset[int]
    large: frozenset[int]
    index: bool = False


def select(n_small: int, n_large: int, schedule: GateSchedule) -> Selection:
    """The checks of a gate plan with ``n_small`` small and ``n_large`` large checks that run under
    ``schedule`` (module docstring). Pure: the same arguments give the same Selection.

    Coverage (tests/test_gate_schedule.py): under ``rotating``, every small check is in ``stale`` exactly once in
    any STALE_PERIOD consecutive rounds and each round has floor or ceil of n_small / STALE_PERIOD of them; every
    large check runs exactly once in any LARGE_PERIOD consecutive rounds and each round runs floor or ceil of
    n_large / LARGE_PERIOD of them; the index check runs in exactly one of any INDEX_PERIOD consecutive rounds.
    ValueError for negative counts."""
    if n_small < 0 or n_large < 0:
        raise ValueError(f"check counts must be >= 0, got {n_small}, {n_large}")
    small, large = frozenset(range(n_small)), frozenset(range(n_large))
    if schedule.profile == "full":
        return Selection(True, small, large, True)
    if schedule.profile == "v1":
        return Selection(False, frozenset(), large, False)
    k, key = schedule.round, schedule.key
    stale = frozenset(j for j in small if (j + k + key) % STALE_PERIOD == 0)
    big = frozenset(i for i in large if (i + k + key // STALE_PERIOD) % LARGE_PERIOD == 0)
    index = (k + key // (STALE_PERIOD * LARGE_PERIOD)) % INDEX_PERIOD == 0
    return Selection(True, stale, big, index)
