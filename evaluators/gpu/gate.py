"""The correctness gate: is a kernel right, on inputs it has never seen, before any timing?

Array-module agnostic (``xp`` is numpy or cupy), so the whole gate runs on the CPU in tests with a Python
launcher and on the GPU in the worker with a CuPy one. Per gate check (one shape x one input distribution):

1. fresh inputs from a seed nobody saw before (the caller draws the base seed per evaluation);
2. every output buffer allocated with guard zones on both sides and the whole buffer poisoned
   (pattern 0: a NaN with a payload arithmetic never makes; pattern 1: all bytes 0xFF, also a NaN for bf16/fp16/fp32);
3. launch; then: the guard zones still hold the poison (no out-of-bounds store), the inputs are bitwise
   unchanged, no output element still holds the poison (no partial write), no NaN, and every element is
   within ``atol + rtol * |ref| + half_ulp(ref)`` of the float64 reference (half an ulp of the output type:
   a correctly rounded bf16 value can be 0.0625 off at |y| in [16, 32), more than atol 3e-2 + rtol 1e-3 * 16,
   so without it the exact answer fails on the rare large outputs of a 268M-element check);
4. launch again on the same inputs into buffers poisoned with the other pattern: the output must be bitwise
   identical to the first (skipped when the workload declares atomics; then it is compared to the reference).

The first failing check decides: ``wrong_result`` or ``nondeterministic``, with a reason naming the check, the
shape, the distribution and the max error.

Small checks (at most SMALL_CHECK_ELEMENTS elements: all but the full-size shapes) run as one batch
(``check_batch``): the same steps, but every check's inputs sit in one arena and every output in one poisoned
arena per pattern, guard zones between them, so the verification costs a few array operations per gate instead
of a dozen per check (on an H200 about 4 ms per check one by one, dominated by per-operation overhead). Large
checks run one by one (``check_shape``). On the GPU the comparisons are fused kernels (``workloads.fused``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from evaluators.gpu.gate_schedule import GateSchedule, select
from evaluators.types import Status
from workloads import fused
from workloads.base import OutputSpec, Shape, Workload
from workloads.dtypes import POISON_NAN_BITS, bits_dtype, from_float, half_ulp, storage_dtype, to_float64

# Version of the gate's rules, recorded with every GPU evaluation (store rows' metrics.extra.gate_version, elite
# cards, reports) so results judged by different gates are never pooled unknowingly. 1: the gate of 2026-11-30;
# 2: gate v2 (GATE.md: timed launches checked, every benchmarked shape audited, inputs guarded, static
# input-store check, non-finite and tiny inputs, drawn eps, sanitizers before an elite counts); 3: v2 with the
# second red-team round's fixes (callees in the input-store check; race lint: fence and release scopes, atomic data
# writes, brx/exit spin exits, clock and launch-count reads, float atomics; half the checked timed launches see
# their input set unchanged), which reject kernels v2 accepted, run 4 and the large checks on a schedule
# (gate_schedule), and the benchmark inputs in read-only mappings at unmapped pages (a read past an input at a
# timed launch faults); 4: v3 with the third red-team round's fixes (inout buffers' final values judged at the
# checked timed launches and in the audit; every timed launch changes its activations in part, so none repeats an
# earlier one's inputs; a row sample per checked launch), which reject a kernel v3 accepted and change the times
# recorded for memoising kernels (GATE.md); 5: v4 with race lint rule 5 (a write to a .global variable, state that
# outlives the launch, rejected unless the workload declares atomics), which rejects kernels v4 accepted; 6: v5
# with the fourth red-team round's fixes (race lint rule 6, wall-clock waits; rule 5's .local form, reads of
# local memory the thread never wrote; softmax's "masked" input distribution), which reject kernels v5 accepted;
# 7: v6 with the sanitizer replay in the benchmark's layout (inputs at unmapped granules, read-only, at the fixed
# shapes and the smallest timed shape: rt_edge_race, rt_sanitizer_dodge RT_SENSE 3) and the index check past 2^31
# elements (index_check: rt_index32), which reject kernels v6 accepted; 8: v7 with the fifth red-team round's
# fixes (race lint rule 6's shared form, a loop waiting on a shared variable the kernel writes: rt_alu_pace_dodge;
# rule 5's .shared form, a read of a shared variable before any store into it: rt_shared_state; rule 4's order
# form, an atomic whose outcome is the arrival order: rt_atomic_race_clock; RMSNorm's index
# shape 16641 x 131072, whole CTAs past element 2^31: rt_index_tail64), which reject kernels v7 accepted; 9: v8
# with the sanitizer replay's benchmark-layout launches once per drawn scalar setting (rt_replay_eps_dodge); 10: v9
# with the sixth red-team round's fixes (race lint: loop exits traced through memory and calls, rt_local_spin_dodge;
# a cluster launch needs more than one CTA per cluster and exempts nothing from rule 1 without atomics,
# rt_cluster_of_one; rule 7, distributed shared memory between cluster barriers, rt_cluster_exit_race; the sanitizer
# replay draws each launch's input distribution and refill pattern from a seed drawn per call, rt_replay_refill_dodge,
# rt_replay_scale_dodge, rt_replay_seed_dodge), which reject kernels v9 accepted; 11: v10 with the seventh red-team
# round's fixes (race lint rule 8, a global read after a barrier of what the kernel writes: rt_global_lww_clock;
# rule 4's mbarrier form, a phase test that retries nothing or a pending count: rt_mbarrier_race_clock; rule 5's
# address form, a generic or shared load at an address nothing vouches for: rt_laundered_state), which reject
# kernels v10 accepted; 12: v11 with the eighth red-team round's fixes (the sanitizer replays each workload at its
# own fixed shapes, Workload.sanitizer_shapes, with exact shape products: KDA at RMSNorm's shapes had timed out
# and its varlen search shapes had passed for small; KDA's replay shapes reach 129 tokens at 4 heads:
# rt8_kda_long_race, rt8_kda_latent_war, rt8_kda_heads_race; KDA's long_memory input distribution, decay 1:
# rt8_kda_window), which reject kernels v11 accepted; 13: v12 with half the timed launches "stale" (outputs as
# the previous launch wrote them, timed_checks.STALE_SHARE; a kernel that skips its work on finding its own last
# output is wrong at a checked stale launch) and the sanitizer replay's spec taking shapes of any rank (KDA's
# verdicts had all been skipped); 14: v13 with the tenth red-team round's fixes (every timed launch sees its inout
# buffers' initial value changed in one sector of every row, timed_checks.perturb_inout: a private copy of KDA's
# initial state, or the state regenerated from the benchmark sets' seeds, had been served at every launch; the
# benchmark sets drawn from a seed random per worker, worker.benchmark_seed, where a constant of the source had
# made them predictable), which reject kernels v13 accepted; 15: v14 with the eleventh red-team round's fixes to the
# static input-store check (the carry flag of add.cc/addc is a register of the analysis, .param pointers declared as
# arrays count, bar.red gathers bit roots, address expressions carry their base's roots, and bit roots alone never
# vouch for a write address) and to the race lint (rule 8 follows a named barrier from one statement's arrival
# to another's wait, and flags a global read on a branch apart from a write it meets; rule 5's shared form counts
# stores handed over such a barrier: tests/test_redteam_round11.py), and the twelfth round's (the input-store check
# follows .alias, rejects calls to bodiless non-system functions, reads module variables' initialisers and lets no
# subtracted root vouch; the race lint's reads are one list, read-modify-writes initialise nothing, DSMEM accesses
# are any at a mapa address, reads after a red and mbarrier tokens are arrival orders, rule 8 follows calls:
# tests/test_redteam_round12.py) and the thirteenth's (named-barrier edges from guarded or register-id waits, a
# read after a red cleared only by a whole-CTA barrier, cp.reduce a read-modify-write, the mbarrier word read as
# data, callee writes: tests/test_redteam_round13.py), which reject kernels v14 accepted; 16: v15 with rule 5's .local
# form across calls (a callee's reads and writes through pointer parameters; callees may write their callers'
# variables), rule 5's address form asking a .shared variable of every .shared load and letting no cancelled pointer
# vouch, and rule 7 counting any .shared::cluster or generic access not provably the CTA's own (no mapa needed):
# rt12_callee_local_state, rt12_honest_out_param, rt13_cancelled_shared_state, rt13_handmade_dsmem_push; rule 4's
# mbarrier form resolving a register to the { } block that declares it (two copies of one inline-asm retry loop,
# as unrolling makes, were one register and rejected as atomic_order) and counting a read after the loop only where
# the loop's value reaches it (a copy that writes the same registers again first); rule 3 an allow-list of the special registers
# the launch and the ABI fix (rt14_envreg_dodge: %envreg<32> was on no list); rule 5's register form, a register
# read that no earlier path writes and a call's return value its callee never stores (rt14_register_state,
# rt14_unset_retval_state). 17: the buffer an ``alloca`` returns is a ``.local`` root of its own
# (``input_stores.alloca_roots``), judged by rule 5's ``.local`` form like a ``.local`` variable (round 14's false
# rejection of rt14_honest_alloca_scratch closed; rt14_alloca_state still rejected, now as a read of bytes no
# store wrote); round 15: rule 5's .shared form reads a cp copy's source, its register form the carry flag, rule 3
# an entry's ld.param outside its parameters (rt15_bulk_copy_stale_shared, rt15_carry_state, rt15_param_overread);
# state spaces read through Instruction.base_modifiers (round 16's .param::entry/::func); rule 5's register form on
# values that only guarded writes define (rt14_register_state "guarded").
GATE_VERSION = 17

# Elements of guard zone on each side of an output buffer (16 KiB for 4-byte elements; keeps 16-byte alignment).
GUARD_ELEMENTS = 4096
# Gate shapes with more elements than this run under one input distribution (rotated by seed), not all.
SMALL_CHECK_ELEMENTS = 1 << 22
# Distributions each small gate shape runs under per gate (rotated by seed and shape): with RMSNorm's five and
# twelve small shapes every distribution runs at about seven shapes of every gate (a cheat wrong under one
# distribution at every shape escapes with probability (2/5)^12), at 4 runs a check for ~36 checks, the count of
# gate v1. Raise it to every distribution when the gate's cost allows (experiments/gate_cost.py).
DISTRIBUTIONS_PER_SHAPE = 3

# launch(inputs, outputs, shape, params): run the kernel on the buffers by name at ``shape`` with the drawn
# runtime scalars ``params`` (Workload.draw_params; empty when the workload draws none), synchronised.
Launcher = Callable[[Mapping[str, Any], Mapping[str, Any], Shape, Mapping[str, float]], None]


def reference_for(workload: Workload, inputs: Mapping[str, Any], xp: ModuleType,
                  params: Mapping[str, float]) -> dict[str, Any]:
    """``workload.reference`` with the drawn scalars (only passed when there are any, so workloads without
    ``scalar_draws`` keep the two-argument form)."""
    return workload.reference(inputs, xp, params) if params else workload.reference(inputs, xp)


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


def within_tolerance(out: Any, ref: Any, dtype: str, atol: float, rtol: float, xp: ModuleType = np,
                     pattern: int | None = None) -> bool:
    """True when every element of ``out`` passes ``compare``'s rule (a NaN passes only where ``ref`` is NaN;
    the poison of ``pattern``, when given, never passes): one fused pass on the GPU, for callers that need only
    the verdict; ``compare`` says what is wrong."""
    if xp is not np:
        poison = None if pattern is None else poison_bits(dtype, pattern)
        return fused.count_bad(out, ref, dtype, atol, rtol, poison) == 0
    return compare(out, ref, dtype, atol, rtol, xp, pattern).ok


def bad_count(out: Any, ref: Any, dtype: str, atol: float, rtol: float, xp: ModuleType = np) -> Any:
    """How many elements of ``out`` fail ``compare``'s rule: an int on the host; on the GPU a 0-d device array
    (one fused pass, no synchronisation), so several comparisons can be summed and read once."""
    if xp is np:
        return compare(out, ref, dtype, atol, rtol, xp).n_bad
    if out.size == 0:
        return 0
    return fused.count_bad_array(out, ref, dtype, atol, rtol)


def compare(out: Any, ref: Any, dtype: str, atol: float, rtol: float, xp: ModuleType = np,
            pattern: int | None = None) -> Comparison:
    """Compare every element of ``out`` (``dtype``, either representation) with ``ref`` (float64).

    An element passes when ``|out - ref| <= atol + rtol * |ref| + half_ulp(ref)`` (dtypes.half_ulp: what
    rounding to ``dtype`` alone may cost), when it equals ``ref`` (infinities), or when both are NaN: the
    reference of non-finite inputs has NaN exactly where the formula gives NaN, and a NaN anywhere else fails.
    ``pattern``: the poison written before the launch, to count elements left unwritten (they fail even where
    the reference is NaN).
    """
    if xp is not np and within_tolerance(out, ref, dtype, atol, rtol, xp, pattern):
        # Two fused passes on the device.
        return Comparison(max_abs_err=fused.max_abs_err(out, ref, dtype), n_bad=0, n_nan=0, n_poison=0,
                          total=int(out.size))
    got = to_float64(out, dtype, xp)
    ref_nan = xp.isnan(ref)
    with np.errstate(invalid="ignore"):
        err = xp.abs(got - ref)
        same = (got == ref) | (xp.isnan(got) & ref_nan)
        # NaN compares False, so a NaN where the reference is finite is bad
        bad = ~((err <= atol + rtol * xp.abs(ref) + half_ulp(ref, dtype, xp)) | same)
    n_nan = int((xp.isnan(got) & ~ref_nan).sum())
    n_poison = 0
    if pattern is not None:
        poisoned = out.view(bits_dtype(dtype)) == poison_bits(dtype, pattern)
        n_poison = int(poisoned.sum())
        bad = bad | poisoned
    err_inf = xp.where(same, 0.0, xp.where(xp.isnan(err), xp.inf, err))
    flat = int(err_inf.argmax()) if err_inf.size else 0
    worst = tuple(int(i) for i in np.unravel_index(flat, out.shape)) if out.size else ()
    return Comparison(max_abs_err=float(err_inf.max()) if err_inf.size else 0.0, n_bad=int(bad.sum()),
                      n_nan=n_nan, n_poison=n_poison, total=int(out.size), worst=worst,
                      got=float(got.reshape(-1)[flat]) if out.size else 0.0,
                      want=float(ref.reshape(-1)[flat]) if out.size else 0.0)


def bitwise_equal(a: Any, b: Any, xp: ModuleType = np) -> bool:
    """True when two arrays of one dtype hold identical bytes (NaN payloads included)."""
    if a.shape != b.shape:
        return False
    if xp is not np:
        return a.nbytes == b.nbytes and not fused.bytes_differ(a, b)  # one pass, no boolean temporary
    return bool(np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)))


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
    """(shape, distribution, input seed) for every check: each small shape under DISTRIBUTIONS_PER_SHAPE of the
    workload's distributions (all of them when it has no more), consecutive in the workload's order from an
    offset rotated by ``seed`` and the shape's position, so every distribution runs at most small shapes of every
    gate and at every shape over a few gates; shapes of more than SMALL_CHECK_ELEMENTS elements under one
    (rotated by ``seed``). Input seeds derive from ``seed``."""
    plan = []
    dists = workload.distributions
    per = min(len(dists), DISTRIBUTIONS_PER_SHAPE)
    for i, shape in enumerate(shapes if shapes is not None else workload.gate_shapes):
        n = math.prod(int(v) for v in shape)  # exact: numpy's int64 product wraps for long varlen shapes
        if n <= SMALL_CHECK_ELEMENTS:
            chosen = tuple(dists[(seed + i + k) % len(dists)] for k in range(per))
        else:
            chosen = (dists[(seed + i) % len(dists)],)
        for d in chosen:
            plan.append((tuple(shape), d, (seed * 1_000_003 + len(plan) * 7919) % (2**63)))
    return plan


def _fmt_shape(shape: Shape) -> str:
    return "x".join(str(s) for s in shape)


def _where(shape: Shape, distribution: str, seed: int) -> str:
    return f"shape {_fmt_shape(shape)} ({distribution} inputs, seed {seed})"


def _judge(chk: GateCheck, c: Comparison, name: str, where: str, atol: float, rtol: float) -> bool:
    """Record comparison ``c`` of output ``name`` in ``chk``; on a failure set ``failed``/``detail`` and return
    False. Poison left in the output decides first (partial write), then NaN, then the tolerance."""
    chk.max_abs_err = max(chk.max_abs_err, c.max_abs_err)
    if c.ok:
        return True
    if c.n_poison:
        what = f"partial write: {c.n_poison} of {c.total} elements of {name} never written"
        chk.failed = "unwritten"
    elif c.n_nan:
        what = f"{c.n_nan} of {c.total} elements of {name} are NaN"
        chk.failed = "nan"
    else:
        what = f"{c.n_bad} of {c.total} elements of {name} out of tolerance"
        chk.failed = "correctness"
    chk.detail = (f"{what} at {where}: max |err| {c.max_abs_err:.4g} (atol {atol}, rtol {rtol}) "
                  f"at index {c.worst}: got {c.got:.6g}, want {c.want:.6g}")
    return False


def _judge_determinism(chk: GateCheck, a: Any, b: Any, spec: OutputSpec, where: str, xp: ModuleType) -> bool:
    """Record in ``chk`` whether the two runs' outputs ``a`` and ``b`` (of ``spec``) are bitwise equal."""
    if bitwise_equal(a, b, xp):
        return True
    diff = a.view(bits_dtype(spec.dtype)) != b.view(bits_dtype(spec.dtype))
    n = int(diff.sum())
    e = float(xp.nanmax(xp.abs(to_float64(a, spec.dtype, xp) - to_float64(b, spec.dtype, xp)))) if n else 0.0
    chk.failed = "determinism"
    chk.detail = (f"two runs on the same inputs differ in {n} of {a.size} elements of {spec.name} at "
                  f"{where}: max |run1 - run2| {e:.4g}")
    return False


def _rng(seed: int, xp: ModuleType) -> Any:
    """A seeded Generator in ``xp`` (Philox on CuPy: its set-up is a counter assignment, not a skip-ahead)."""
    philox = getattr(xp.random, "Philox4x3210", None) if xp is not np else None
    return xp.random.Generator(philox(seed)) if philox is not None else xp.random.default_rng(seed)


def finite_fill(n: int, dtype: str, seed: int, xp: ModuleType = np) -> Any:
    """``n`` finite values of ``dtype`` (storage representation) drawn from ``seed``: all zeros when
    ``seed % 3 == 0``, else uniform in [-4, 4). What an output holds before a launch that must look like any
    other (a stale or uninitialised buffer), as opposed to the NaN poison."""
    if seed % 3 == 0:
        return xp.zeros(n, dtype=storage_dtype(dtype, xp))
    u = _rng(seed, xp).random(n, dtype=xp.float32)
    return from_float((u - xp.float32(0.5)) * xp.float32(8.0), dtype, xp)


# Share of the elements of each floating input that a perturbation changes (run 4, timed launches).
PERTURB_SHARE = 1 / 16
# Exponent field and its lowest bit, by element type: flipping that bit doubles or halves a value.
_EXPONENT = {"bf16": (0x7F80, 0x0080), "fp16": (0x7C00, 0x0400), "fp32": (0x7F800000, 0x00800000)}


def float_kind(a: Any, workload: Workload) -> str | None:
    """The element type name ("bf16", "fp16", "fp32") of a floating input array (CuPy holds bf16 as uint16: an
    uint16 array counts as bf16 when the workload's dtype is bf16), None for integer and other arrays."""
    dt = np.dtype(a.dtype)
    if dt == np.float32:
        return "fp32"
    if dt == np.float16:
        return "fp16"
    if dt.name == "bfloat16" or (dt == np.uint16 and workload.dtype == "bf16"):
        return "bf16"
    return None


def perturbed(a: Any, kind: str, seed: int, xp: ModuleType = np, share: float = PERTURB_SHARE) -> Any:
    """A copy of float array ``a`` (``kind``) in which a random ``share`` of the elements (drawn from ``seed``)
    is doubled or halved (the lowest exponent bit flipped), leaving zeros, the two largest binades and
    non-finite values alone (so nothing overflows and NaN/Inf stay where they are): a small in-place change of
    an input that a kernel caching results under a probe of its inputs, a pointer or a one-entry key cannot see."""
    mask_e, lsb = _EXPONENT[kind]
    bits = a.reshape(-1).view(bits_dtype(kind))
    e = bits & bits_dtype(kind).type(mask_e)
    pick = _rng(seed, xp).random(bits.size, dtype=xp.float32) < xp.float32(share)
    ok = (e != 0) & (e != bits_dtype(kind).type(mask_e)) & (e != bits_dtype(kind).type(mask_e - lsb))
    out = xp.where(pick & ok, bits ^ bits_dtype(kind).type(lsb), bits).astype(bits_dtype(kind))
    return out.view(a.dtype).reshape(a.shape)


def _inout_specs(workload: Workload, inputs: Mapping[str, Any]) -> list[OutputSpec]:
    """OutputSpecs of the workload's inout buffers (shape from ``inputs``, element type the workload's unless the
    array is float32/float16)."""
    out = []
    for name in workload.buffer_names("inout"):
        a = inputs[name]
        dt = {np.dtype(np.float32): "fp32", np.dtype(np.float16): "fp16"}.get(np.dtype(a.dtype), workload.dtype)
        out.append(OutputSpec(name, tuple(a.shape), dt))
    return out


# The runs of one gate check, in order (the detail of a failure names the run).
RUNS = ("run 1 (outputs NaN-poisoned)", "run 2 (outputs poisoned with all-ones bits)",
        "run 3 (outputs pre-filled with finite values)",
        "run 4 (right after a launch on the same buffers: inputs changed in place in part, another eps, outputs "
        "holding the answer for the old inputs)")


def check_shape(workload: Workload, launch: Launcher, shape: Shape, distribution: str, seed: int,
                xp: ModuleType = np, full: bool | None = None, stale: bool = True) -> GateCheck:
    """Run one gate check with buffers of its own and return it; ``failed`` is None on a pass.

    Runs (module docstring): 1 NaN poison (bounds, inputs unchanged, values), 2 all-ones poison (bitwise equal to
    run 1), and when ``full`` (default: small shapes, at most SMALL_CHECK_ELEMENTS) 3 finite fill (values, then
    bitwise equal to run 1) and, when ``stale`` too (``gate_schedule.select``), 4 fresh inputs written over the
    same input buffers with run 1's output (a correct answer for the old inputs) left in the outputs (values
    against the new reference). Inout buffers are restored to their initial value before each run and their
    final value is judged like an output.
    """
    atol, rtol = workload.tolerance
    full = math.prod(int(v) for v in shape) <= SMALL_CHECK_ELEMENTS if full is None else full
    chk = GateCheck(tuple(shape), distribution, seed)
    where = _where(shape, distribution, seed)
    inputs = workload.make_inputs(shape, seed, distribution, xp)
    before = {k: v.copy() for k, v in inputs.items()}
    params = workload.draw_params(seed)
    specs = workload.outputs(shape)
    inout = _inout_specs(workload, inputs)
    judged = specs + inout
    fixed = [k for k in inputs if k not in {s.name for s in inout}]
    # Large checks compare a random sample of rows (SAMPLE_ROWS + first + last) with the float64 reference, and
    # every element for the poison: no float64 copy of the whole output.
    rows = None
    if not full and not inout and shape and int(shape[0]) > SAMPLE_ROWS + 2:
        rows = sample_rows(int(shape[0]), np.random.default_rng([seed % (2**63), 0x5A3B]), SAMPLE_ROWS)
        rows_xp = rows if xp is np else xp.asarray(rows)
        ref = (workload.reference_rows(inputs, rows_xp, xp, params) if params
               else workload.reference_rows(inputs, rows_xp, xp))
    else:
        ref = reference_for(workload, inputs, xp, params)

    def values(got: Any, s: OutputSpec, pattern: int | None, run: str) -> bool:
        if rows is None:
            return _judge(chk, compare(got, ref[s.name], s.dtype, atol, rtol, xp, pattern), s.name, f"{where}, {run}",
                          atol, rtol)
        if pattern is not None:
            left = int((got.view(bits_dtype(s.dtype)) == poison_bits(s.dtype, pattern)).sum())
            if left:
                chk.failed = "unwritten"
                chk.detail = f"partial write: {left} of {got.size} elements of {s.name} never written at {where}, {run}"
                return False
        c = compare(got[rows_xp], ref[s.name], s.dtype, atol, rtol, xp, pattern)
        return _judge(chk, c, s.name, f"{where}, {run}, {len(rows)} sampled rows", atol, rtol)

    def launch_and_guard(outs: dict[str, Any], bufs: dict[str, GuardedBuffer], run: str, p: Mapping[str, float]
                         ) -> dict[str, Any] | None:
        for s in inout:
            inputs[s.name][...] = before[s.name]
        launch(inputs, outs, shape, p)
        for name, b in bufs.items():
            if not b.guards_intact(xp):
                chk.failed = "bounds"
                chk.detail = f"out-of-bounds store: guard zone around output {name} overwritten at {where}, {run}"
                return None
        changed = [k for k in fixed if not bitwise_equal(before[k], inputs[k], xp)]
        if changed:
            chk.failed, chk.detail = "inputs_unchanged", f"input(s) {changed} modified by the kernel at {where}, {run}"
            return None
        return {**outs, **{s.name: inputs[s.name].copy() for s in inout}}

    runs: list[dict[str, Any]] = []
    patterns: list[int | None] = [0, 1] + ([None] if full else [])
    for r, pattern in enumerate(patterns):
        if pattern is not None:
            bufs = {s.name: allocate_poisoned(s, pattern, xp) for s in specs}
        else:
            bufs = {s.name: allocate_poisoned(s, 0, xp) for s in specs}
            for k, s in enumerate(specs):
                bufs[s.name].view.reshape(-1)[...] = finite_fill(int(np.prod(s.shape)), s.dtype, seed + 7 * k + 1, xp)
        got = launch_and_guard({k: b.view for k, b in bufs.items()}, bufs, RUNS[r], params)
        if got is None:
            return chk
        for s in judged:
            if r == 1 and not workload.uses_atomics:
                continue  # the second run is judged bitwise against the first below
            if not values(got[s.name], s, pattern, RUNS[r]):
                return chk
        runs.append(got)
        if r == 0:
            first_err = chk.max_abs_err  # the check's max error is run 1's (as in the batch)
    if not workload.uses_atomics:
        for r in range(1, len(runs)):
            for s in judged:
                if not _judge_determinism(chk, runs[0][s.name], runs[r][s.name], s, f"{where}, {RUNS[r]}", xp):
                    return chk
    if full and stale:
        # Run 4: a launch on the unchanged buffers (so a cache keyed by the last pointers holds this check), then
        # a small change of the inputs in place, another eps, and a launch into outputs still holding run 1's answer.
        seed2 = (seed * 0x9E3779B1 + 1) % (2**63)
        prime = {s.name: allocate_poisoned(s, 1, xp) for s in specs}
        if launch_and_guard({k: b.view for k, b in prime.items()}, prime, RUNS[3], params) is None:
            return chk
        for j, (k, v) in enumerate(list(inputs.items())):
            kind = float_kind(v, workload)
            if kind is not None and k in fixed:
                v[...] = perturbed(v, kind, seed2 + j, xp)
                before[k] = v.copy()
        params2 = workload.draw_params(seed2)
        for s in inout:  # the reference starts from the initial state, as the launch will
            inputs[s.name][...] = before[s.name]
        ref2 = reference_for(workload, inputs, xp, params2)
        stale = {s.name: allocate_poisoned(s, 0, xp) for s in specs}
        for s in specs:
            stale[s.name].view[...] = runs[0][s.name]
        got = launch_and_guard({k: b.view for k, b in stale.items()}, stale, RUNS[3], params2)
        if got is None:
            return chk
        for s in judged:
            c = compare(got[s.name], ref2[s.name], s.dtype, atol, rtol, xp)
            if not _judge(chk, c, s.name, f"{where}, {RUNS[3]}", atol, rtol):
                return chk
    chk.max_abs_err = first_err
    return chk


# Rows of a large check (and of a checked timed launch) compared with the float64 reference, plus the first and
# the last row: a kernel wrong at a fraction f of the rows escapes with probability (1 - f)^SAMPLE_ROWS.
SAMPLE_ROWS = 1024


def sample_rows(m: int, rng: np.random.Generator, count: int = SAMPLE_ROWS) -> np.ndarray:
    """Sorted distinct row indices: ``count`` drawn uniformly from ``range(m)`` (all when ``m <= count + 2``)
    plus the first and the last row (where out-of-bounds tricks sit)."""
    if m <= count + 2:
        return np.arange(m)
    rows = rng.choice(m, size=count, replace=False)
    return np.unique(np.concatenate([rows, [0, m - 1]]))


# Offsets inside the batch arenas are rounded up to this many bytes (cudaMalloc aligns to 256).
ARENA_ALIGN = 256
# Bytes of NaN (all-ones) padding before, between and after the inputs of a batch: a read past an input reads
# NaN, which no arithmetic masks (0 * NaN is NaN), so an out-of-bounds read shows in the output.
INPUT_PAD_BYTES = 1024


def _align(nbytes: int) -> int:
    return -(-nbytes // ARENA_ALIGN) * ARENA_ALIGN


@dataclass
class OutputArena:
    """One output (one name) of every check in a batch, in one poisoned allocation: GUARD_ELEMENTS
    (or more, for alignment) of guard before, between and after the outputs. ``views[i]``: check i's output,
    ``spans[i]``: its [start, end) in the arena (elements). ``fill_seed``: when set, the outputs (not the
    guards) hold ``finite_fill`` values instead of the poison."""

    dtype: str
    base: Any
    views: list[Any]
    spans: list[tuple[int, int]]
    pattern: int

    @classmethod
    def allocate(cls, specs: list[OutputSpec], pattern: int, xp: ModuleType = np,
                 fill_seed: int | None = None) -> OutputArena:
        dtype = specs[0].dtype
        item = bits_dtype(dtype).itemsize
        step = ARENA_ALIGN // item
        spans, pos = [], _align(GUARD_ELEMENTS * item) // item
        for sp in specs:
            n = int(np.prod(sp.shape))
            spans.append((pos, pos + n))
            pos = -(-(pos + n + GUARD_ELEMENTS) // step) * step
        if fill_seed is None:
            base = xp.empty(pos, dtype=storage_dtype(dtype, xp))
            base.view(bits_dtype(dtype)).fill(poison_bits(dtype, pattern))
        else:
            fill = finite_fill(pos, dtype, fill_seed, xp).view(bits_dtype(dtype))
            guard = _guard_mask(xp, tuple(spans), pos)
            bits = xp.where(guard, bits_dtype(dtype).type(poison_bits(dtype, pattern)), fill)
            base = bits.astype(bits_dtype(dtype)).view(storage_dtype(dtype, xp))
        views = [base[a:b].reshape(sp.shape) for (a, b), sp in zip(spans, specs)]
        return cls(dtype, base, views, spans, pattern)

    def guard_hits(self, xp: ModuleType = np) -> list[int]:
        """Indices (into the arena) of guard elements that no longer hold the poison, empty when intact."""
        bits = self.base.view(bits_dtype(self.dtype))
        hits = (bits != poison_bits(self.dtype, self.pattern)) & _guard_mask(xp, tuple(self.spans), int(bits.size))
        if not bool(hits.any()):
            return []
        return [int(i) for i in (hits.nonzero()[0] if xp is np else hits.nonzero()[0].get())[:16]]

    def owner(self, index: int) -> int:
        """The check whose output ends nearest before ``index`` (the first check for the leading guard)."""
        best = 0
        for i, (a, _) in enumerate(self.spans):
            if a <= index:
                best = i
        return best


@functools.lru_cache(maxsize=8)
def _guard_mask(xp: ModuleType, spans: tuple[tuple[int, int], ...], total: int) -> Any:
    """Boolean mask (in ``xp``) of the guard elements of an arena laid out as ``spans``; built once per layout
    (the layout repeats with the gate shapes), never written to."""
    guard = np.ones(total, dtype=bool)
    for a, b in spans:
        guard[a:b] = False
    return xp.asarray(guard)


def pack_inputs(all_inputs: list[dict[str, Any]], xp: ModuleType) -> tuple[Any, list[dict[str, Any]]]:
    """Copy every input set into one byte arena and return it with views of the same dtypes and shapes, so one
    snapshot and one comparison cover them all. Each array starts at a 256-byte aligned offset with at least
    INPUT_PAD_BYTES of all-ones bytes (NaN for every float type) before the first and after every array. The
    arena is one concatenation of the arrays' bytes and the padding (one kernel on the GPU, not one copy per
    array). Arrays must be contiguous."""
    offsets, pos = [], INPUT_PAD_BYTES
    pieces: list[Any] = []
    widest = INPUT_PAD_BYTES + ARENA_ALIGN
    pad = xp.full(widest, 0xFF, dtype=xp.uint8)
    pieces.append(pad[:INPUT_PAD_BYTES])
    for inputs in all_inputs:
        offs = {}
        for k, v in inputs.items():
            offs[k] = pos
            step = _align(int(v.nbytes) + INPUT_PAD_BYTES)
            pieces.append(v.reshape(-1).view(xp.uint8))
            pieces.append(pad[:step - int(v.nbytes)])
            pos += step
        offsets.append(offs)
    arena = xp.concatenate(pieces) if len(pieces) > 1 else xp.full(max(pos, 1), 0xFF, dtype=xp.uint8)
    packed = []
    for inputs, offs in zip(all_inputs, offsets):
        views = {}
        for k, v in inputs.items():
            views[k] = arena[offs[k]:offs[k] + int(v.nbytes)].view(v.dtype).reshape(v.shape)
        packed.append(views)
    return arena, packed


def check_batch(workload: Workload, launch: Launcher, items: list[tuple[Shape, str, int]],
                xp: ModuleType = np, stale: Collection[int] | None = None, finite: bool = True) -> list[GateCheck]:
    """Run the checks ``items`` ((shape, distribution, input seed), each small) as one batch: the runs of
    ``check_shape`` with ``full`` (NaN poison, all-ones poison, finite fill, then run 4), with fresh inputs per
    check (drawn together: ``Workload.make_inputs_many``), but every check's inputs in one NaN-padded arena (one snapshot, one comparison) and every output in one
    arena per run with guard zones between the outputs, so the verification is a handful of array operations for
    the whole batch instead of a dozen per check. Run 4 goes check by check: a launch on the unchanged buffers,
    the check's floating inputs changed in place in part (``perturbed``), and a launch with another eps into run
    1's outputs. ``stale``: indices into ``items`` of the checks that get run 4 (None: all of them;
    ``gate_schedule.select``); ``finite``: False leaves out run 3 too (runs 1-2 only, gate v1's cost).

    The stages run in check_shape's order over the whole batch, so the check a failure is first seen at may not
    be the first check that ``check_shape`` would fail; ``run_gate`` therefore re-runs the checks one by one
    after a batch failure. Returns the checks up to and including the one a failure was attributed to (all of
    them when none failed). ValueError when the checks' outputs differ in names or element types, or the
    workload has inout buffers (those run one by one).
    """
    atol, rtol = workload.tolerance
    if workload.buffer_names("inout"):
        raise ValueError(f"{workload.name}: a gate batch cannot hold inout buffers; use check_shape")
    checks = [GateCheck(tuple(sh), d, s) for sh, d, s in items]
    wheres = [_where(c.shape, c.distribution, c.seed) for c in checks]
    specs = [workload.outputs(c.shape) for c in checks]
    names = [sp.name for sp in specs[0]]
    layout = [(sp.name, sp.dtype) for sp in specs[0]]
    for c, spc in zip(checks, specs):
        if [(sp.name, sp.dtype) for sp in spc] != layout:
            raise ValueError(f"{workload.name}: outputs at shape {c.shape} are {[(sp.name, sp.dtype) for sp in spc]}, "
                             f"at {checks[0].shape} {layout}; a gate batch needs the same names and types")
    arena_in, inputs = pack_inputs(workload.make_inputs_many([(c.shape, c.distribution, c.seed) for c in checks], xp),
                                   xp)
    before = arena_in.copy()
    params = [workload.draw_params(c.seed) for c in checks]
    refs = [reference_for(workload, inp, xp, p) for inp, p in zip(inputs, params)]

    def fail(i: int) -> list[GateCheck]:
        return checks[: i + 1]

    # A launcher with ``enqueue`` and ``sync`` (worker.make_launcher) runs a stage's launches back to back and
    # synchronises once (a fault then surfaces as the stage's KernelFault); any other runs one at a time.
    enqueue, sync = getattr(launch, "enqueue", None), getattr(launch, "sync", None)
    fire = enqueue if enqueue is not None and sync is not None else launch

    def settle(run: str) -> None:
        if fire is not launch:
            sync(f"in the gate batch, {run}")

    def guards_and_inputs(arenas: dict[str, OutputArena], snapshot: Any, run: str) -> int | None:
        """Bounds and inputs-unchanged after a run; the failing check's index, else None."""
        for n, arena in arenas.items():
            hits = arena.guard_hits(xp)
            if hits:
                i = arena.owner(hits[0])
                count = f"{len(hits)}+" if len(hits) >= 16 else str(len(hits))
                checks[i].failed = "bounds"
                checks[i].detail = (f"out-of-bounds store: guard zone around output {n} overwritten at {wheres[i]}, "
                                    f"{run} (batched gate: {count} guard elements changed)")
                return i
        if not bitwise_equal(arena_in, snapshot, xp):
            for i, inp in enumerate(inputs):
                changed = [k for k, v in inp.items()
                           if not bitwise_equal(v, _snapshot_view(snapshot, arena_in, v, xp), xp)]
                if changed:
                    checks[i].failed = "inputs_unchanged"
                    checks[i].detail = f"input(s) {changed} modified by the kernel at {wheres[i]}, {run}"
                    return i
            # Only the padding between inputs changed: a store past the end of an input buffer.
            i = _input_owner(arena_in, snapshot, inputs, xp)
            checks[i].failed = "bounds"
            checks[i].detail = f"out-of-bounds store past an input buffer at {wheres[i]}, {run} (batched gate)"
            return i
        return None

    def values(arenas: dict[str, OutputArena], which: dict[int, dict[str, Any]], pattern: int | None, run: str,
               record: bool) -> int | None:
        """Compare the outputs of the checks ``which`` (index -> its reference) with their references."""
        for n in names:
            dtype = arenas[n].dtype
            flat_out = xp.concatenate([arenas[n].views[i].reshape(-1) for i in which])
            flat_ref = xp.concatenate([r[n].reshape(-1) for r in which.values()])
            if within_tolerance(flat_out, flat_ref, dtype, atol, rtol, xp, pattern):
                if record:
                    _batch_max_errors(checks, arenas[n], list(which.values()), n, xp)
                continue
            for i in which:
                c = compare(arenas[n].views[i], which[i][n], dtype, atol, rtol, xp, pattern)
                if not _judge(checks[i], c, n, f"{wheres[i]}, {run}", atol, rtol):
                    return i
        return None

    runs: list[dict[str, OutputArena]] = []
    base_seed = checks[0].seed if checks else 0
    all_refs = dict(enumerate(refs))
    for r, pattern in enumerate((0, 1, None) if finite else (0, 1)):
        # Every check has the same outputs in the same order (checked above): output j of all checks, one arena.
        arenas = {n: OutputArena.allocate([spc[j] for spc in specs], 0 if pattern is None else pattern, xp,
                                          fill_seed=None if pattern is not None else base_seed + 7 * j + 1)
                  for j, n in enumerate(names)}
        for i, c in enumerate(checks):
            fire(inputs[i], {n: arenas[n].views[i] for n in names}, c.shape, params[i])
        settle(RUNS[r])
        bad = guards_and_inputs(arenas, before, RUNS[r])
        if bad is not None:
            return fail(bad)
        if r != 1 or workload.uses_atomics:
            bad = values(arenas, all_refs, pattern, RUNS[r], record=r == 0)
            if bad is not None:
                return fail(bad)
        runs.append(arenas)
    if not workload.uses_atomics:
        for r in range(1, len(runs)):
            for j, n in enumerate(names):
                a, b = runs[0][n], runs[r][n]
                if bitwise_equal(xp.concatenate([v.reshape(-1) for v in a.views]),
                                 xp.concatenate([v.reshape(-1) for v in b.views]), xp):
                    continue
                for i in range(len(checks)):
                    if not _judge_determinism(checks[i], a.views[i], b.views[i], specs[i][j],
                                              f"{wheres[i]}, {RUNS[r]}", xp):
                        return fail(i)
    # Run 4, check by check on the ``stale`` checks: a launch on the unchanged buffers (into run 3's outputs, or
    # run 2's without run 3: a cache keyed by the last pointers now holds this check), the check's inputs changed
    # in place in part (``perturbed``), another eps, and a launch into run 1's outputs (still holding the answer
    # for the old inputs).
    picked = sorted(set(range(len(checks))) if stale is None else {int(i) for i in stale if 0 <= int(i) < len(checks)})
    if not picked:
        return checks
    seeds4 = {i: (checks[i].seed * 0x9E3779B1 + 1) % (2**63) for i in picked}
    params4 = {i: workload.draw_params(seeds4[i]) for i in picked}
    changed: dict[int, dict[str, Any]] = {i: {} for i in picked}
    for j, k in enumerate(inputs[0] if inputs else {}):  # one perturbation per input name over the picked checks
        kind = float_kind(inputs[0][k], workload)
        if kind is None:
            continue
        flat = perturbed(xp.concatenate([inputs[i][k].reshape(-1) for i in picked]), kind, seeds4[picked[0]] + j, xp)
        pos = 0
        for i in picked:
            n = int(inputs[i][k].size)
            changed[i][k] = flat[pos:pos + n].reshape(inputs[i][k].shape)
            pos += n
    prime = runs[-1]  # run 3's outputs (run 2's when run 3 is left out)
    for i in picked:
        fire(inputs[i], {n: prime[n].views[i] for n in names}, checks[i].shape, params[i])
        for k, v in changed[i].items():
            inputs[i][k][...] = v
        fire(inputs[i], {n: runs[0][n].views[i] for n in names}, checks[i].shape, params4[i])
    settle(RUNS[3])
    moved = before.copy()
    for i in picked:
        for k, v in changed[i].items():
            _snapshot_view(moved, arena_in, inputs[i][k], xp)[...] = v
    bad = guards_and_inputs({**{f"{n} (run {len(runs)})": prime[n] for n in names}, **runs[0]}, moved, RUNS[3])
    if bad is not None:
        return fail(bad)
    refs4 = {i: reference_for(workload, inputs[i], xp, params4[i]) for i in picked}
    bad = values(runs[0], refs4, None, RUNS[3], record=False)
    if bad is not None:
        return fail(bad)
    return checks


def _input_owner(arena: Any, before: Any, inputs: list[dict[str, Any]], xp: ModuleType) -> int:
    """The check whose inputs start nearest before the first byte of ``arena`` that differs from ``before``."""
    diff = (arena != before).nonzero()[0]
    first = int(diff[0]) if diff.size else 0
    owner = 0
    for i, inp in enumerate(inputs):
        starts = [_byte_offset(v, xp) - _byte_offset(arena, xp) for v in inp.values()]
        if starts and min(starts) <= first:
            owner = i
    return owner


def _snapshot_view(before: Any, arena: Any, view: Any, xp: ModuleType) -> Any:
    """The part of the snapshot ``before`` (a copy of ``arena``) that ``view`` (a view into ``arena``) covers."""
    start = _byte_offset(view, xp) - _byte_offset(arena, xp)
    return before[start:start + int(view.nbytes)].view(view.dtype).reshape(view.shape)


def _byte_offset(a: Any, xp: ModuleType) -> int:
    return int(a.__array_interface__["data"][0]) if xp is np else int(a.data.ptr)


def _batch_max_errors(checks: list[GateCheck], arena: OutputArena, refs: list[dict[str, Any]], name: str,
                      xp: ModuleType) -> None:
    """Set each check's max_abs_err from its own slice, on the host. On the GPU a passing batch leaves it at 0:
    it would cost two reductions per check (about 2.6 ms of the batch on an H200) for a number no verdict uses;
    a failing check's reason carries its max error (``compare``)."""
    if xp is not np:
        return
    values = [compare(v, r[name], arena.dtype, np.inf, 0.0).max_abs_err if v.size else 0.0
              for v, r in zip(arena.views, refs)]
    for c, e in zip(checks, values):
        c.max_abs_err = max(c.max_abs_err, e)


def run_gate(workload: Workload, launch: Launcher, seed: int, shapes: list[Shape] | None = None,
             xp: ModuleType = np, schedule: GateSchedule | None = None) -> GateResult:
    """Run the checks of ``gate_plan(workload, seed, shapes)`` that ``schedule`` selects (``gate_schedule``;
    None: every run of every check); stop at the first failure.

    Checks of at most SMALL_CHECK_ELEMENTS elements run as one batch (``check_batch``; after a batch failure
    they are re-run one by one so the verdict is check_shape's), larger ones one by one (``check_shape``, runs
    1-2 only); a workload with inout buffers runs every check one by one.
    launch(inputs, outputs, shape, params) runs the kernel to completion (synchronised); exceptions it raises (CUDA
    errors) propagate to the caller, who owns the process. Returns a GateResult (status OK when
    all passed); ``skipped`` in its reason counts the large checks this evaluation's schedule left out.
    """
    plan = gate_plan(workload, seed, shapes)
    is_small = [int(np.prod(p[0])) <= SMALL_CHECK_ELEMENTS for p in plan]
    small_idx = [j for j, s in enumerate(is_small) if s]
    large_idx = [j for j, s in enumerate(is_small) if not s]
    sel = select(len(small_idx), len(large_idx), schedule or GateSchedule("full"))
    stale_plan = {small_idx[i] for i in sel.stale}
    large_plan = {large_idx[i] for i in sel.large}
    batched = not workload.buffer_names("inout")  # inout state is restored per run: one check at a time
    small = [plan[j] for j in small_idx] if batched else []
    checks: list[GateCheck] = []

    def verdict() -> GateResult:
        bad = checks[-1]
        status = Status.NONDETERMINISTIC if bad.failed == "determinism" else Status.WRONG_RESULT
        return GateResult(status, f"gate: {bad.failed} check failed: {bad.detail}", checks)

    def one(j: int) -> GateCheck:
        shape, dist, s = plan[j]
        if is_small[j]:
            return check_shape(workload, launch, shape, dist, s, xp, full=sel.finite, stale=j in stale_plan)
        return check_shape(workload, launch, shape, dist, s, xp)

    if small:
        batch = check_batch(workload, launch, small, xp, stale=[i for i, j in enumerate(small_idx) if j in stale_plan],
                            finite=sel.finite)
        if batch[-1].failed:
            # The batch judges stage by stage; re-run in plan order, one check at a time with buffers of its own,
            # so the verdict names the first check that fails and how (what check_shape alone would say).
            for j in small_idx:
                checks.append(one(j))
                if checks[-1].failed:
                    return verdict()
            # Not reproduced one by one (a store between buffers, or a kernel that depends on its neighbours):
            # the batch's failure stands.
            bad = batch[-1]
            bad.detail += "; the checks passed when re-run one at a time"
            checks[:] = batch
            return verdict()
        checks.extend(batch)
    for j in range(len(plan)):
        if (batched and is_small[j]) or (not is_small[j] and j not in large_plan):
            continue
        checks.append(one(j))
        if checks[-1].failed:
            return verdict()
    skipped = len(large_idx) - len(large_plan)
    note = f" ({skipped} large check(s) left to other evaluations by the schedule)" if skipped else ""
    return GateResult(Status.OK, f"gate: passed {len(checks)} checks{note}", checks)
