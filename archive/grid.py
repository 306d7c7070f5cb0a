"""The MAP-Elites grid archive (Mouret & Clune 2015, "Illuminating search spaces by mapping elites").

A ``GridArchive`` keeps one elite per cell of a fixed grid over behaviour descriptors. Bin edges are fixed
up front from hardware limits (never running min-max, which makes cells drift as the run goes).

Binning: every dimension has increasing edges ``e0 < e1 < ... < ek`` and ``k`` bins; bins are closed on the
right, bin ``i`` holds ``e_i < v <= e_(i+1)`` (bin 0 also holds ``v <= e0``). Values outside ``[e0, ek]`` are
clipped into the edge bins, so every finite descriptor value lands in some cell; NaN raises ValueError.
Right-closed bins match "at most N" hardware limits: 32 registers/thread still gives full occupancy on sm_90,
33 does not.

Replacement: a candidate enters an empty cell (``"new"``) or replaces the incumbent when its objective is
strictly greater (``"improved"``); ties keep the incumbent (``"not_added"``). Objectives are maximised.

Curiosity (Cully & Demiris 2018, "Quality and Diversity Optimization: A Unifying Modular Framework", IEEE
TEC 22(2), §IV-B "curiosity score"): each elite carries a score, starting at 0, that the engine updates with
``credit(parent_id, child_added)``: +1 when a child of that elite entered the archive, -0.5 otherwise.
``sample(..., weighting="curiosity")`` draws parents with probability proportional to the score shifted so the
lowest score in the archive weighs 1 (every elite keeps a chance). A replaced elite's score is not inherited.

Engine use::

    archive = GridArchive(default_dimensions((9, 0)), qd_offset=0.0)
    res = archive.add(row_id, result.objective, result.features)   # AddResult
    archive.credit(parent_row_id, res.status != "not_added")
    parents = archive.sample(rng, 4, weighting="curiosity")         # list[Elite]
    store.save_checkpoint("latest", {"archive": archive.state_dict(), ...})
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from archive.metrics import ArchiveStats, compute_stats

Cell = tuple[int, ...]
CandidateId = int | str

CURIOSITY_SUCCESS = 1.0
CURIOSITY_FAILURE = -0.5

# sm_90 occupancy cliffs in registers/thread (65536 registers per SM, allocated per warp in units of 256,
# cuda_occupancy.h): the register file holds 64 warps at 32 regs, 51 at 40, 42 at 48, 32 at 64, 25 at 80, 21 at
# 96, 16 at 128, 12 at 168; one register more loses resident warps (for 128-thread CTAs at every edge, checked in
# tests against targets.occupancy). 255 is the per-thread maximum (CUDA Programming Guide, "Technical
# Specifications per Compute Capability").
REGISTER_EDGES: tuple[float, ...] = (0.0, 32.0, 40.0, 48.0, 64.0, 80.0, 96.0, 128.0, 168.0, 255.0)



@dataclass(frozen=True)
class Dimension:
    """One behaviour descriptor axis.

    name: the feature key read from ``EvalResult.features`` (e.g. ``"registers"``);
    edges: k+1 strictly increasing finite bin edges in the feature's unit (k >= 1 bins, right-closed);
    unit: human-readable unit for plots (``"regs/thread"``, ``"warps/SM"``, ``"x min bytes"``).
    """

    name: str
    edges: tuple[float, ...]
    unit: str = ""

    def __post_init__(self) -> None:
        edges = tuple(float(e) for e in self.edges)
        if len(edges) < 2:
            raise ValueError(f"Dimension {self.name!r}: needs at least 2 edges, got {len(edges)}")
        if any(not math.isfinite(e) for e in edges):
            raise ValueError(f"Dimension {self.name!r}: edges must be finite, got {edges}")
        if any(b <= a for a, b in itertools.pairwise(edges)):
            raise ValueError(f"Dimension {self.name!r}: edges must be strictly increasing, got {edges}")
        object.__setattr__(self, "edges", edges)

    @property
    def n_bins(self) -> int:
        """Number of bins (len(edges) - 1)."""
        return len(self.edges) - 1

    def bin(self, value: float) -> int:
        """Bin index of ``value`` (right-closed bins, out-of-range values clipped); ValueError on NaN."""
        v = float(value)
        if math.isnan(v):
            raise ValueError(f"descriptor {self.name!r} is NaN")
        i = bisect.bisect_left(self.edges, v) - 1
        return min(max(i, 0), self.n_bins - 1)

    def labels(self) -> list[str]:
        """Axis labels ``"(lo, hi]"`` per bin, for heatmaps."""
        return [f"({_fmt(a)}, {_fmt(b)}]" for a, b in zip(self.edges, self.edges[1:])]

    def to_json(self) -> dict[str, Any]:
        """``{name, edges, unit}``, the form ``from_json`` and ``dims_from_config`` read."""
        return {"name": self.name, "edges": list(self.edges), "unit": self.unit}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Dimension:
        """Inverse of ``to_json``; ValueError for bad edges."""
        return cls(name=str(d["name"]), edges=tuple(d["edges"]), unit=str(d.get("unit", "")))


def _fmt(x: float) -> str:
    return f"{x:g}" if abs(x) >= 0.01 else f"{x:.3g}"


def _resolve_gpu(gpu: Any) -> Any:
    if isinstance(gpu, str) and not gpu.startswith("sm_") and not gpu[:1].isdigit():
        from targets.spec import get_gpu  # a GPU name such as "h200"

        return get_gpu(gpu)
    return gpu


def _cc_of(gpu: Any) -> tuple[int, int]:
    cc = getattr(gpu, "cc", gpu)
    if isinstance(cc, str):  # "sm_90" or "9.0"
        digits = cc.removeprefix("sm_").replace(".", "")
        cc = (int(digits[:-1]), int(digits[-1]))
    try:
        major, minor = (int(c) for c in cc)
    except (TypeError, ValueError) as e:
        raise ValueError(f"default_dimensions: cannot read a compute capability from {gpu!r}") from e
    return major, minor


def default_dimensions(gpu: Any = None, *, warp_bins: int = 8, traffic_bins: int = 8,
                       traffic_max: float = 4.0) -> list[Dimension]:
    """The default descriptors: registers/thread, active warps/SM, DRAM traffic ratio.

    gpu: a ``targets.spec.GPUSpec`` (its ``cc`` and ``max_warps_per_sm``), a GPU name for
        ``targets.spec.get_gpu`` (``"h200"``), a ``(major, minor)`` tuple or ``"sm_90"``; None:
        ``targets.spec.DEFAULT_GPU``; ValueError for an unknown compute capability.
    - ``registers``: edges at the sm_90 occupancy cliffs ``REGISTER_EDGES`` (0, 32, ..., 168, 255).
      The 64K-register file and the 255 registers/thread cap hold for every cc >= 7.0, so the edges are shared.
    - ``active_warps``: ``warp_bins`` equal bins over 0..max resident warps per SM (64 on sm_90).
    - ``traffic_ratio``: static DRAM bytes / the workload's minimum bytes, ``traffic_bins`` log-spaced bins from
      1x to ``traffic_max`` x (a kernel at the minimum lands in bin 0; above the top clips into the last bin).
    """
    if gpu is None:
        from targets.spec import DEFAULT_GPU

        gpu = DEFAULT_GPU
    gpu = _resolve_gpu(gpu)
    cc = _cc_of(gpu)
    max_warps = getattr(gpu, "max_warps_per_sm", None)
    if max_warps is None:
        max_threads = getattr(gpu, "max_threads_per_sm", None)
        if max_threads:
            max_warps = max_threads // 32
        else:  # the GPU facts live in targets/: the cuda_occupancy.h table of this compute capability
            from targets.occupancy import device_props

            try:
                max_warps = device_props(cc).max_warps_per_sm
            except ValueError as e:
                raise ValueError(f"default_dimensions: unknown compute capability {cc}: {e}") from None
    if traffic_max <= 1.0:
        raise ValueError(f"default_dimensions: traffic_max must be > 1, got {traffic_max}")
    warp_edges = tuple(float(x) for x in np.linspace(0.0, float(max_warps), warp_bins + 1))
    traffic_edges = tuple(float(x) for x in np.geomspace(1.0, traffic_max, traffic_bins + 1))
    return [
        Dimension("registers", REGISTER_EDGES, "regs/thread"),
        Dimension("active_warps", warp_edges, "warps/SM"),
        Dimension("traffic_ratio", traffic_edges, "x min bytes"),
    ]


@dataclass
class Elite:
    """The occupant of one cell.

    candidate_id: the store row id (or any JSON scalar id the caller uses); objective: its fitness (maximised);
    features: the descriptor values it was binned with; cell: its cell index; curiosity: Cully & Demiris score;
    added: the archive's insertion counter when it entered (for recency and tie analysis).
    """

    candidate_id: CandidateId
    objective: float
    features: dict[str, float]
    cell: Cell
    curiosity: float = 0.0
    added: int = 0

    def to_json(self) -> dict[str, Any]:
        """JSON-able dict (cell as a list); ``from_json`` restores an equal Elite."""
        return {"candidate_id": self.candidate_id, "objective": self.objective, "features": self.features,
                "cell": list(self.cell), "curiosity": self.curiosity, "added": self.added}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Elite:
        """Inverse of ``to_json``."""
        return cls(candidate_id=d["candidate_id"], objective=float(d["objective"]),
                   features={str(k): float(v) for k, v in d["features"].items()}, cell=tuple(d["cell"]),
                   curiosity=float(d.get("curiosity", 0.0)), added=int(d.get("added", 0)))


@dataclass(frozen=True)
class AddResult:
    """What ``GridArchive.add`` did.

    status: ``"new"`` (empty cell filled), ``"improved"`` (incumbent replaced) or ``"not_added"``;
    cell: the cell index the features map to; previous: the incumbent's objective (None for an empty cell);
    improvement: the QD-score change for new (objective - qd_offset) and improved (objective - previous),
    and objective - incumbent (<= 0) for not_added; displaced: the candidate id of the incumbent an
    ``"improved"`` replaced (else None).
    """

    status: Literal["new", "improved", "not_added"]
    cell: Cell
    previous: float | None
    improvement: float
    displaced: CandidateId | None = None

    @property
    def added(self) -> bool:
        """True for ``"new"`` and ``"improved"``."""
        return self.status != "not_added"


@dataclass
class GridArchive:
    """A MAP-Elites grid over ``dims`` with one elite per cell (see the module docstring for the rules).

    dims: the descriptor axes (their names are the keys ``add`` reads from ``features``);
    qd_offset: subtracted from each elite's objective in the QD score (the objective's floor; 0 for speedup).
    """

    dims: list[Dimension]
    qd_offset: float = 0.0
    _cells: dict[Cell, Elite] = field(default_factory=dict, init=False, repr=False)
    _by_id: dict[CandidateId, Cell] = field(default_factory=dict, init=False, repr=False)
    _counter: int = field(default=0, init=False, repr=False)
    # candidate id of an elite whose verdict (e.g. compute-sanitizer) is pending -> the elite it displaced
    _pending: dict[CandidateId, Elite | None] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.dims:
            raise ValueError("GridArchive needs at least one Dimension")
        names = [d.name for d in self.dims]
        if len(set(names)) != len(names):
            raise ValueError(f"GridArchive: duplicate dimension names {names}")
        self.dims = list(self.dims)
        self.qd_offset = float(self.qd_offset)

    # -------------------------------------------------------------------------------------------- geometry
    @property
    def shape(self) -> tuple[int, ...]:
        """Bins per dimension."""
        return tuple(d.n_bins for d in self.dims)

    @property
    def n_cells(self) -> int:
        """Total cells of the grid (product of bins per dimension)."""
        return int(np.prod(self.shape))

    def index_of(self, features: Mapping[str, float]) -> Cell:
        """The cell ``features`` fall in; KeyError naming the missing descriptor, ValueError on NaN."""
        cell = []
        for d in self.dims:
            if d.name not in features:
                raise KeyError(f"features lack descriptor {d.name!r}; archive needs {[x.name for x in self.dims]},"
                               f" got {sorted(features)}")
            cell.append(d.bin(features[d.name]))
        return tuple(cell)

    # ------------------------------------------------------------------------------------------- mutation
    def add(self, candidate_id: CandidateId, objective: float, features: Mapping[str, float], *,
            pending: bool = False) -> AddResult:
        """Offer a candidate; returns AddResult. ValueError for a non-finite objective.

        pending: the candidate still awaits a verdict (``confirm`` / ``reject``): when it enters, the elite it
        displaces is kept aside so that ``reject`` can bring it back."""
        obj = float(objective)
        if not math.isfinite(obj):
            raise ValueError(f"candidate {candidate_id!r}: objective must be finite, got {objective!r}")
        cell = self.index_of(features)
        inc = self._cells.get(cell)
        if inc is not None and obj <= inc.objective:
            return AddResult("not_added", cell, inc.objective, obj - inc.objective)
        self._counter += 1
        elite = Elite(candidate_id, obj, {d.name: float(features[d.name]) for d in self.dims}, cell,
                      added=self._counter)
        if inc is None:
            status, gain = "new", obj - self.qd_offset
        else:
            status, gain = "improved", obj - inc.objective
            self._by_id.pop(inc.candidate_id, None)
        self._cells[cell] = elite
        self._by_id[candidate_id] = cell
        if pending:
            self._pending[candidate_id] = inc
        return AddResult(status, cell, None if inc is None else inc.objective, gain,  # type: ignore[arg-type]
                         None if inc is None else inc.candidate_id)

    def credit(self, parent_id: CandidateId, child_added: bool) -> bool:
        """Update the curiosity score of the elite ``parent_id`` (+1 when its child entered the archive,
        -0.5 otherwise). Returns False, changing nothing, when the parent is no longer an elite."""
        cell = self._by_id.get(parent_id)
        if cell is None:
            return False
        self._cells[cell].curiosity += CURIOSITY_SUCCESS if child_added else CURIOSITY_FAILURE
        return True

    def remove(self, candidate_id: CandidateId) -> Elite | None:
        """Take the elite ``candidate_id`` out of its cell (e.g. it failed a re-timing or a held-out check);
        returns it, or None when it is not an elite. The cell becomes empty."""
        cell = self._by_id.pop(candidate_id, None)
        return None if cell is None else self._cells.pop(cell)

    def confirm(self, candidate_id: CandidateId) -> list[CandidateId]:
        """The pending verdict on ``candidate_id`` passed: it is a plain elite from now on (no-op if not pending).
        The pending candidates it displaced, directly or down their own chain, can no longer come back (only a
        failed verdict on the one that displaced them could bring them back): they stop being pending. Returns
        their ids, so a caller can drop the verdicts it still owes them."""
        displaced = self._pending.pop(candidate_id, None)
        dropped: list[CandidateId] = []
        while (displaced is not None and displaced.candidate_id in self._pending
               and self.elite_of(displaced.candidate_id) is None):
            dropped.append(displaced.candidate_id)
            displaced = self._pending.pop(displaced.candidate_id)
        return dropped

    def is_pending(self, candidate_id: CandidateId) -> bool:
        """True while ``candidate_id`` awaits its verdict (an elite, or one a pending elite displaced)."""
        return candidate_id in self._pending

    def reject(self, candidate_id: CandidateId) -> Elite | None:
        """The pending verdict on ``candidate_id`` failed: take it out of the archive and bring back the elite it
        displaced (into its cell, when the rejected one still holds it; else the candidate that displaced the
        rejected one inherits what it had displaced). Returns the elite brought back, or None."""
        displaced = self._pending.pop(candidate_id, None)
        rejected = self.elite_of(candidate_id)
        if rejected is None:
            for k, d in self._pending.items():
                if d is not None and d.candidate_id == candidate_id:
                    self._pending[k] = displaced
            return None
        self.remove(candidate_id)
        if displaced is not None:
            self._cells[displaced.cell] = displaced
            self._by_id[displaced.candidate_id] = displaced.cell
        return displaced

    @property
    def pending(self) -> list[CandidateId]:
        """Candidate ids of elites whose verdict is pending, in insertion order."""
        return list(self._pending)

    def clear(self) -> None:
        """Remove every elite and reset the insertion counter."""
        self._cells.clear()
        self._by_id.clear()
        self._pending.clear()
        self._counter = 0

    # -------------------------------------------------------------------------------------------- queries
    def __len__(self) -> int:
        return len(self._cells)

    def __contains__(self, candidate_id: object) -> bool:
        return candidate_id in self._by_id

    def get(self, cell: Sequence[int]) -> Elite | None:
        """The elite of ``cell`` or None."""
        return self._cells.get(tuple(cell))

    def elite_of(self, candidate_id: CandidateId) -> Elite | None:
        """The elite with this candidate id, None when it is not (or no longer) an elite."""
        cell = self._by_id.get(candidate_id)
        return None if cell is None else self._cells[cell]

    def elites(self) -> list[Elite]:
        """All elites in cell order (lexicographic cell index), a stable order for sampling and export."""
        return [self._cells[c] for c in sorted(self._cells)]

    def best(self) -> Elite | None:
        """The elite with the highest objective (earliest added on ties), None when empty."""
        if not self._cells:
            return None
        return max(self._cells.values(), key=lambda e: (e.objective, -e.added))

    def sample(self, rng: np.random.Generator, n: int,
               weighting: Literal["uniform", "curiosity"] = "uniform") -> list[Elite]:
        """``n`` elites drawn with replacement: uniformly over filled cells, or by shifted curiosity score.

        ValueError when the archive is empty or ``weighting`` is unknown.
        """
        if not self._cells:
            raise ValueError("cannot sample from an empty archive")
        pool = self.elites()
        if weighting == "uniform":
            idx = rng.integers(0, len(pool), size=n)
        elif weighting == "curiosity":
            scores = np.array([e.curiosity for e in pool], dtype=np.float64)
            w = scores - scores.min() + 1.0
            idx = rng.choice(len(pool), size=n, replace=True, p=w / w.sum())
        else:
            raise ValueError(f"sample: weighting must be 'uniform' or 'curiosity', got {weighting!r}")
        return [pool[int(i)] for i in idx]

    def stats(self) -> ArchiveStats:
        """QD score, coverage, best, mean, n_elites (archive.metrics definitions)."""
        return compute_stats([e.objective for e in self._cells.values()], self.n_cells, self.qd_offset)

    def project(self, dim_x: str, dim_y: str) -> np.ndarray:
        """Max elite objective per (dim_y bin, dim_x bin) over all other dimensions: a float64 array of shape
        (n_bins(dim_y), n_bins(dim_x)), NaN where no elite projects. KeyError for an unknown dimension name."""
        names = [d.name for d in self.dims]
        for n in (dim_x, dim_y):
            if n not in names:
                raise KeyError(f"archive has no dimension {n!r}; dimensions: {names}")
        ix, iy = names.index(dim_x), names.index(dim_y)
        out = np.full((self.dims[iy].n_bins, self.dims[ix].n_bins), np.nan)
        for cell, e in self._cells.items():
            cur = out[cell[iy], cell[ix]]
            if np.isnan(cur) or e.objective > cur:
                out[cell[iy], cell[ix]] = e.objective
        return out

    # ----------------------------------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, Any]:
        """JSON-able state; ``load_state(state_dict())`` restores an equal archive (floats survive JSON exactly)."""
        state = {"dims": [d.to_json() for d in self.dims], "qd_offset": self.qd_offset, "counter": self._counter,
                 "elites": [e.to_json() for e in self.elites()]}
        if self._pending:  # absent when empty: states written before pending verdicts existed stay equal
            state["pending"] = [[k, None if d is None else d.to_json()] for k, d in self._pending.items()]
        return state

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Replace the contents with ``state``; ValueError when its dimensions or offset differ from this
        archive's (a checkpoint from another configuration)."""
        dims = [Dimension.from_json(d) for d in state["dims"]]
        if dims != self.dims:
            raise ValueError(f"archive state has dimensions {[d.to_json() for d in dims]}, "
                             f"this archive has {[d.to_json() for d in self.dims]}")
        if float(state["qd_offset"]) != self.qd_offset:
            raise ValueError(f"archive state has qd_offset {state['qd_offset']}, this archive {self.qd_offset}")
        self.clear()
        for d in state["elites"]:
            e = Elite.from_json(d)
            self._cells[e.cell] = e
            self._by_id[e.candidate_id] = e.cell
        self._counter = int(state.get("counter", len(self._cells)))
        for k, d in state.get("pending", []):
            self._pending[k] = None if d is None else Elite.from_json(d)

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> GridArchive:
        """A new archive built from ``state_dict()`` output."""
        archive = cls([Dimension.from_json(d) for d in state["dims"]], float(state["qd_offset"]))
        archive.load_state(state)
        return archive

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GridArchive):
            return NotImplemented
        return self.state_dict() == other.state_dict()

    __hash__ = None  # type: ignore[assignment]


def dims_from_config(spec: Iterable[Mapping[str, Any]]) -> list[Dimension]:
    """Dimensions from config entries ``{name, edges: [...], unit?}`` or ``{name, lo, hi, bins, log?: bool}``.

    ValueError naming the entry index and key when an entry has neither form.
    """
    dims = []
    for i, d in enumerate(spec):
        if "name" not in d:
            raise ValueError(f"archive.dims[{i}]: missing key 'name'")
        if "edges" in d:
            edges = tuple(d["edges"])
        elif {"lo", "hi", "bins"} <= set(d):
            fn = np.geomspace if d.get("log", False) else np.linspace
            edges = tuple(float(x) for x in fn(float(d["lo"]), float(d["hi"]), int(d["bins"]) + 1))
        else:
            raise ValueError(f"archive.dims[{i}] ({d['name']!r}): give 'edges' or all of 'lo', 'hi', 'bins'")
        try:
            dims.append(Dimension(str(d["name"]), edges, str(d.get("unit", ""))))
        except ValueError as e:
            raise ValueError(f"archive.dims[{i}]: {e}") from e
    return dims
