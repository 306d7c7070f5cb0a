"""Benchmark inputs and checked timed launches: a timed launch must look like any other and may be checked.

Per benchmarked shape the worker keeps ``InputSets``: ``k`` input sets of the same shape at different addresses:
set 0 under the workload's first distribution (``normal``), the others under its other distributions (``tiny``,
``nonfinite``..., rotated by seed), the seed that made each (to restore it). In the worker (``edge``) every buffer
sits in its own CUDA VMM mapping that ends at an unmapped granule, NaN before it, inputs mapped read-only where
the driver allows and written by the evaluator through a read-write alias (``vmm.place_at_edges``, the fault
check's code): a read past an input or a store into one faults at a timed launch as it does in the fault check,
at every benchmarked shape. Elsewhere (numpy, or a driver without VMM) each set is one allocation with NaN
padding around every buffer (``gate.pack_inputs``) and a fingerprint (``fused.fingerprint``).

``timed_call`` wraps a kernel launch in a ``benchmark.TimedCall`` and draws, before the timing loop, for every
timed launch the input set, the runtime scalars (``Workload.draw_params``: eps) and the pattern the outputs are
refilled with (NaN poison, all-ones poison, zeros, random finite values, or a correct answer for set 0 when the
launch reads another set), or, at a STALE_SHARE of the launches, left as the previous launch wrote them
("stale"); its untimed ``prepare`` then refills the outputs (``launch_prep.fill``: one memset, copy or kernel) and
points the launch at its set (pointer rotation among the pre-made sets, no copy).
CHECKED_LAUNCHES launches, drawn at random among the timed ones, are checked: their output rows at a random sample
drawn per launch (plus the first and last row) and their inout buffers' final values at a random sample of rows
are gathered right after the end event and compared with the float64 reference for the inputs and scalars they saw
(``verify_checked``, one synchronisation per shape). Every timed launch sees its input set changed in place in part
for that launch only (``changing_inputs``): its activations (the inputs of two or more dimensions) at every launch,
its parameters (one-dimensional inputs such as w) at about half of the launches, among them half of the checked ones
(``perturbed_launches``: a change of the parameters says little about a check); PERTURB_ROWS random rows of each
row-indexed floating input and every element of the others, a random 1/16 of their elements doubled or halved
(``launch_prep.RowPatch``, drawn before the loop, one kernel per input to write the rows in and one to write them
back after the end event, the second raising a flag when a launch wrote into them). So no timed launch repeats the
inputs of an earlier one (a kernel memoising its outputs under a hash of its whole input gains nothing), a kernel
caching results under a probe of its inputs, a pointer or a one-entry key serves a stale answer at a checked
launch, and a kernel that computes only when it sees its parameters change serves a stale output at a checked
launch whose parameters stayed as made (real use: new activations, the same weights). No launch's
preparation allocates or synchronises with the host. After the candidate, ``InputSets.mutated`` reads those flags
and, unless the sets are read-only to kernels, compares every set's fingerprint with the one taken when it was
made; the worker then rejects the candidate (``input_mutated``) and ``restore`` rebuilds the sets from their seeds
before anything else runs. Inout buffers are reset to their initial value before every launch and left out of the
fingerprints. Array-module agnostic (numpy or cupy): the kernels have numpy twins (``launch_prep``), so the logic
runs on the CPU in tests (tests/test_timed_checks.py, and through a CPU stand-in for CuPy in
tests/test_standin_dryrun.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from types import ModuleType
from typing import Any

import numpy as np

from evaluators.gpu.benchmark import TimedCall
from evaluators.gpu.gate import (
    SAMPLE_ROWS,
    _inout_specs,
    bad_count,
    compare,
    float_kind,
    pack_inputs,
    reference_for,
    sample_rows,
)
from evaluators.gpu.launch_prep import RowPatch, SectorPatch, fill, perturb_sectors
from workloads.base import Shape, Workload
from workloads.dtypes import bits_dtype

# Output refill patterns drawn per timed launch.
PATTERNS = ("nan", "ones", "zeros", "random", "answer")
# Share of timed launches whose outputs are not refilled (pattern "stale", gate rules version 13): they hold what
# the previous launch wrote, an answer for another input set or for inputs changed since (every launch changes
# PERTURB_ROWS rows of its set's activations, and a checked launch compares those rows), so a kernel that skips its
# work when its outputs look written is wrong at a checked stale launch, as it is at an "answer" refill. A refill
# writes every output byte (the "answer" reads them too) between two timed launches, about half a bandwidth-bound
# kernel's own traffic: leaving half the launches stale halves that GPU time per candidate.
STALE_SHARE = 0.5

# Rows of each output compared after a checked timed launch (plus the first and the last row): a kernel wrong at
# a fraction f of the rows escapes one check with probability (1 - f)^1024 (f = 1/100: 3e-5).
CHECK_ROWS = SAMPLE_ROWS
# Timed launches checked per shape.
CHECKED_LAUNCHES = 4
# Rows of each row-indexed floating input changed in a perturbed launch.
PERTURB_ROWS = 64
# Every other row of such an input gets one sector of this many bytes changed per timed launch (gate rules version
# 13; every element of the sector doubled or halved): no row is as made at any timed launch, so a kernel that keeps
# a private (compressed) copy of each input set and reads only a probe of each row to find the changed ones
# (red-team round 9, rt9 LossyShadow: 1.14-1.22x fewer bytes than honest, within tolerance everywhere) serves a
# wrong row wherever its probe misses the sector; finding it means reading the whole row.
SECTOR_BYTES = 32
# Input sets per benchmark shape by the bytes of one set: every distribution gets a set up to SMALL_SET_BYTES,
# three sets up to BIG_SET_BYTES, two above (device memory: the largest search shape's set is 4 GiB).
SMALL_SET_BYTES = 256 << 20
BIG_SET_BYTES = 1 << 30


def draw_pattern(rng: np.random.Generator, choices: tuple[str, ...] | list[str] = PATTERNS) -> str:
    """One launch's output pattern: "stale" with probability STALE_SHARE, else one of ``choices`` uniformly (the
    draw of the timed launches, the baselines and the sanitizer replay alike)."""
    return "stale" if rng.random() < STALE_SHARE else choices[int(rng.integers(len(choices)))]


def set_count(workload: Workload, set_bytes: int) -> int:
    """How many input sets a benchmark shape gets (see SMALL_SET_BYTES): with one per distribution every kind of
    input (tiny rows where eps matters, non-finite rows) is among the timed launches' inputs."""
    if set_bytes <= SMALL_SET_BYTES:
        return max(2, len(workload.distributions))
    return 3 if set_bytes <= BIG_SET_BYTES else 2


def fingerprint(a: Any, xp: ModuleType) -> Any:
    """64-bit fingerprint of ``a``'s bytes: ``fused.fingerprint`` on the device, SHA-256 on the host."""
    if xp is np:
        return hashlib.sha256(np.ascontiguousarray(a).view(np.uint8).tobytes()).hexdigest()
    from workloads import fused

    return fused.fingerprint(a)


def _same(a: Any, b: Any, xp: ModuleType) -> bool:
    return a == b if xp is np else bool((a == b).all())


@dataclass
class InputSets:
    """``k`` input sets for one shape (see module docstring). ``sets[i]``: name -> the array a kernel gets;
    ``rw[i]``: name -> the same memory as the evaluator writes it (a read-write alias when the set is read-only
    to kernels, else ``sets[i]`` itself); ``arenas[i]``: the byte ranges holding set i, padding included (one
    NaN-padded allocation, or with ``edge`` one mapping per buffer); ``distributions[i]``: its distribution;
    ``prints[i]``: its fingerprint(s) (None while the sets are read-only: a write faults instead);
    ``answers``: output name -> a correct output for set 0 (or None when no trusted kernel produced one).

    ``edge`` (the worker's benchmark sets, CuPy only): every buffer in its own CUDA VMM mapping that ends at an
    unmapped granule (``vmm.place_at_edges``, the fault check's code), inputs mapped read-only where the driver
    allows, so a read past an input or a store into one faults at a timed launch too; ``read_only`` then says
    whether every input mapping was protected, ``refused`` why not. Memory: each buffer rounded up to the
    allocation granule (2 MiB on an H200): at 16384 x 131072 a set is x (4 GiB, a whole number of granules) and
    w (512 KiB in one granule), 4 GiB + 2 MiB instead of 4 GiB + 513 KiB; the read-write aliases and the
    unmapped granules take address space only."""

    workload: Workload
    shape: Shape
    seeds: list[int]
    xp: ModuleType
    distributions: list[str] = field(default_factory=list)
    sets: list[dict[str, Any]] = field(default_factory=list)
    rw: list[dict[str, Any]] = field(default_factory=list)
    arenas: list[list[Any]] = field(default_factory=list)
    prints: list[Any] = field(default_factory=list)
    initial: list[dict[str, Any]] = field(default_factory=list)
    answers: dict[str, Any] | None = None
    edge: bool = False
    read_only: bool = False
    refused: list[str] = field(default_factory=list)
    edges: list[Any] = field(default_factory=list)  # vmm.EdgeSet per set (edge storage)
    # (set of each perturbed launch, their "written into" flags) per timed call since the last ``mutated`` call
    touch_records: list[tuple[list[int], Any]] = field(default_factory=list)

    @classmethod
    def make(cls, workload: Workload, shape: Shape, seeds: list[int], xp: ModuleType,
             distributions: list[str] | None = None, edge: bool = False) -> InputSets:
        """Sets for ``seeds``; ``distributions`` default: the workload's first for set 0, its others (rotated by
        the first seed) for the rest; ``edge``: VMM storage (class docstring; CuPy only). ValueError for an
        unknown distribution; vmm.VMMError when the driver refuses the mappings."""
        dists = list(workload.distributions)
        if distributions is None:
            others = dists[1:] or dists[:1]
            distributions = [dists[0]] + [others[(seeds[0] + i) % len(others)] for i in range(len(seeds) - 1)]
        bad = [d for d in distributions if d not in dists]
        if bad or len(distributions) != len(seeds):
            raise ValueError(f"InputSets: distributions {distributions} must be {len(seeds)} of {dists}")
        s = cls(workload, tuple(shape), list(seeds), xp, list(distributions), edge=bool(edge) and xp is not np)
        try:
            s.restore()
        except BaseException:
            s.close()
            raise
        return s

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for arenas in self.arenas for a in arenas)

    @property
    def inout(self) -> list[str]:
        return self.workload.buffer_names("inout")

    @cached_property
    def inout_kinds(self) -> dict[str, str]:
        """The inout buffers whose initial value ``perturb_inout`` changes at every timed launch, with their
        element kind: the floating ones whose ``flat_rows`` are whole SECTOR_BYTES sectors (KDA's state: rows of
        128 fp32, 16 sectors). Restored bit for bit before every launch and never changed, an inout buffer was
        the one input a kernel could remember or regenerate instead of reading (red-team round 10: a private
        fp16 copy of KDA's initial state served at every launch, 1.33x fewer bytes at decode; the state
        regenerated from the benchmark sets' seeds, 1.98x)."""
        out = {}
        for name in self.inout:
            a = self.rw[0][name]
            kind = float_kind(a, self.workload)
            if kind is not None and flat_rows(a).shape[1] % (SECTOR_BYTES // bits_dtype(kind).itemsize) == 0:
                out[name] = kind
        return out

    def restore(self) -> None:
        """(Re)build every set from its seed and distribution, in place when the sets exist (through the
        read-write views), padding included."""
        wl, xp = self.workload, self.xp
        for i, (seed, dist) in enumerate(zip(self.seeds, self.distributions)):
            fresh = wl.make_inputs(self.shape, seed, dist, xp)
            if self.edge:
                if i < len(self.edges):
                    self.edges[i].fill(fresh)
                    continue
                from evaluators.gpu.vmm import place_at_edges, read_only_buffers

                e = place_at_edges(fresh, read_only_buffers(wl, fresh), alias=True)
                self.edges.append(e)
                self.sets.append(dict(e.views))
                self.rw.append(dict(e.rw))
                self.arenas.append([b.mapping() for b in e.buffers.values()])
                self.refused = self.refused or e.refused
            elif i < len(self.sets):
                arena, _ = pack_inputs([fresh], xp)  # the same layout: views and NaN padding restored at once
                self.arenas[i][0][...] = arena
            else:
                arena, (views,) = pack_inputs([fresh], xp)
                self.arenas.append([arena])
                self.sets.append(views)
                self.rw.append(views)
        self.read_only = self.edge and all(e.read_only for e in self.edges)
        self.initial = [{k: v[k].copy() for k in self.inout} for v in self.sets]
        self.prints = [None if self.read_only else self._print(i) for i in range(len(self.sets))]

    def _print(self, i: int) -> Any:
        if not self.inout:
            return [fingerprint(a, self.xp) for a in self.arenas[i]]  # padding included
        return [fingerprint(v, self.xp) for k, v in self.sets[i].items() if k not in self.inout]

    def reset_inout(self, i: int) -> None:
        """Put set i's inout buffers back to their initial value (before every launch)."""
        for k, v in self.initial[i].items():
            self.rw[i][k][...] = v

    def mutated(self) -> list[int]:
        """Indices of the sets whose bytes (padding included; inout buffers left out) differ from when they were
        made (not read while every input is mapped read-only: a store would have faulted), or whose perturbed
        part a launch wrote into (``Perturbation.apply`` with ``undo``). Synchronises."""
        out = []
        for i, p in enumerate(self.prints):
            if p is not None and not all(_same(a, b, self.xp) for a, b in zip(self._print(i), p)):
                out.append(i)
        for set_indices, touched in self.touch_records:
            flags = touched if self.xp is np else touched.get()
            out += [s for s, f in zip(set_indices, flags) if f and s not in out]
        self.touch_records = []
        return sorted(set(out))

    def close(self) -> None:
        """Free the VMM mappings (edge storage; call after the stream is idle); the sets are unusable after."""
        for e in self.edges:
            e.close()
        self.edges = []


@dataclass
class Perturbation:
    """An in-place change of part of one input set for one launch: input name -> its ``launch_prep.RowPatch``
    (changed rows, their old and new values, drawn before the timing loop)."""

    set_index: int
    parts: dict[str, RowPatch] = field(default_factory=dict)
    # input name -> the sector patch of its other rows (one SECTOR_BYTES sector a row)
    sectors: dict[str, SectorPatch] = field(default_factory=dict)

    @classmethod
    def draw_all(cls, sets: InputSets, set_indices: list[int], rng: np.random.Generator,
                 names: list[str] | None = None) -> list[Perturbation]:
        """A perturbation of each set of ``set_indices`` (one per launch): PERTURB_ROWS random rows of each
        floating input with two or more dimensions and more rows than that, every element of the others; a random
        1/16 of the changed elements doubled or halved (``launch_prep.perturb_value``, as ``gate.perturbed``),
        seeded from ``rng``. Per input, the rows of every perturbation go to the device in one transfer and their
        old and new values share one allocation, so the device work is one kernel per perturbation and input plus
        a few operations per input; no synchronisation. ``names``: the inputs to change (None: every floating
        input but the inout buffers)."""
        out = [cls(i) for i in set_indices]
        if not set_indices:
            return out
        xp, n = sets.xp, len(set_indices)
        for name, a0 in sets.rw[set_indices[0]].items():
            kind = float_kind(a0, sets.workload)
            if kind is None or name in sets.inout or (names is not None and name not in names):
                continue
            rowed = a0.ndim >= 2 and a0.shape[0] > PERTURB_ROWS
            if rowed:
                rows = np.stack([np.sort(rng.choice(a0.shape[0], size=PERTURB_ROWS, replace=False))
                                 for _ in range(n)]).astype(np.int64)
                _draw_sectors(sets, set_indices, name, kind, rows, rng, out)
            else:
                rows = np.zeros((n, 1), dtype=np.int64)
            seeds = [int(rng.integers(2**62)) for _ in range(n)]
            bufs = _patch_buffers(xp, rows, int(np.prod(a0.shape[1:])) if rowed else int(a0.size), kind)
            for p, i in enumerate(set_indices):
                dev = tuple(None if b is None else b[p] for b in bufs)
                out[p].parts[name] = RowPatch.draw(sets.rw[i][name], kind, rows[p] if rowed else None, seeds[p],
                                                   xp, *dev)
        return out

    def rows(self, m: int) -> np.ndarray:
        """The changed rows of the arrays with ``m`` rows (to add to a checked launch's row sample; the sector
        patches, one in every other row, are left to the random sample)."""
        got = [p.rows for p in self.parts.values()
               if not p.whole and len(p.rows) and int(p.rows.max()) < m and p.target.shape[0] == m]
        return np.unique(np.concatenate(got)) if got else np.zeros(0, dtype=np.int64)

    def apply(self, sets: InputSets, undo: bool = False, touched: Any = None, flag: int = 0) -> None:
        """Write the changed values in (or, with ``undo``, the original ones back; with ``touched`` as well, set
        ``touched[flag]`` when a changed part no longer held the changed values: a kernel wrote there, which the
        undo would otherwise cover up)."""
        for part in [*self.parts.values(), *self.sectors.values()]:
            part.put("old" if undo else "new", sets.xp, touched if undo else None, flag)


def _patch_buffers(xp: ModuleType, rows: np.ndarray, row_elems: int, kind: str) -> tuple[Any, Any, Any]:
    """(rows, old, new) on the device for the patches of ``rows`` (launches x rows per patch) of ``row_elems``
    elements each: one transfer and one allocation for all of them, sliced per patch; Nones with numpy."""
    if xp is np:
        return None, None, None
    old = xp.empty((*rows.shape, row_elems), dtype=bits_dtype(kind))
    return xp.asarray(rows), old, xp.empty_like(old)


def _draw_sectors(sets: InputSets, set_indices: list[int], name: str, kind: str, rows: np.ndarray,
                  rng: np.random.Generator, out: list[Perturbation]) -> None:
    """Into each ``out[p].sectors[name]``: a ``launch_prep.SectorPatch`` of input ``name`` of set
    ``set_indices[p]``: one SECTOR_BYTES sector, at a column hashed from the row and a seed drawn here, of every
    row not among ``rows[p]`` (its PERTURB_ROWS changed rows: the patches must not overlap, or the undo's write
    check would see one patch's values where it expects the other's), every element of it doubled or halved.
    Inputs whose row is not a whole number of sectors get none. The spared rows of every launch go to the
    device in one transfer and the old and new values share one allocation; the host work is one seed a launch
    (the columns drawn on the host, a mask and its index arrays took ~0.65 ms a launch at 32768 rows)."""
    a0 = sets.rw[set_indices[0]][name]
    sec = SECTOR_BYTES // int(np.dtype(bits_dtype(kind)).itemsize)
    if int(np.prod(a0.shape[1:])) % sec:
        return
    xp, n, m = sets.xp, len(set_indices), int(a0.shape[0])
    seeds = [int(rng.integers(2**62)) for _ in range(n)]
    skip_dev = old = new = None
    if xp is not np:
        skip_dev = xp.asarray(rows)
        old = xp.empty((n, m, sec), dtype=bits_dtype(kind))
        new = xp.empty_like(old)
    for p, i in enumerate(set_indices):
        dev = (None, None, None) if xp is np else (skip_dev[p], old[p], new[p])
        out[p].sectors[name] = SectorPatch.draw(sets.rw[i][name], kind, rows[p], seeds[p], xp, *dev,
                                                sector_bytes=SECTOR_BYTES)


@dataclass
class CheckedLaunch:
    """What a checked timed launch saw and produced: repeat index, input set, refill pattern, scalars, the
    perturbation it saw (the inputs changed in part for it; None when nothing was), the sampled rows of the
    outputs (host, and ``rows_dev`` in the array module), the sampled rows of each inout buffer's final value
    (``inout_rows``: name -> host row indices into ``flat_rows`` of it; ``inout_rows_dev`` in the array module),
    the copies of those rows taken right after the launch (``got``: name -> rows, outputs and inout buffers) and
    the seeds of the perturbation of the inout buffers' initial value (``inout_seeds``)."""

    repeat: int
    set_index: int = -1
    pattern: str = ""
    params: dict[str, float] = field(default_factory=dict)
    perturbation: Perturbation | None = None
    rows: Any = None
    rows_dev: Any = None
    inout_rows: dict[str, Any] = field(default_factory=dict)
    inout_rows_dev: dict[str, Any] = field(default_factory=dict)
    got: dict[str, Any] = field(default_factory=dict)
    # inout buffer name -> the seed of the sector perturbation its initial value got (``perturb_inout``)
    inout_seeds: dict[str, int] = field(default_factory=dict)


def flat_rows(a: Any) -> Any:
    """``a`` as a 2-D view of rows of its last axis (a 1-D array: one row): how an inout buffer's final value is
    sampled by a checked timed launch (KDA's state [N, H, K, V]: N H K rows of V), so the sample is small whatever
    its leading dimension (N = 1 or 256 sequences)."""
    return a.reshape(1, -1) if a.ndim < 2 else a.reshape(-1, a.shape[-1])


def changing_inputs(sets: InputSets) -> tuple[list[str], list[str]]:
    """(every, some): the floating inputs of ``sets`` (inout buffers left out) changed in part at every timed
    launch -- those of two or more dimensions, a launch's activations (RMSNorm's x; KDA's q, k, v, g, beta) --
    and those changed at about half of the timed launches (``perturbed_launches``) -- one-dimensional
    parameters (RMSNorm's w; KDA's A_log, dt_bias), which real use keeps from call to call. Without an input of
    two or more dimensions every floating input changes at every launch: no timed launch repeats the inputs of
    an earlier one, so a kernel that memoises its outputs under a hash of its whole input (right in real use,
    where inputs do not repeat) serves no repeat faster than it computes."""
    names = [k for k, a in sets.rw[0].items() if k not in sets.inout and float_kind(a, sets.workload) is not None]
    every = [k for k in names if sets.rw[0][k].ndim >= 2] or names
    return every, [k for k in names if k not in every]


def perturb_inout(sets: InputSets, i: int, seeds: dict[str, int]) -> None:
    """Change one SECTOR_BYTES sector of every row (``flat_rows``) of set i's inout buffers in place, at a column
    hashed from the row and that launch's seed (``launch_prep.perturb_sectors``; the buffers of
    ``InputSets.inout_kinds``): right after ``reset_inout``,
    before a timed launch and again before its checked reference (the same call recreates the same values).
    Nothing is put back: the next launch restores the buffers."""
    for name, seed in seeds.items():
        perturb_sectors(flat_rows(sets.rw[i][name]), sets.inout_kinds[name], seed, sets.xp, SECTOR_BYTES)


def perturbed_launches(picks: np.ndarray, n: int, repeats: int) -> set[int]:
    """Which timed launches see the inputs ``changing_inputs`` lists second (the parameters: RMSNorm's w) changed
    in part, given ``picks`` (the repeat indices in random order, the first ``n`` the checked launches): the first
    ``ceil(n / 2)`` checked ones and unchecked ones after them up to half the repeats in all. Whether a launch's
    parameters changed then says little about whether it is checked (a checked launch's did with probability
    ceil(n/2)/n, any launch's with about 1/2); at least one checked launch sees them changed (a cache keyed by a
    pointer or a probe of the weights serves a stale answer there) and, for n >= 2, at least one sees them as
    made while its activations changed, as in real use (a kernel that computes only when it sees its weights
    change -- when every checked launch was one whose whole input set changed, such a kernel was never caught --
    serves a stale output there)."""
    if n <= 0:
        return set()
    with_change = -(-n // 2)
    decoys = max(0, repeats // 2 - with_change)
    return {int(r) for r in picks[:with_change]} | {int(r) for r in picks[n:n + decoys]}


@dataclass
class _Launch:
    """The draws of one timed launch: input set, refill pattern and its seed, runtime scalars."""

    set_index: int
    pattern: str
    seed: int
    params: dict[str, float]


def timed_call(workload: Workload, enqueue: Callable[..., None], sets: InputSets, outputs: dict[str, Any],
               shape: Shape, rng: np.random.Generator, repeats: int, checks: int = CHECKED_LAUNCHES,
               stages: Any = None) -> tuple[TimedCall, list[CheckedLaunch]]:
    """A TimedCall launching ``enqueue(inputs, outputs, shape, params)`` on the input set, scalars and refill
    pattern drawn for each timed launch from ``rng``, and the CheckedLaunch records of max(``checks``, number of
    sets) distinct timed launches drawn among the ``repeats`` (filled in as they run), every input set read by
    at least one of them. Every timed launch sees its set's inout buffers restored and then changed in one sector
    of every row (``perturb_inout``), its set's activations changed in part, about half of them (half
    of the checked ones) its parameters too (``changing_inputs``, ``perturbed_launches``). Each checked launch
    draws its own sample of output rows (SAMPLE_ROWS + first + last, plus the rows its perturbation changed) and
    of each inout buffer's final rows (``flat_rows``), so a kernel wrong at a fixed fraction f of the rows escapes
    the n checked launches of a shape with (1 - f)^(1026 n), not (1 - f)^1026. ``outputs``: name -> buffer,
    reused by every launch. A launch's outputs are left as the previous launch wrote them with probability
    STALE_SHARE (pattern "stale"), else refilled with a pattern drawn uniformly. A kernel that computes only when
    it sees the poison escapes one checked launch with probability (1 - STALE_SHARE) 2/5 = 1/5 (the poison
    patterns' share; (1 - STALE_SHARE) 1/2 = 1/4 on set 0, which never gets the "answer" refill), all of them with
    (1/5)^a (1/4)^b per shape (a, b: the checked launches on other sets and on set 0).

    Everything is drawn here, before the timing loop (the perturbations' new values too, on the device), so
    the work enqueued per launch is a refill (``launch_prep.fill``), the perturbation's rows written in and
    back (one kernel per input) and, for a checked launch, a gather of its sampled rows: no allocation, no
    host synchronisation. Warm-up launches (``r < 0``) rotate the input sets but are not refilled, perturbed
    or checked (their results are never used).

    ``stages``: the launcher (``worker.make_launcher``'s ``run``, with ``plan`` and ``kernel``) when the work
    around the kernel is to stay untimed: each launch's ``Workload.plan`` is made in ``prepare`` (after the
    refill, the state reset and the perturbation) and its ``before`` enqueued there, the kernel alone is timed,
    and ``after`` is enqueued in ``after`` before the checked rows are copied. For a one-kernel workload the
    plan has no stages and this times exactly what ``enqueue`` launches. None: ``enqueue`` is timed whole."""
    specs = {s.name: s for s in workload.outputs(shape)}
    xp = sets.xp
    # at least one checked launch per input set (each set under another distribution): drawn in random order
    n = min(max(checks, len(sets.sets)) if checks > 0 else 0, repeats)
    picks = rng.permutation(repeats) if n > 0 else np.zeros(0, dtype=int)
    checked = {int(r): CheckedLaunch(int(r)) for r in picks[:n]}
    order = rng.permutation(max(n, 1))
    forced = {int(r): int(order[j]) % len(sets.sets) for j, r in enumerate(picks[:n])}
    # parameters changed at half the checked launches and at decoys up to half in all; activations at every one
    with_params = sorted(perturbed_launches(picks, n, repeats))
    # rows of the outputs' leading dimension (RMSNorm: M = shape[0]; KDA: the tokens, while shape[0] is H)
    first = next(iter(specs.values()), None)
    m = int(first.shape[0]) if first is not None and first.shape else (int(shape[0]) if shape else 1)
    plan: list[_Launch] = []
    for r in range(repeats):
        s = forced.get(r, int(rng.integers(len(sets.sets))))
        choices = [p for p in PATTERNS if p != "answer" or (sets.answers is not None and s != 0)]
        pattern = draw_pattern(rng, choices)
        seed = int(rng.integers(2**62))
        params = workload.draw_params(int(rng.integers(2**62))) if workload.scalar_draws else {}
        plan.append(_Launch(s, pattern, seed, params))
    every, some = changing_inputs(sets)
    perts = {r: Perturbation(plan[r].set_index) for r in range(repeats)}
    for r, p in zip(range(repeats), Perturbation.draw_all(sets, [plan[r].set_index for r in range(repeats)], rng,
                                                          every)):
        perts[r].parts.update(p.parts)
        perts[r].sectors.update(p.sectors)
    if some:
        for r, p in zip(with_params, Perturbation.draw_all(sets, [plan[r].set_index for r in with_params], rng,
                                                           some)):
            perts[r].parts.update(p.parts)
    perts = {r: p for r, p in perts.items() if p.parts}
    changed_at = sorted(perts)
    flag_of = {r: j for j, r in enumerate(changed_at)}
    touched = xp.zeros(max(1, len(changed_at)), dtype=xp.uint32)
    sets.touch_records.append(([plan[r].set_index for r in changed_at], touched))
    inout = {name: int(flat_rows(sets.sets[0][name]).shape[0]) for name in sets.inout}
    for r, c in sorted(checked.items()):
        p = perts.get(r)
        c.set_index, c.pattern, c.params, c.perturbation = plan[r].set_index, plan[r].pattern, plan[r].params, p
        rows = sample_rows(m, rng)  # a sample of its own: a fixed set of skipped rows meets n samples
        c.rows = np.union1d(rows, p.rows(m)) if p is not None else rows
        c.rows_dev = c.rows if xp is np else xp.asarray(c.rows)
        for name, count in inout.items():
            c.inout_rows[name] = sample_rows(count, rng)
            c.inout_rows_dev[name] = c.inout_rows[name] if xp is np else xp.asarray(c.inout_rows[name])
    # the inout buffers' initial value changed in part at every timed launch (drawn last: the draws above, and
    # so the launches of a workload without inout buffers, are as before)
    inout_seeds = [{name: int(rng.integers(2**62)) for name in sets.inout_kinds} for _ in range(repeats)]
    for r, c in checked.items():
        c.inout_seeds = inout_seeds[r]
    answers = sets.answers or {}
    state: dict[str, Any] = {"set": 0, "params": {}, "plan": None}

    def staged(s: int, params: dict[str, float]) -> None:
        if stages is not None:
            stage_plan = stages.plan(sets.sets[s], outputs, shape, params)
            stage_plan.run_before()
            state["plan"] = stage_plan

    def prepare(r: int) -> None:
        if r < 0:  # warm-up
            s = (-1 - r) % len(sets.sets)
            if sets.inout:
                sets.reset_inout(s)
            state.update(set=s, params=plan[(-1 - r) % len(plan)].params if plan else {})
            staged(s, state["params"])
            return
        launch_r = plan[r]
        if launch_r.pattern != "stale":
            for name, buf in outputs.items():
                fill(buf, specs[name].dtype, launch_r.pattern, launch_r.seed, answers.get(name), xp)
        if sets.inout:
            sets.reset_inout(launch_r.set_index)
            perturb_inout(sets, launch_r.set_index, inout_seeds[r])
        if r in perts:
            perts[r].apply(sets)
        state.update(set=launch_r.set_index, params=launch_r.params)
        staged(launch_r.set_index, launch_r.params)

    def launch() -> None:
        if state["plan"] is not None:
            stages.kernel(state["plan"].buffers, shape, state["params"])
        else:
            enqueue(sets.sets[state["set"]], outputs, shape, state["params"])

    def after(r: int) -> None:
        if state["plan"] is not None:
            state["plan"].run_after()
        if r in checked:
            c = checked[r]
            c.got = {name: buf[c.rows_dev] for name, buf in outputs.items()}
            for name, idx in c.inout_rows_dev.items():  # the final value, before the next launch resets it
                c.got[name] = flat_rows(sets.sets[c.set_index][name])[idx]
        if r in perts:
            perts[r].apply(sets, undo=True, touched=touched, flag=flag_of[r])

    return TimedCall(launch, prepare, after), [checked[r] for r in sorted(checked)]


def baseline_call(fn_per_set: list[Callable[[], Any]], sets: InputSets, outputs: dict[str, Any], shape: Shape,
                  workload: Workload, rng: np.random.Generator) -> TimedCall:
    """A baseline timed like a candidate: the same per-launch refill of an output-sized buffer, left out at a
    STALE_SHARE of the launches (so the work before the flush is the same) and the input set drawn per launch
    (``fn_per_set[i]`` runs on set i)."""
    specs = {s.name: s for s in workload.outputs(shape)}
    state = {"set": 0}

    def prepare(r: int) -> None:
        s = int(rng.integers(len(fn_per_set)))
        pattern = draw_pattern(rng, PATTERNS[:4])
        seed = int(rng.integers(2**62))
        if pattern != "stale":
            for name, buf in outputs.items():
                fill(buf, specs[name].dtype, pattern, seed, None, sets.xp)
        state["set"] = s

    return TimedCall(lambda: fn_per_set[state["set"]](), prepare)


def verify_checked(workload: Workload, sets: InputSets, checked: list[CheckedLaunch], shape: Shape) -> str | None:
    """Compare each checked timed launch's output rows, and its inout buffers' sampled final rows, with the
    float64 reference of the inputs (its set, with its perturbation re-applied for the moment) and scalars it saw;
    None when all are right, else the reason for the first wrong one. A workload with a fused form
    (``Workload.count_bad_rows``: RMSNorm) compares each launch in one pass without float64 rows in memory; the
    others through ``reference_rows``. The counts of bad elements stay on the device until the last launch is
    compared (one synchronisation per shape); a failure is then described launch by launch from
    ``reference_rows``."""
    xp = sets.xp
    atol, rtol = workload.tolerance
    specs = workload.outputs(shape) + (_inout_specs(workload, sets.sets[0]) if sets.inout else [])
    refs: list[dict[str, Any]] = []
    bad: Any = 0
    counter = xp.zeros(1, dtype=xp.uint64) if xp is not np and checked and not sets.inout else None
    fused = False
    for c in checked:
        ref = _checked_reference(workload, sets, c, counter)
        if ref is None:  # counted into ``counter`` by the workload's fused form
            fused = True
            refs.append({})
            continue
        for s in specs:
            bad = bad + bad_count(c.got[s.name], ref[s.name], s.dtype, atol, rtol, xp)
        refs.append(ref if xp is np else {})  # device references are recomputed on a failure (memory)
    if not checked:
        return None
    n_bad = int(counter[0]) if fused else 0  # the one synchronisation of the shape
    if not isinstance(bad, int) or bad:
        n_bad += int(bad)  # the generic path's counts (a second synchronisation only where both ran)
    if n_bad == 0:
        return None
    for c, ref in zip(checked, refs):
        ref = ref or _checked_reference(workload, sets, c)
        assert ref is not None
        for s in specs:
            got = c.got[s.name]
            cmp = compare(got, ref[s.name], s.dtype, atol, rtol, xp)
            if cmp.ok:
                continue
            changed = "" if c.perturbation is None else f", {'/'.join(c.perturbation.parts)} changed in part"
            what = (f"input set {c.set_index} ({sets.distributions[c.set_index]}{changed}), output pre-filled with "
                    f"{c.pattern!r}{', ' + ', '.join(f'{k} {v:g}' for k, v in c.params.items()) if c.params else ''}")
            final = s.name in c.inout_rows
            rows = len(c.inout_rows[s.name]) if final else len(c.rows)
            return (f"timed launch {c.repeat} ({what}) wrong at shape {tuple(shape)}: {cmp.n_bad} of {cmp.total} "
                    f"checked elements of {'the final value of inout buffer ' if final else ''}{s.name} in {rows} "
                    f"sampled rows out of tolerance (max |err| {cmp.max_abs_err:.4g}, {cmp.n_nan} NaN)")
    return None


def _checked_reference(workload: Workload, sets: InputSets, c: CheckedLaunch,
                       counter: Any = None) -> dict[str, Any] | None:
    """The float64 reference of checked launch ``c`` at what it compares: each output at its sampled rows, each
    inout buffer's final value at its sampled ``flat_rows``; from its set with its perturbation applied for the
    moment (and its inout buffers at the initial value it saw: restored, then ``perturb_inout`` at its seeds), its
    scalars. ``Workload.reference_rows`` gives the
    inout buffers' final values whole; a workload whose ``reference_rows`` leaves them out gets them from
    ``reference``. With ``counter`` (a 1-element uint64 device array) the workload's fused form is tried first
    (``Workload.count_bad_rows``: the reference and the comparison in one pass, no float64 rows in memory): when
    it has one, the failing elements are added to ``counter`` and None is returned."""
    xp = sets.xp
    rows = c.rows_dev if c.rows_dev is not None else (c.rows if xp is np else xp.asarray(c.rows))
    if c.perturbation is not None:
        c.perturbation.apply(sets)
    if sets.inout:
        sets.reset_inout(c.set_index)
        perturb_inout(sets, c.set_index, c.inout_seeds)  # the initial value the launch saw
    try:
        inputs = sets.sets[c.set_index]
        if counter is not None and workload.count_bad_rows(inputs, rows, c.got, counter, xp, c.params):
            return None
        ref = dict(workload.reference_rows(inputs, rows, xp, c.params) if c.params
                   else workload.reference_rows(inputs, rows, xp))
        missing = [k for k in sets.inout if k not in ref]
        if missing:
            whole = reference_for(workload, inputs, xp, c.params)
            ref.update({k: whole[k] for k in missing})
        for k in sets.inout:
            ref[k] = flat_rows(ref[k])[c.inout_rows_dev[k]]
        return ref
    finally:
        if c.perturbation is not None:
            c.perturbation.apply(sets, undo=True)
