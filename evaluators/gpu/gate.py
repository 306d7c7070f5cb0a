"""The correctness gate: is a kernel right, on inputs it has never seen, before any timing?

Array-module agnostic (``xp`` is numpy or cupy), so the whole gate runs on the CPU in tests with a Python
launcher and on the GPU in the worker with a CuPy one. Per gate check (one shape x one input distribution):

1. fresh inputs from a seed nobody saw before (the caller draws the base seed per evaluation);
2. every output buffer allocated with guard zones on both sides and the whole buffer poisoned
   (pattern 0: a NaN with a payload arithmetic never makes; pattern 1: all bytes 0xFF, also a NaN for bf16/fp16/fp32);
3. launch; then: the guard zones still hold the poison (no out-of-bounds store), the inputs are bitwise
   unchanged, no output element still holds the poison (no partial write), no NaN, and every element is
   within ``atol + rtol * |ref|`` of the float64 reference;
4. launch again on the same inputs into buffers poisoned with the other pattern: the output must be bitwise
   identical to the first (skipped when the workload declares atomics; then it is compared to the reference).

The first failing check decides: ``wrong_result`` or ``nondeterministic``, with a reason naming the check, the
shape, the distribution and the max error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from evaluators.types import Status
from evaluators.workloads.base import OutputSpec, Shape, Workload
from evaluators.workloads.dtypes import POISON_NAN_BITS, bits_dtype, storage_dtype, to_float64

# Elements of guard zone on each side of an output buffer (16 KiB for 4-byte elements; keeps 16-byte alignment).
GUARD_ELEMENTS = 4096
# Gate shapes with more elements than this run under one input distribution (rotated by seed), not all.
SMALL_CHECK_ELEMENTS = 1 << 22

Launcher = Callable[[Mapping[str, Any], Mapping[str, Any], Shape], None]


def poison_bits(dtype: str, pattern: int) -> int:
    """Bit pattern of poison ``pattern`` (0: NaN with a rare payload, 1: all ones) for elements of ``dtype``."""
    if pattern == 0:
        return POISON_NAN_BITS[dtype]
    return (1 << (8 * bits_dtype(dtype).itemsize)) - 1


@dataclass
class GuardedBuffer:
    """An output buffer with poisoned guard zones: ``view`` (the shape the kernel sees) inside ``base``."""

    spec: OutputSpec
    base: Any
    view: Any
    pattern: int

    def guards_intact(self, xp: ModuleType) -> bool:
        bits = self.base.view(bits_dtype(self.spec.dtype))
        want = poison_bits(self.spec.dtype, self.pattern)
        g = GUARD_ELEMENTS
        return bool(xp.all(bits[:g] == want)) and bool(xp.all(bits[-g:] == want))


def allocate_poisoned(spec: OutputSpec, pattern: int, xp: ModuleType = np) -> GuardedBuffer:
    """Allocate ``spec`` with GUARD_ELEMENTS on each side, every element set to poison ``pattern``."""
    n = int(np.prod(spec.shape))
    base = xp.empty(n + 2 * GUARD_ELEMENTS, dtype=storage_dtype(spec.dtype, xp))
    base.view(bits_dtype(spec.dtype)).fill(poison_bits(spec.dtype, pattern))
    view = base[GUARD_ELEMENTS:GUARD_ELEMENTS + n].reshape(spec.shape)
    return GuardedBuffer(spec, base, view, pattern)


@dataclass
class Comparison:
    """An output compared with its float64 reference.

    max_abs_err: largest |out - ref| (inf when a NaN is present); n_bad: elements out of tolerance (NaN
    included); n_nan; n_poison: elements still holding the poison bits (never written); worst: index of the
    worst element, with got/want there.
    """

    max_abs_err: float
    n_bad: int
    n_nan: int
    n_poison: int
    total: int
    worst: tuple[int, ...] = ()
    got: float = 0.0
    want: float = 0.0

    @property
    def ok(self) -> bool:
        return self.n_bad == 0 and self.n_nan == 0 and self.n_poison == 0


def compare(out: Any, ref: Any, dtype: str, atol: float, rtol: float, xp: ModuleType = np,
            pattern: int | None = None) -> Comparison:
    """Compare every element of ``out`` (``dtype``, either representation) with ``ref`` (float64).

    An element passes when ``|out - ref| <= atol + rtol * |ref|``; NaN never passes. ``pattern``: the poison
    written before the launch, to count elements left unwritten.
    """
    got = to_float64(out, dtype, xp)
    err = xp.abs(got - ref)
    bad = ~(err <= atol + rtol * xp.abs(ref))  # NaN compares False, so it is bad
    n_nan = int(xp.isnan(got).sum())
    n_poison = 0
    if pattern is not None:
        n_poison = int((out.view(bits_dtype(dtype)) == poison_bits(dtype, pattern)).sum())
    err_inf = xp.where(xp.isnan(err), xp.inf, err)
    flat = int(err_inf.argmax()) if err_inf.size else 0
    worst = tuple(int(i) for i in np.unravel_index(flat, out.shape)) if out.size else ()
    return Comparison(max_abs_err=float(err_inf.max()) if err_inf.size else 0.0, n_bad=int(bad.sum()),
                      n_nan=n_nan, n_poison=n_poison, total=int(out.size), worst=worst,
                      got=float(got.reshape(-1)[flat]) if out.size else 0.0,
                      want=float(ref.reshape(-1)[flat]) if out.size else 0.0)


def bitwise_equal(a: Any, b: Any, xp: ModuleType = np) -> bool:
    """True when two arrays of one dtype hold identical bytes (NaN payloads included)."""
    return a.shape == b.shape and bool(xp.array_equal(a.reshape(-1).view(xp.uint8), b.reshape(-1).view(xp.uint8)))


def changed_inputs(before: Mapping[str, Any], after: Mapping[str, Any], xp: ModuleType = np) -> list[str]:
    """Names of the inputs whose bytes differ between the two snapshots."""
    return [k for k in before if not bitwise_equal(before[k], after[k], xp)]


@dataclass
class GateCheck:
    """One gate check: shape, distribution, input seed, and what was found (``failed``: the check's name)."""

    shape: Shape
    distribution: str
    seed: int
    failed: str | None = None
    detail: str = ""
    max_abs_err: float = 0.0


@dataclass
class GateResult:
    """The gate's verdict: status OK, WRONG_RESULT or NONDETERMINISTIC; reason says what failed where."""

    status: Status
    reason: str = ""
    checks: list[GateCheck] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == Status.OK


def gate_plan(workload: Workload, seed: int, shapes: list[Shape] | None = None) -> list[tuple[Shape, str, int]]:
    """(shape, distribution, input seed) for every check: small shapes under every distribution, shapes of more
    than SMALL_CHECK_ELEMENTS elements under one (rotated by ``seed``). Input seeds derive from ``seed``."""
    plan = []
    dists = workload.distributions
    for i, shape in enumerate(shapes if shapes is not None else workload.gate_shapes):
        n = int(np.prod(shape))
        chosen = dists if n <= SMALL_CHECK_ELEMENTS else (dists[(seed + i) % len(dists)],)
        for d in chosen:
            plan.append((tuple(shape), d, (seed * 1_000_003 + len(plan) * 7919) % (2**63)))
    return plan


def _fmt_shape(shape: Shape) -> str:
    return "x".join(str(s) for s in shape)


def check_shape(workload: Workload, launch: Launcher, shape: Shape, distribution: str, seed: int,
                xp: ModuleType = np) -> GateCheck:
    """Run one gate check (steps 1-4 of the module docstring) and return it; ``failed`` is None on a pass."""
    atol, rtol = workload.tolerance
    chk = GateCheck(tuple(shape), distribution, seed)
    where = f"shape {_fmt_shape(shape)} ({distribution} inputs, seed {seed})"
    inputs = workload.make_inputs(shape, seed, distribution, xp)
    before = {k: v.copy() for k, v in inputs.items()}
    ref = workload.reference(inputs, xp)
    specs = workload.outputs(shape)

    runs = []
    for pattern in (0, 1):
        bufs = {s.name: allocate_poisoned(s, pattern, xp) for s in specs}
        launch(inputs, {k: b.view for k, b in bufs.items()}, shape)
        for name, b in bufs.items():
            if not b.guards_intact(xp):
                chk.failed, chk.detail = "bounds", f"out-of-bounds store: guard zone around output {name} overwritten at {where}"
                return chk
        changed = changed_inputs(before, inputs, xp)
        if changed:
            chk.failed, chk.detail = "inputs_unchanged", f"input(s) {changed} modified by the kernel at {where}"
            return chk
        for s in specs:
            if pattern == 1 and not workload.uses_atomics:
                continue  # the second run is judged bitwise against the first below
            c = compare(bufs[s.name].view, ref[s.name], s.dtype, atol, rtol, xp, pattern)
            chk.max_abs_err = max(chk.max_abs_err, c.max_abs_err)
            if not c.ok:
                if c.n_poison:
                    what = f"partial write: {c.n_poison} of {c.total} elements of {s.name} never written"
                    chk.failed = "unwritten"
                elif c.n_nan:
                    what = f"{c.n_nan} of {c.total} elements of {s.name} are NaN"
                    chk.failed = "nan"
                else:
                    what = f"{c.n_bad} of {c.total} elements of {s.name} out of tolerance"
                    chk.failed = "correctness"
                chk.detail = (f"{what} at {where}: max |err| {c.max_abs_err:.4g} (atol {atol}, rtol {rtol}) "
                              f"at index {c.worst}: got {c.got:.6g}, want {c.want:.6g}")
                return chk
        runs.append(bufs)
    if not workload.uses_atomics:
        for s in specs:
            a, b = runs[0][s.name].view, runs[1][s.name].view
            if not bitwise_equal(a, b, xp):
                diff = a.view(bits_dtype(s.dtype)) != b.view(bits_dtype(s.dtype))
                n = int(diff.sum())
                e = float(xp.nanmax(xp.abs(to_float64(a, s.dtype, xp) - to_float64(b, s.dtype, xp)))) if n else 0.0
                chk.failed = "determinism"
                chk.detail = (f"two runs on the same inputs differ in {n} of {a.size} elements of {s.name} at "
                              f"{where}: max |run1 - run2| {e:.4g}")
                return chk
    return chk


def run_gate(workload: Workload, launch: Launcher, seed: int, shapes: list[Shape] | None = None,
             xp: ModuleType = np) -> GateResult:
    """Run every check of ``gate_plan(workload, seed, shapes)``; stop at the first failure.

    launch(inputs, outputs, shape) runs the kernel to completion (synchronised); exceptions it raises (CUDA
    errors) propagate to the caller, who owns the process. Returns a GateResult (status OK when all passed).
    """
    checks: list[GateCheck] = []
    for shape, dist, s in gate_plan(workload, seed, shapes):
        chk = check_shape(workload, launch, shape, dist, s, xp)
        checks.append(chk)
        if chk.failed:
            status = Status.NONDETERMINISTIC if chk.failed == "determinism" else Status.WRONG_RESULT
            return GateResult(status, f"gate: {chk.failed} check failed: {chk.detail}", checks)
    return GateResult(Status.OK, f"gate: passed {len(checks)} checks", checks)
