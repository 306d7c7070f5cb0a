"""Benchmark inputs and checked timed launches: a timed launch must look like any other and may be checked.

Per benchmarked shape the worker keeps ``InputSets``: ``k`` input sets of the same shape at different addresses
(each in its own allocation with NaN padding around every buffer, ``gate.pack_inputs``), a 64-bit fingerprint of
each (``fused.fingerprint``) and the seed that made it (to restore it). ``timed_call`` wraps a kernel launch in a
``benchmark.TimedCall`` whose untimed ``prepare`` draws, for every launch, the input set and the pattern the
outputs are refilled with: NaN poison, all-ones poison, zeros, random finite values, or a correct answer for
another input set (when the sets hold one). CHECKED_LAUNCHES launches, drawn at random among the timed ones, are checked: their
output rows at a random sample (plus the first and last row) are copied aside right after its end event and
compared with the float64 reference for the input set it saw (``verify_checked``). After the candidate,
``InputSets.mutated`` compares every set's fingerprint with the one taken when it was made; the worker then
rejects the candidate (``input_mutated``) and ``restore`` rebuilds the sets from their seeds before anything
else runs. Array-module agnostic (numpy or cupy) except the fused fills and fingerprints, which have numpy
equivalents here so the logic runs on the CPU in tests.
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
    pack_inputs,
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
    allocation holding set i; ``prints[i]``: its fingerprint; ``answers``: output name -> a correct output for
    set 0 (or None when no trusted kernel produced one)."""

    workload: Workload
    shape: Shape
    seeds: list[int]
    xp: ModuleType
    sets: list[dict[str, Any]] = field(default_factory=list)
    arenas: list[Any] = field(default_factory=list)
    prints: list[Any] = field(default_factory=list)
    answers: dict[str, Any] | None = None

    @classmethod
    def make(cls, workload: Workload, shape: Shape, seeds: list[int], xp: ModuleType) -> InputSets:
        s = cls(workload, tuple(shape), list(seeds), xp)
        s.restore()
        return s

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arenas)

    def restore(self) -> None:
        """(Re)build every set from its seed (``normal`` inputs), in place when the arenas exist."""
        wl, xp = self.workload, self.xp
        for i, seed in enumerate(self.seeds):
            fresh = wl.make_inputs(self.shape, seed, "normal", xp)
            if i < len(self.sets):
                arena, _ = pack_inputs([fresh], xp)  # the same layout: views and NaN padding restored at once
                self.arenas[i][...] = arena
            else:
                arena, (views,) = pack_inputs([fresh], xp)
                self.arenas.append(arena)
                self.sets.append(views)
        self.prints = [fingerprint(a, xp) for a in self.arenas]

    def mutated(self) -> list[int]:
        """Indices of the sets whose bytes (padding included) differ from when they were made."""
        return [i for i, (a, p) in enumerate(zip(self.arenas, self.prints)) if not _same(fingerprint(a, self.xp), p,
                                                                                       self.xp)]


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
    """What the checked timed launch saw and produced: repeat index, input set, refill pattern, sampled rows
    and the copies of the output rows taken right after it."""

    repeat: int
    set_index: int = -1
    pattern: str = ""
    rows: Any = None
    got: dict[str, Any] = field(default_factory=dict)


def timed_call(workload: Workload, enqueue: Callable[..., None], sets: InputSets, outputs: dict[str, Any],
               shape: Shape, rng: np.random.Generator, repeats: int, checks: int = CHECKED_LAUNCHES
               ) -> tuple[TimedCall, list[CheckedLaunch]]:
    """A TimedCall launching ``enqueue(inputs, outputs, shape)`` on the input set and refill pattern drawn per
    launch from ``rng`` (warm-up launches included), and the CheckedLaunch records of ``checks`` distinct timed
    launches drawn among the ``repeats`` (filled in as they run). ``outputs``: name -> buffer, reused by every
    launch. A kernel that computes only when it sees the poison escapes one checked launch with probability
    2/5 (the poison patterns' share), all of them with (2/5)^checks per shape."""
    specs = {s.name: s for s in workload.outputs(shape)}
    xp = sets.xp
    state = {"set": 0}
    picks = rng.choice(repeats, size=min(checks, repeats), replace=False) if checks > 0 else []
    checked = {int(r): CheckedLaunch(int(r)) for r in picks}
    rows = sample_rows(int(shape[0]) if shape else 1, rng)
    for c in checked.values():
        c.rows = rows

    def prepare(r: int) -> None:
        s = int(rng.integers(len(sets.sets)))
        choices = [p for p in PATTERNS if p != "answer" or (sets.answers is not None and s != 0)]
        pattern = choices[int(rng.integers(len(choices)))]
        seed = int(rng.integers(2**62))
        for name, buf in outputs.items():
            refill(buf, specs[name].dtype, pattern, seed, (sets.answers or {}).get(name), xp)
        state["set"] = s
        if r in checked:
            checked[r].set_index, checked[r].pattern = s, pattern

    def launch() -> None:
        enqueue(sets.sets[state["set"]], outputs, shape)

    dev_rows = rows if xp is np else xp.asarray(rows)

    def after(r: int) -> None:
        if r in checked:
            checked[r].got = {name: buf[dev_rows] for name, buf in outputs.items()}

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
    """Compare each checked timed launch's output rows with the float64 reference of the set it read (one
    reference per set); None when all are right, else the reason for the first wrong one."""
    xp = sets.xp
    atol, rtol = workload.tolerance
    refs: dict[int, dict[str, Any]] = {}
    for c in checked:
        if c.set_index not in refs:
            rows = c.rows if xp is np else xp.asarray(c.rows)
            refs[c.set_index] = workload.reference_rows(sets.sets[c.set_index], rows, xp)
        ref = refs[c.set_index]
        for s in workload.outputs(shape):
            got = c.got[s.name]
            if within_tolerance(got, ref[s.name], s.dtype, atol, rtol, xp):
                continue
            cmp = compare(got, ref[s.name], s.dtype, atol, rtol, xp)
            return (f"timed launch {c.repeat} (input set {c.set_index}, output pre-filled with {c.pattern!r}) wrong "
                    f"at shape {tuple(shape)}: {cmp.n_bad} of {cmp.total} checked elements of {s.name} in "
                    f"{len(c.rows)} sampled rows out of tolerance (max |err| {cmp.max_abs_err:.4g}, {cmp.n_nan} NaN)")
    return None
