"""Benchmark inputs and checked timed launches: a timed launch must look like any other and may be checked.

Per benchmarked shape the worker keeps ``InputSets``: ``k`` input sets of the same shape at different addresses
(each in its own allocation with NaN padding around every buffer, ``gate.pack_inputs``): set 0 under the
workload's first distribution (``normal``), the others under its other distributions (``tiny``, ``nonfinite``...,
rotated by seed), a fingerprint of each (``fused.fingerprint``) and the seed that made it (to restore it).
``timed_call`` wraps a kernel launch in a ``benchmark.TimedCall`` whose untimed ``prepare`` draws, for every
launch, the input set, the runtime scalars (``Workload.draw_params``: eps) and the pattern the outputs are
refilled with (NaN poison, all-ones poison, zeros, random finite values, or a correct answer for set 0 when the
launch reads another set). CHECKED_LAUNCHES launches, drawn at random among the timed ones, are checked: their
output rows at a random sample (plus the first and last row) are copied aside right after the end event and
compared with the float64 reference for the inputs and scalars they saw (``verify_checked``). About half of all
timed launches, among them half of the checked ones (``perturbed_launches``), see their input set changed in
place in part for that launch only (``gate.perturbed`` on PERTURB_ROWS random rows of each row-indexed floating
input and on every other floating input, undone after the end event): a kernel caching results under a probe of
its inputs, a pointer or a one-entry key serves a stale answer at a perturbed checked launch, and a kernel that
computes only when it sees such a change serves a stale output at an unperturbed one. After the candidate, ``InputSets.mutated``
compares every set's fingerprint with the one taken when it was made; the worker then rejects the candidate
(``input_mutated``) and ``restore`` rebuilds the sets from their seeds before anything else runs. Inout buffers
are reset to their initial value before every launch and left out of the fingerprints. Array-module agnostic
(numpy or cupy) except the fused fills and fingerprints, which have numpy equivalents here so the logic runs on
the CPU in tests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from evaluators.gpu.benchmark import TimedCall
from evaluators.gpu.gate import (
    SAMPLE_ROWS,
    compare,
    finite_fill,
    float_kind,
    pack_inputs,
    perturbed,
    poison_bits,
    sample_rows,
    within_tolerance,
)
from workloads.base import Shape, Workload
from workloads.dtypes import bits_dtype

# Output refill patterns drawn per timed launch.
PATTERNS = ("nan", "ones", "zeros", "random", "answer")
# Rows of each output compared after a checked timed launch (plus the first and the last row): a kernel wrong at
# a fraction f of the rows escapes one check with probability (1 - f)^1024 (f = 1/100: 3e-5).
CHECK_ROWS = SAMPLE_ROWS
# Timed launches checked per shape.
CHECKED_LAUNCHES = 4
# Rows of each row-indexed floating input changed in a perturbed launch.
PERTURB_ROWS = 64
# Input sets per benchmark shape by the bytes of one set: every distribution gets a set up to SMALL_SET_BYTES,
# three sets up to BIG_SET_BYTES, two above (device memory: the largest search shape's set is 4 GiB).
SMALL_SET_BYTES = 256 << 20
BIG_SET_BYTES = 1 << 30


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
    """``k`` input sets for one shape (see module docstring). ``sets[i]``: name -> array; ``arenas[i]``: the
    allocation holding set i; ``distributions[i]``: its distribution; ``prints[i]``: its fingerprint(s);
    ``answers``: output name -> a correct output for set 0 (or None when no trusted kernel produced one)."""

    workload: Workload
    shape: Shape
    seeds: list[int]
    xp: ModuleType
    distributions: list[str] = field(default_factory=list)
    sets: list[dict[str, Any]] = field(default_factory=list)
    arenas: list[Any] = field(default_factory=list)
    prints: list[Any] = field(default_factory=list)
    initial: list[dict[str, Any]] = field(default_factory=list)
    answers: dict[str, Any] | None = None
    # (set, untouched flag) of each perturbed launch since the last ``mutated`` call
    untouched_flags: list[tuple[int, Any]] = field(default_factory=list)

    @classmethod
    def make(cls, workload: Workload, shape: Shape, seeds: list[int], xp: ModuleType,
             distributions: list[str] | None = None) -> InputSets:
        """Sets for ``seeds``; ``distributions`` default: the workload's first for set 0, its others (rotated by
        the first seed) for the rest. ValueError for an unknown distribution."""
        dists = list(workload.distributions)
        if distributions is None:
            others = dists[1:] or dists[:1]
            distributions = [dists[0]] + [others[(seeds[0] + i) % len(others)] for i in range(len(seeds) - 1)]
        bad = [d for d in distributions if d not in dists]
        if bad or len(distributions) != len(seeds):
            raise ValueError(f"InputSets: distributions {distributions} must be {len(seeds)} of {dists}")
        s = cls(workload, tuple(shape), list(seeds), xp, list(distributions))
        s.restore()
        return s

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arenas)

    @property
    def inout(self) -> list[str]:
        return self.workload.buffer_names("inout")

    def restore(self) -> None:
        """(Re)build every set from its seed and distribution, in place when the arenas exist."""
        wl, xp = self.workload, self.xp
        for i, (seed, dist) in enumerate(zip(self.seeds, self.distributions)):
            fresh = wl.make_inputs(self.shape, seed, dist, xp)
            if i < len(self.sets):
                arena, _ = pack_inputs([fresh], xp)  # the same layout: views and NaN padding restored at once
                self.arenas[i][...] = arena
            else:
                arena, (views,) = pack_inputs([fresh], xp)
                self.arenas.append(arena)
                self.sets.append(views)
        self.initial = [{k: v[k].copy() for k in self.inout} for v in self.sets]
        self.prints = [self._print(i) for i in range(len(self.sets))]

    def _print(self, i: int) -> Any:
        if not self.inout:
            return fingerprint(self.arenas[i], self.xp)  # padding included
        return [fingerprint(v, self.xp) for k, v in self.sets[i].items() if k not in self.inout]

    def reset_inout(self, i: int) -> None:
        """Put set i's inout buffers back to their initial value (before every launch)."""
        for k, v in self.initial[i].items():
            self.sets[i][k][...] = v

    def mutated(self) -> list[int]:
        """Indices of the sets whose bytes (padding included; inout buffers left out) differ from when they were
        made, or whose perturbed part a launch wrote into (``Perturbation.untouched``)."""
        out = []
        for i, p in enumerate(self.prints):
            now = self._print(i)
            same = all(_same(a, b, self.xp) for a, b in zip(now, p)) if isinstance(p, list) else _same(now, p, self.xp)
            if not same:
                out.append(i)
        for i, ok in self.untouched_flags:
            if i not in out and not bool(ok):
                out.append(i)
        self.untouched_flags = []
        return sorted(out)


@dataclass
class Perturbation:
    """An in-place change of part of one input set for one launch: per input name, (rows or None for the whole
    array, the changed values, the original values)."""

    set_index: int
    parts: dict[str, tuple[Any, Any, Any]] = field(default_factory=dict)

    @classmethod
    def draw(cls, sets: InputSets, i: int, rng: np.random.Generator) -> Perturbation:
        """A perturbation of set i: PERTURB_ROWS random rows of each floating input with two or more dimensions,
        every element of the others, through ``gate.perturbed`` (seeded from ``rng``)."""
        xp = sets.xp
        p = cls(i)
        for name, a in sets.sets[i].items():
            kind = float_kind(a, sets.workload)
            if kind is None or name in sets.inout:
                continue
            seed = int(rng.integers(2**62))
            if a.ndim >= 2 and a.shape[0] > PERTURB_ROWS:
                rows = np.sort(rng.choice(a.shape[0], size=PERTURB_ROWS, replace=False))
                idx = rows if xp is np else xp.asarray(rows)
                old = a[idx]
                p.parts[name] = (rows, perturbed(old, kind, seed, xp), old)
            else:
                p.parts[name] = (None, perturbed(a, kind, seed, xp), a.copy())
        return p

    def rows(self, m: int) -> np.ndarray:
        """The changed rows of the arrays with ``m`` rows (to add to a checked launch's row sample)."""
        got = [r for r, _, _ in self.parts.values() if r is not None and len(r) and int(r.max()) < m]
        return np.unique(np.concatenate(got)) if got else np.zeros(0, dtype=np.int64)

    def apply(self, sets: InputSets, undo: bool = False) -> None:
        """Write the changed values in (or, with ``undo``, the original ones back)."""
        a_set = sets.sets[self.set_index]
        for name, (rows, new, old) in self.parts.items():
            value = old if undo else new
            if rows is None:
                a_set[name][...] = value
            else:
                a_set[name][rows if sets.xp is np else sets.xp.asarray(rows)] = value

    def untouched(self, sets: InputSets) -> Any:
        """Whether the changed parts still hold the changed values (a kernel that wrote there would otherwise be
        covered up by the undo): a Python bool on the host, a 0-d boolean device array on the GPU (no sync)."""
        xp = sets.xp
        a_set = sets.sets[self.set_index]
        flags = []
        for name, (rows, new, _) in self.parts.items():
            cur = a_set[name] if rows is None else a_set[name][rows if xp is np else xp.asarray(rows)]
            flags.append((cur.view(np.uint8) == new.view(np.uint8)).all() if xp is not np
                         else bool(np.array_equal(cur.view(np.uint8), new.view(np.uint8))))
        if xp is np:
            return all(flags)
        out = xp.ones((), dtype=bool)
        for f in flags:
            out &= f
        return out


def refill(out: Any, dtype: str, pattern: str, seed: int, answer: Any | None, xp: ModuleType) -> None:
    """Overwrite output ``out`` in place with ``pattern`` (PATTERNS; "answer" copies ``answer``)."""
    bits = out.view(bits_dtype(dtype))
    if pattern == "nan":
        bits.fill(poison_bits(dtype, 0))
    elif pattern == "ones":
        bits.fill(poison_bits(dtype, 1))
    elif pattern == "zeros":
        bits.fill(0)
    elif pattern == "answer" and answer is not None:
        out[...] = answer
    elif xp is np:
        out.reshape(-1)[...] = finite_fill(out.size, dtype, seed | 1, xp)
    else:
        from workloads import fused

        fused.fill_random_finite(out, dtype, seed)


@dataclass
class CheckedLaunch:
    """What a checked timed launch saw and produced: repeat index, input set, refill pattern, scalars, the
    perturbation it saw (None: the set as made), the sampled rows and the copies of the output rows taken right
    after it."""

    repeat: int
    set_index: int = -1
    pattern: str = ""
    params: dict[str, float] = field(default_factory=dict)
    perturbation: Perturbation | None = None
    rows: Any = None
    got: dict[str, Any] = field(default_factory=dict)


def perturbed_launches(picks: np.ndarray, n: int, repeats: int) -> set[int]:
    """Which timed launches see their input set perturbed, given ``picks`` (the repeat indices in random order,
    the first ``n`` the checked launches): the first ``ceil(n / 2)`` checked ones and unchecked ones after them up
    to half the repeats in all. Whether a launch is perturbed then says little about whether it is checked (a
    checked launch is perturbed with probability ceil(n/2)/n, any launch with about 1/2); at least one checked
    launch sees its set changed in part (a cache keyed by a pointer or a content probe serves a stale answer
    there) and, for n >= 2, at least one sees it unchanged (a kernel that computes only when it sees a change --
    when every checked launch was a perturbed one, such a kernel was never caught -- serves a stale output
    there)."""
    if n <= 0:
        return set()
    with_change = -(-n // 2)
    decoys = max(0, repeats // 2 - with_change)
    return {int(r) for r in picks[:with_change]} | {int(r) for r in picks[n:n + decoys]}


def timed_call(workload: Workload, enqueue: Callable[..., None], sets: InputSets, outputs: dict[str, Any],
               shape: Shape, rng: np.random.Generator, repeats: int, checks: int = CHECKED_LAUNCHES
               ) -> tuple[TimedCall, list[CheckedLaunch]]:
    """A TimedCall launching ``enqueue(inputs, outputs, shape, params)`` on the input set, scalars and refill
    pattern drawn per launch from ``rng`` (warm-up launches included), and the CheckedLaunch records of
    max(``checks``, number of sets) distinct timed launches drawn among the ``repeats`` (filled in as they run),
    every input set read by at least one of them. Half of the checked launches and about half of all timed
    launches see a perturbed input set (module docstring, ``perturbed_launches``). ``outputs``: name -> buffer, reused by every launch. A
    kernel that computes only when it sees the poison escapes one checked launch with probability 2/5 (the
    poison patterns' share), all of them with (2/5)^checks per shape."""
    specs = {s.name: s for s in workload.outputs(shape)}
    xp = sets.xp
    state: dict[str, Any] = {"set": 0, "params": {}, "perturbation": None}
    # at least one checked launch per input set (each set under another distribution): drawn in random order
    n = min(max(checks, len(sets.sets)) if checks > 0 else 0, repeats)
    picks = rng.permutation(repeats) if n > 0 else np.zeros(0, dtype=int)
    checked = {int(r): CheckedLaunch(int(r)) for r in picks[:n]}
    order = rng.permutation(max(n, 1))
    forced = {int(r): int(order[j]) % len(sets.sets) for j, r in enumerate(picks[:n])}
    perturbed_at = perturbed_launches(picks, n, repeats)
    rows = sample_rows(int(shape[0]) if shape else 1, rng)
    m = int(shape[0]) if shape else 1

    def prepare(r: int) -> None:
        s = int(rng.integers(len(sets.sets)))
        s = forced.get(r, s)
        choices = [p for p in PATTERNS if p != "answer" or (sets.answers is not None and s != 0)]
        pattern = choices[int(rng.integers(len(choices)))]
        seed = int(rng.integers(2**62))
        params = workload.draw_params(int(rng.integers(2**62))) if workload.scalar_draws else {}
        for name, buf in outputs.items():
            refill(buf, specs[name].dtype, pattern, seed, (sets.answers or {}).get(name), xp)
        if sets.inout:
            sets.reset_inout(s)
        pert = Perturbation.draw(sets, s, rng) if r in perturbed_at else None
        if pert is not None:
            pert.apply(sets)
        state.update(set=s, params=params, perturbation=pert)
        if r in checked:
            c = checked[r]
            c.set_index, c.pattern, c.params, c.perturbation = s, pattern, params, pert
            c.rows = np.union1d(rows, pert.rows(m)) if pert is not None else rows

    def launch() -> None:
        enqueue(sets.sets[state["set"]], outputs, shape, state["params"])

    def after(r: int) -> None:
        if r in checked:
            c = checked[r]
            idx = c.rows if xp is np else xp.asarray(c.rows)
            c.got = {name: buf[idx] for name, buf in outputs.items()}
        pert = state["perturbation"]
        if pert is not None:
            sets.untouched_flags.append((pert.set_index, pert.untouched(sets)))
            pert.apply(sets, undo=True)
            state["perturbation"] = None

    return TimedCall(launch, prepare, after), [checked[r] for r in sorted(checked)]


def baseline_call(fn_per_set: list[Callable[[], Any]], sets: InputSets, outputs: dict[str, Any], shape: Shape,
                  workload: Workload, rng: np.random.Generator) -> TimedCall:
    """A baseline timed like a candidate: the same per-launch refill of an output-sized buffer (so the work
    before the flush is the same) and the input set drawn per launch (``fn_per_set[i]`` runs on set i)."""
    specs = {s.name: s for s in workload.outputs(shape)}
    state = {"set": 0}

    def prepare(r: int) -> None:
        s = int(rng.integers(len(fn_per_set)))
        pattern = PATTERNS[int(rng.integers(4))]
        seed = int(rng.integers(2**62))
        for name, buf in outputs.items():
            refill(buf, specs[name].dtype, pattern, seed, None, sets.xp)
        state["set"] = s

    return TimedCall(lambda: fn_per_set[state["set"]](), prepare)


def verify_checked(workload: Workload, sets: InputSets, checked: list[CheckedLaunch], shape: Shape) -> str | None:
    """Compare each checked timed launch's output rows with the float64 reference of the inputs (its set, with
    its perturbation re-applied for the moment) and scalars it saw; None when all are right, else the reason for
    the first wrong one."""
    xp = sets.xp
    atol, rtol = workload.tolerance
    for c in checked:
        rows = c.rows if xp is np else xp.asarray(c.rows)
        if c.perturbation is not None:
            c.perturbation.apply(sets)
        if sets.inout:
            sets.reset_inout(c.set_index)
        try:
            inputs = sets.sets[c.set_index]
            ref = (workload.reference_rows(inputs, rows, xp, c.params) if c.params
                   else workload.reference_rows(inputs, rows, xp))
        finally:
            if c.perturbation is not None:
                c.perturbation.apply(sets, undo=True)
        for s in workload.outputs(shape):
            got = c.got[s.name]
            if within_tolerance(got, ref[s.name], s.dtype, atol, rtol, xp):
                continue
            cmp = compare(got, ref[s.name], s.dtype, atol, rtol, xp)
            what = (f"input set {c.set_index} ({sets.distributions[c.set_index]}"
                    f"{', changed in part' if c.perturbation is not None else ''}), output pre-filled with "
                    f"{c.pattern!r}{', ' + ', '.join(f'{k} {v:g}' for k, v in c.params.items()) if c.params else ''}")
            return (f"timed launch {c.repeat} ({what}) wrong at shape {tuple(shape)}: {cmp.n_bad} of {cmp.total} "
                    f"checked elements of {s.name} in {len(c.rows)} sampled rows out of tolerance (max |err| "
                    f"{cmp.max_abs_err:.4g}, {cmp.n_nan} NaN)")
    return None
