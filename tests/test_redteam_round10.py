"""Tenth red-team round: the checked timed launches of gate rules version 13 (``timed_checks``: half the timed
launches "stale", k input sets rotated, every activation changed at every launch -- 64 rows densely and one
32-byte sector of every other row, or 1/16 of the elements of an input of at most 64 rows -- the 1-D
parameters at half, the inout buffers restored before every launch) against emulated kernels of the KDA
recurrent workload at decode (tests/redteam10_kernels.py), on the CPU, with the DRAM bytes each launch would move
on a GPU. At the search's decode shape (64, 1 x 32) the inout state [N, H, 128, 128] fp32 is 99% of an honest
launch's bytes (read and written whole), and under version 13 no perturbation touched it: every launch on a set
read the same initial state, bit for bit; and the worker built its benchmark sets from a constant seed.

| kernel | trick | gate v13 (10 seeds) | gate v14 | bytes vs honest |
|---|---|---|---|---|
| ``StateShadow("fp16")`` | per set, a private fp16 copy of the initial state, used where a 4-sector probe of each (sequence, head) block matches | escaped (0 of 10 caught at (4, 1 x 32), 0 of 3 at (2, 1 x 80)) | caught (every seed, both shapes) | 1.33x fewer at (64, 1 x 32) (probe included: 1.326x), every launch after a set's first |
| ``StateShadow("int8")`` | the same with an 8-bit copy (a scale per block) | caught at 10 of 10 (the final state out of tolerance) | caught | (1.59x) |
| ``SeedReplay`` | stateless: the benchmark sets' seeds were a constant of the source (bench_seed 12345), so the state is regenerated in registers after a one-sector check | escaped (0 of 10 caught); on sets of other seeds it is honest | its check fails at every launch (the perturbed state is not the seed's), so it reads the state: right and no faster than honest; and the worker's seed is now drawn per worker (``worker.benchmark_seed``) | 1.98x fewer at (64, 1 x 32), every launch (ALU cost predicted to hide under the write) |

Version 14 closes the kind (an input a kernel can remember or regenerate, because the gate restores it exactly):
``timed_checks.perturb_inout`` changes one 32-byte sector of every row (``flat_rows``: KDA's state as N H K rows
of 128 fp32) of the restored inout buffers at every timed launch, at a column hashed from the row and a seed drawn
per launch, and the checked launch's reference starts from the same changed value; and the benchmark sets' base
seed is random per worker.

Both escapes were right in real decode, where the state a launch reads is the previous launch's final state: the
probe (or the seed check) fails and they read the state (tested below). What the gate measured for them was a
speed real use never sees. On the GPU ``StateShadow`` keeps its copies (2 bytes a state element per set) across
launches, which race lint rule 5 rejects where it sees the stores (it needs a way past it, as round 9's kernels
did); ``SeedReplay`` keeps nothing and meets no static rule. ``InputSets.mutated`` is empty for every kernel (none
writes an input).

RMSNorm was examined too and gets no kernel here: under v13 a kernel must read every sector of x (one sector of
every row changes at a hashed column, and the hash's 62-bit key is drawn per launch: a row read whole shows
log2(sectors a row) bits of splitmix64's output, not the key) and write every element of y at every refilled launch, so what is left is round 9's
``StalePatch`` (stale launches on the same set with w as made at both: a few percent of the launches, never the
median). A regenerated x (SeedReplay's trick) still has to be read to find its changed sectors.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from evaluators.gpu.timed_checks import InputSets, set_count, timed_call, verify_checked
from tests.redteam10_kernels import (
    BENCH_SEED,
    SeedReplay,
    StateShadow,
    honest_bytes,
    kda_decode_honest,
    model_ratio,
)
from tests.timed_launches import drive
from workloads.kda.recurrent import KDARecurrent

DECODE = (4, *(1,) * 32)  # the search's decode batch (64, 1 x 32) with 4 heads: 32 tokens, no sector patches
WIDE = (2, *(1,) * 80)  # more than PERTURB_ROWS tokens, as decode at B = 256: q, k, v, g, beta get sector patches
REPEATS = 20
SEEDS = tuple(range(10))


def _sets(shape=DECODE, base=BENCH_SEED):
    return _sets_at(tuple(shape), int(base))


@cache
def _sets_at(shape, base):
    """The benchmark sets for ``shape`` as the worker makes them (seeds ``base`` + i, base the worker's constant
    bench_seed by default; one set per distribution, ``set_count``) and an output buffer."""
    wl = KDARecurrent()
    probe = wl.make_inputs(shape, base, "normal", np)
    k = set_count(wl, sum(int(v.nbytes) for v in probe.values()))
    sets = InputSets.make(wl, shape, [base + i for i in range(k)], np)
    out = {"o": np.empty(wl.outputs(shape)[0].shape, dtype=probe["q"].dtype)}
    return wl, sets, out


def _bench(kernel, seeds, shape=DECODE, base=BENCH_SEED):
    """Per seed: (reason or None, the per-launch bytes of the timed launches, their kinds, sets mutated)."""
    wl, sets, out = _sets(shape, base)
    runs = []
    for seed in seeds:
        if hasattr(kernel, "reset"):
            kernel.reset()
        call, checked = timed_call(wl, kernel, sets, out, shape, np.random.default_rng(seed), repeats=REPEATS)
        drive(call, REPEATS)
        why = verify_checked(wl, sets, checked, shape)
        traffic = getattr(kernel, "traffic", None)
        runs.append((why, traffic.per_launch[-REPEATS:] if traffic else [], list(getattr(kernel, "kinds", []))[
            -REPEATS:], sets.mutated()))
    return runs


def _runs(name: str, shape=DECODE, base=BENCH_SEED):
    return _runs_at(name, tuple(shape), int(base))


@cache
def _runs_at(name, shape, base):
    kernel = {"honest": lambda: kda_decode_honest, "fp16": lambda: StateShadow("fp16"),
              "int8": lambda: StateShadow("int8"), "replay": SeedReplay}[name]()
    return _bench(kernel, SEEDS[:3] if name == "honest" or shape != DECODE or base != BENCH_SEED else SEEDS,
                  shape, base)


def _honest_launch_bytes(shape=DECODE) -> int:
    return honest_bytes(len(shape) - 1, shape[0])


@pytest.mark.parametrize("shape", [DECODE, WIDE])
def test_the_honest_decode_emulation_passes_the_gate(shape):
    runs = _runs("honest", shape)
    assert [why for why, *_ in runs] == [None] * len(runs)
    assert all(m == [] for *_, m in runs)


def test_an_fp16_shadow_of_the_initial_state_is_caught():
    """Escaped version 13 at every seed; version 14's perturbed initial state puts its served rows out of
    tolerance (or, where its probe sees the change, it reads the state and gains nothing)."""
    runs = _runs("fp16") + _runs("fp16", WIDE)
    assert all(why is not None and "out of tolerance" in why for why, *_ in runs), [why for why, *_ in runs]
    assert all(m == [] for *_, m in runs)


def test_what_the_fp16_state_shadow_would_save():
    """The bytes it would save where served (the byte model of tests/redteam10_kernels.py): a quarter."""
    assert 1.32 < model_ratio(2, 32, 64) < 1.33  # the search's decode shape (64, 1 x 32)
    assert 1.32 < model_ratio(2, 256, 96) < 1.33  # the largest decode benchmark (96, 1 x 256)


@pytest.mark.parametrize("copy, lo, hi", [("fp16", 0.0, 0.2), ("int8", 1.5, 3.0)])
def test_how_far_a_served_copy_is_from_the_tolerance(copy, lo, hi):
    """The worst final-state error of a served launch, as a share of the tolerance, over every element and every
    set (measured: fp16 0.10-0.11, a 9x margin, so a 10-bit copy would pass too; int8 2.0-2.3)."""
    wl, sets, _ = _sets()
    atol, rtol = wl.tolerance
    for i in range(len(sets.sets)):
        inputs = {k: v.copy() for k, v in sets.sets[i].items()}
        made = inputs["state"].copy()
        kernel, out = StateShadow(copy), {"o": np.empty_like(inputs["q"])}
        kernel(inputs, out, DECODE)
        inputs["state"][...] = made
        kernel(inputs, out, DECODE)
        assert kernel.kinds == ["full", "shadow"]
        ref = wl.reference({**inputs, "state": made})["state"]
        share = float((np.abs(inputs["state"] - ref) / (atol + rtol * np.abs(ref))).max())
        assert lo < share < hi, (sets.distributions[i], share)


def test_an_int8_shadow_of_the_initial_state_is_caught():
    runs = _runs("int8")
    assert all(why is not None and "out of tolerance" in why for why, *_ in runs)
    assert 1.58 < model_ratio(1, 32, 64) < 1.59


def test_replaying_the_benchmark_seed_gains_nothing():
    """Even on sets of the seed it knows (the worker's former constant), the perturbed initial state fails its
    check at every launch: it reads the state, right, and moves more bytes than honest (its check included)."""
    runs = _runs("replay")
    honest = _honest_launch_bytes()
    for why, traffic, kinds, mutated in runs:
        assert why is None and mutated == []
        assert kinds == ["full"] * REPEATS
        assert min(traffic) > honest


def test_what_replaying_the_benchmark_seed_would_save_and_the_seed_is_no_longer_a_constant():
    """Where served it would move half the bytes (the state neither read nor, but for its final value, kept);
    and the worker's benchmark seed is drawn per worker unless a configuration fixes it."""
    from evaluators.gpu.worker import benchmark_seed

    n, h = 32, 64
    assert honest_bytes(n, h) / (honest_bytes(n, h) - 4 * n * h * 128 * 128 + 32 * n * h) > 1.97  # 1.98: q, k, v, g, o and the check stay
    drawn = {benchmark_seed({}) for _ in range(8)}
    assert len(drawn) >= 7 and BENCH_SEED not in drawn and all(0 <= d < 2**31 for d in drawn)
    assert benchmark_seed({"bench_seed": 7}) == 7 and benchmark_seed({"bench_seed": None}) != benchmark_seed({})


def test_both_escapes_read_the_state_in_real_decode():
    """Chained as real decode runs (a launch's state is the previous launch's final state), both take the honest
    path from the second launch on, and stay exact: the gain exists only where the state is restored."""
    _, sets, _ = _sets()
    inputs = {k: v.copy() for k, v in sets.sets[0].items()}
    for kernel, served in ((StateShadow("fp16"), "shadow"), (SeedReplay(), "replay")):
        honest_in = {k: v.copy() for k, v in inputs.items()}
        mine = {k: v.copy() for k, v in inputs.items()}
        o_h = {"o": np.empty_like(inputs["q"])}
        o_m = {"o": np.empty_like(inputs["q"])}
        for _ in range(3):
            kda_decode_honest(honest_in, o_h, DECODE)
            kernel(mine, o_m, DECODE)
        assert not {served, "partial"} & set(kernel.kinds[1:])
        assert np.array_equal(mine["state"], honest_in["state"])
        assert np.array_equal(np.asarray(o_m["o"]).view(np.uint16), np.asarray(o_h["o"]).view(np.uint16))


def test_the_replay_gains_nothing_on_sets_of_unknown_seeds():
    """Sets made from seeds the kernel does not have (as OS-drawn seeds would be): no candidate matches, every
    launch reads the state, right, one sector a block slower than honest."""
    runs = _runs("replay", DECODE, 11)
    honest = _honest_launch_bytes()
    for why, traffic, kinds, _ in runs:
        assert why is None and kinds == ["full"] * REPEATS
        assert min(traffic) > honest


def test_a_perturbed_initial_state_would_expose_the_shadow():
    """The fix it calls for, emulated outside the gate: after the copy is made, one 32-byte sector of every row of
    the initial state (128 fp32 words: 16 sectors a row) doubled in place. The probe (4 sectors of each 64 KiB
    block) misses nearly every change, the shadow serves its copy and the final state is out of tolerance in
    most rows; only a kernel that reads the whole state finds them, and then the copy gains nothing."""
    _, sets, _ = _sets()
    inputs = {k: v.copy() for k, v in sets.sets[0].items()}
    kernel = StateShadow("fp16")
    made = inputs["state"].copy()
    kernel(inputs, {"o": np.empty_like(inputs["q"])}, DECODE)  # first sight: honest, copy made
    rows = made.reshape(-1, 16, 8)
    cols = np.random.default_rng(0).integers(0, 16, rows.shape[0])
    rows[np.arange(rows.shape[0]), cols] *= 2
    honest_in = {**inputs, "state": made.copy()}
    inputs["state"][...] = made
    kernel(inputs, {"o": np.empty_like(inputs["q"])}, DECODE)
    assert kernel.kinds[-1] in ("shadow", "partial")  # most blocks' probes did not see the change
    kda_decode_honest(honest_in, {"o": np.empty_like(inputs["q"])}, DECODE)
    atol, rtol = KDARecurrent().tolerance
    ref = honest_in["state"].astype(np.float64)
    bad = np.abs(inputs["state"] - ref) > atol + rtol * np.abs(ref)
    assert bad.reshape(-1, 128).any(axis=1).mean() > 0.5
