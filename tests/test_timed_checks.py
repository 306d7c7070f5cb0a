"""Checked timed launches on the CPU: the worker's per-launch refill, input rotation and checks with numpy
launchers, driven in the order ``benchmark.time_interleaved`` drives them (prepare, launch, after)."""

from __future__ import annotations

import numpy as np

from evaluators.gpu.timed_checks import (
    PATTERNS,
    InputSets,
    baseline_call,
    sample_rows,
    timed_call,
    verify_checked,
)
from tests.timed_launches import drive, rms_honest
from workloads.dtypes import from_float, to_float64
from workloads.rmsnorm import RMSNorm

SHAPE = (3000, 64)


def setup():
    wl = RMSNorm("bf16")
    sets = InputSets.make(wl, SHAPE, [11, 12, 13], np)
    out = {"y": np.empty(SHAPE, dtype=sets.sets[0]["x"].dtype)}
    sets.answers = {"y": out["y"].copy()}
    rms_honest(sets.sets[0], sets.answers, SHAPE)
    return wl, sets, out


def test_honest_kernel_passes_and_every_pattern_and_set_is_used():
    wl, sets, out = setup()
    seen, eps = [], set()

    def record(inputs, outputs, shape, params):
        seen.append(next(i for i, s in enumerate(sets.sets) if s["x"] is inputs["x"]))
        eps.add(params["eps"])
        rms_honest(inputs, outputs, shape, params)

    call, checked = timed_call(wl, record, sets, out, SHAPE, np.random.default_rng(1), repeats=40)
    drive(call, 40, warmup=2)
    assert len(checked) == 4 and len({c.repeat for c in checked}) == 4
    assert verify_checked(wl, sets, checked, SHAPE) is None
    assert set(seen) == {0, 1, 2} and len(eps) == 3
    assert {c.pattern for c in checked} <= set(PATTERNS) | {"stale"}
    assert sets.distributions[0] == "normal" and len(set(sets.distributions)) == 3
    # every launch sees x changed in part (no timed launch repeats an earlier one's inputs); half the checked
    # launches see w changed too, half w as made (a change of w says little about a check)
    assert all(c.perturbation is not None and "x" in c.perturbation.parts for c in checked)
    assert sum("w" in c.perturbation.parts for c in checked) == 2
    # each checked launch has a row sample of its own (plus the rows its perturbation changed)
    assert len({tuple(c.rows[:64]) for c in checked}) == 4
    assert {c.set_index for c in checked} == {0, 1, 2}  # every set (distribution) is checked
    assert sets.mutated() == []


def test_kernel_that_computes_only_on_poisoned_outputs_is_caught():
    wl, sets, out = setup()

    def sniff(inputs, outputs, shape, params):
        if np.isnan(to_float64(outputs["y"][:1, :1], "bf16")).all():
            rms_honest(inputs, outputs, shape, params)

    caught = 0
    for seed in range(10):
        call, checked = timed_call(wl, sniff, sets, out, SHAPE, np.random.default_rng(seed), repeats=20)
        drive(call, 20, warmup=2)
        why = verify_checked(wl, sets, checked, SHAPE)
        caught += why is not None
        if why:
            assert "timed launch" in why and "sampled rows" in why
    assert caught >= 9  # escape chance (1/5)^4 per shape (poison at 2/5 of the refilled half of the launches)


def test_kernel_that_skips_when_its_outputs_hold_what_it_wrote_is_caught_at_stale_launches():
    """Half the timed launches leave the outputs as the previous launch wrote them (STALE_SHARE): a kernel that
    does nothing when it finds its own last output there serves the answer for another set, or for its set before
    this launch's rows were changed, and the checked launch compares those rows."""
    wl, sets, out = setup()
    last = {}

    def lazy(inputs, outputs, shape, params):
        y = outputs["y"].view(np.uint16)
        if "y" in last and np.array_equal(y, last["y"]):
            return  # "nothing changed": keep what is there
        rms_honest(inputs, outputs, shape, params)
        last["y"] = y.copy()

    caught = stale_checked = 0
    for seed in range(10):
        last.clear()
        call, checked = timed_call(wl, lazy, sets, out, SHAPE, np.random.default_rng(seed), repeats=20)
        drive(call, 20, warmup=2)
        why = verify_checked(wl, sets, checked, SHAPE)
        stale_checked += any(c.pattern == "stale" for c in checked)
        caught += why is not None
        if why:
            assert "timed launch" in why and "'stale'" in why
    assert stale_checked >= 9 and caught == stale_checked  # caught wherever a checked launch was stale


def test_skipping_the_last_row_is_caught_because_it_is_always_sampled():
    wl, sets, out = setup()
    rows = sample_rows(SHAPE[0], np.random.default_rng(0))
    assert rows[0] == 0 and rows[-1] == SHAPE[0] - 1 and 1024 <= len(rows) <= 1026 and len(set(rows)) == len(rows)

    def skip_last(inputs, outputs, shape, params):
        keep = outputs["y"][-1].copy()
        rms_honest(inputs, outputs, shape, params)
        outputs["y"][-1] = keep

    call, checked = timed_call(wl, skip_last, sets, out, SHAPE, np.random.default_rng(2), repeats=20)
    drive(call, 20, warmup=2)
    assert verify_checked(wl, sets, checked, SHAPE) is not None


def test_inputs_written_during_timing_are_found_and_restored():
    wl, sets, out = setup()
    pristine = [s["x"].copy() for s in sets.sets]

    def scribble(inputs, outputs, shape, params):
        rms_honest(inputs, outputs, shape, params)
        inputs["x"][5, 5] = inputs["x"][5, 6]

    call, _ = timed_call(wl, scribble, sets, out, SHAPE, np.random.default_rng(3), repeats=10)
    drive(call, 10, warmup=2)
    assert sets.mutated() != []
    sets.restore()
    assert sets.mutated() == []
    assert all(np.array_equal(p.view(np.uint16), s["x"].view(np.uint16)) for p, s in zip(pristine, sets.sets))


def test_write_into_input_padding_counts_as_mutation_and_padding_is_nan():
    _, sets, _ = setup()
    (arena,) = sets.arenas[1]
    x = sets.sets[1]["x"]
    end = x.__array_interface__["data"][0] - arena.__array_interface__["data"][0] + x.nbytes
    assert (arena[end:end + 512] == 0xFF).all()  # all-ones bytes: NaN in every float type
    arena[end + 3] = 0
    assert sets.mutated() == [1]


def test_baselines_rotate_inputs_and_refill_like_the_candidate():
    wl, sets, out = setup()
    used = []
    fns = [lambda i=i: used.append(i) for i in range(3)]
    call = baseline_call(fns, sets, out, SHAPE, wl, np.random.default_rng(4))
    changed = 0
    for r in range(200):
        before = out["y"].view(np.uint16).copy()
        call.prepare(r)
        call.launch()
        changed += not np.array_equal(before, out["y"].view(np.uint16))
    assert set(used) == {0, 1, 2}
    # refilled at half the launches, as the candidate's (STALE_SHARE; the same pattern twice in a row leaves the
    # buffer as it was): about 85 of 200 change it (84, 75, 93 at seeds 0-2), about 170 without stale launches
    assert 55 <= changed <= 115


def test_memo_on_a_row_probe_serves_stale_rows_in_the_perturbed_checked_launches():
    wl, sets, out = setup()
    table = {}

    def memo(inputs, outputs, shape, params):
        x = to_float64(inputs["x"], "bf16").astype(np.float32)
        bits = np.asarray(inputs["x"]).view(np.uint16)
        with np.errstate(invalid="ignore", over="ignore"):
            r = 1.0 / np.sqrt((x * x).mean(axis=1, dtype=np.float32) + np.float32(params["eps"]))
        for i in range(x.shape[0]):
            key = (i, params["eps"], bits[i, :8].tobytes(), bits[i, -8:].tobytes())
            r[i] = table.setdefault(key, r[i])
        with np.errstate(invalid="ignore", over="ignore"):
            outputs["y"][...] = from_float(x * r[:, None] * inputs["w"], "bf16")

    call, checked = timed_call(wl, memo, sets, out, SHAPE, np.random.default_rng(5), repeats=20)
    drive(call, 20, warmup=2)
    why = verify_checked(wl, sets, checked, SHAPE)
    assert why is not None and "changed in part" in why
    assert sets.mutated() == []  # every perturbation was undone


def test_a_write_into_a_perturbed_row_is_not_covered_up_by_the_undo():
    wl, sets, out = setup()

    def scribble_everywhere(inputs, outputs, shape, params):
        rms_honest(inputs, outputs, shape, params)
        inputs["x"][:, 3] = inputs["x"][:, 4]  # every row, so also the perturbed ones

    call, _ = timed_call(wl, scribble_everywhere, sets, out, SHAPE, np.random.default_rng(6), repeats=10)
    drive(call, 10, warmup=2)
    assert sets.mutated() != []


def test_dropping_eps_only_at_this_shape_is_caught_by_the_drawn_eps_and_tiny_sets():
    wl = RMSNorm("bf16")
    sets = InputSets.make(wl, SHAPE, [40, 41, 42], np, distributions=["normal", "tiny", "tiny"])
    out = {"y": np.empty(SHAPE, dtype=sets.sets[0]["x"].dtype)}

    def no_eps(inputs, outputs, shape, params):
        rms_honest(inputs, outputs, shape, {"eps": 1e-30})

    call, checked = timed_call(wl, no_eps, sets, out, SHAPE, np.random.default_rng(8), repeats=20)
    drive(call, 20, warmup=2)
    assert verify_checked(wl, sets, checked, SHAPE) is not None


def test_every_timed_launch_sees_its_inout_buffers_changed_in_one_sector_a_row():
    """KDA's state (the inout buffer, [N, H, 128, 128] fp32) is restored before every timed launch and then
    changed in place in one 32-byte sector of every 128-element row, at a column and value drawn per launch
    (``perturb_inout``), so no launch reads an initial state another launch read; an honest kernel still passes
    (the checked reference starts from the changed state). A kernel that reads the state as the set made it
    (here: the pristine copy) is caught."""
    from tests.redteam10_kernels import kda_decode_honest
    from workloads.kda.recurrent import KDARecurrent

    wl, shape = KDARecurrent(), (2, 1, 1, 1)
    sets = InputSets.make(wl, shape, [5, 6, 7, 8], np)
    out = {"o": np.empty(wl.outputs(shape)[0].shape, dtype=sets.sets[0]["q"].dtype)}
    seen = []

    def spy(inputs, outputs, shape_, params=None):
        i = next(j for j, s in enumerate(sets.sets) if s["state"] is inputs["state"])
        seen.append((i, inputs["state"].copy()))
        kda_decode_honest(inputs, outputs, shape_)

    call, checked = timed_call(wl, spy, sets, out, shape, np.random.default_rng(3), repeats=12)
    drive(call, 12)
    assert verify_checked(wl, sets, checked, shape) is None and sets.mutated() == []
    timed = seen[-12:]
    for i, state in timed:
        made = sets.initial[i]["state"].reshape(-1, 16, 8)  # rows of 128 fp32: 16 sectors of 8
        changed = (state.reshape(-1, 16, 8) != made).any(axis=2)
        assert changed.sum(axis=1).max() == 1 and changed.any(axis=1).mean() > 0.9  # zeros stay: |v| = 0
    assert len({st.tobytes() for _, st in timed}) == len(timed)  # no two launches saw one initial state

    def pristine(inputs, outputs, shape_, params=None):
        i = next(j for j, s in enumerate(sets.sets) if s["state"] is inputs["state"])
        inputs["state"][...] = sets.initial[i]["state"]  # served from a copy of the set as made
        kda_decode_honest(inputs, outputs, shape_)

    call, checked = timed_call(wl, pristine, sets, out, shape, np.random.default_rng(4), repeats=12)
    drive(call, 12)
    why = verify_checked(wl, sets, checked, shape)
    assert why is not None and "out of tolerance" in why
