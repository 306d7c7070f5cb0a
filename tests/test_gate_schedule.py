"""The gate schedule (evaluators/gpu/gate_schedule.py): which checks run at evaluation k, and its coverage."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import evaluators.gpu.gate as gate
from evaluators.gpu.gate import SMALL_CHECK_ELEMENTS, gate_plan, run_gate
from evaluators.gpu.gate_schedule import LARGE_PERIOD, STALE_PERIOD, GateSchedule, select
from evaluators.types import Status
from workloads.dtypes import from_float, to_float64
from workloads.rmsnorm import RMSNorm

KEYS = [0, 1, 2, 5, 977, 2**29 + 3]


def rotating(k: int, key: int) -> GateSchedule:
    return GateSchedule("rotating", k, key)


@pytest.mark.parametrize("n_small", [0, 1, 2, 3, 4, 35, 36, 37])
@pytest.mark.parametrize("key", KEYS)
def test_every_small_check_gets_run_4_exactly_once_in_any_three_consecutive_evaluations(n_small, key):
    for k0 in range(7):
        seen = [j for k in range(k0, k0 + STALE_PERIOD) for j in select(n_small, 2, rotating(k, key)).stale]
        assert sorted(seen) == list(range(n_small))  # each once: no repeats, none missing
    for k in range(7):
        n = len(select(n_small, 2, rotating(k, key)).stale)
        assert n_small // STALE_PERIOD <= n <= -(-n_small // STALE_PERIOD)


@pytest.mark.parametrize("n_large", [0, 1, 2, 3, 5])
@pytest.mark.parametrize("key", KEYS)
def test_every_large_check_runs_exactly_once_in_any_two_consecutive_evaluations(n_large, key):
    for k0 in range(7):
        seen = [i for k in range(k0, k0 + LARGE_PERIOD) for i in select(36, n_large, rotating(k, key)).large]
        assert sorted(seen) == list(range(n_large))
    for k in range(7):
        n = len(select(36, n_large, rotating(k, key)).large)
        assert n_large // LARGE_PERIOD <= n <= -(-n_large // LARGE_PERIOD)
    if n_large == 2:  # RMSNorm's two large gate shapes: one of them at every evaluation
        assert all(len(select(36, 2, rotating(k, key)).large) == 1 for k in range(9))


def test_runs_1_to_3_of_every_small_check_run_at_every_evaluation():
    for k, key in itertools.product(range(6), KEYS):
        assert select(36, 2, rotating(k, key)).finite


def test_which_check_gets_run_4_depends_on_the_secret_key():
    """A kernel knows neither the evaluation counter nor the key: at a fixed evaluation, a fixed check gets run 4
    under exactly one key in three, and a fixed large check runs under one key pair in two."""
    for k, j in itertools.product(range(4), range(36)):
        assert sum(j in select(36, 2, rotating(k, key)).stale for key in range(STALE_PERIOD)) == 1
    for k, i in itertools.product(range(4), range(2)):
        keys = [STALE_PERIOD * b for b in range(LARGE_PERIOD)]  # key // STALE_PERIOD picks the large phase
        assert sum(i in select(36, 2, rotating(k, key)).large for key in keys) == 1


def test_full_and_v1_profiles():
    full = select(36, 2, GateSchedule("full", 4, 9))
    assert full.finite and full.stale == frozenset(range(36)) and full.large == frozenset({0, 1})
    v1 = select(36, 2, GateSchedule("v1", 4, 9))
    assert not v1.finite and v1.stale == frozenset() and v1.large == frozenset({0, 1})
    assert select(36, 2, GateSchedule.from_json(None)) == full  # a request without a schedule: everything


def test_a_schedule_without_a_profile_is_the_class_default_full():
    """from_json and the class agree: an entry that names no profile runs every check, as an absent one does
    (it used to read "rotating" there while the class default and the absent case were "full")."""
    assert GateSchedule().profile == "full"
    assert GateSchedule.from_json({"round": 3, "key": 7}) == GateSchedule("full", 3, 7)
    assert GateSchedule.from_json({}) == GateSchedule.from_json(None) == GateSchedule()


def test_schedule_round_trips_and_refuses_bad_values():
    s = GateSchedule("rotating", 17, 12345)
    assert GateSchedule.from_json(s.to_json()) == s
    with pytest.raises(ValueError, match="profile"):
        GateSchedule("sometimes")
    with pytest.raises(ValueError, match=">= 0"):
        GateSchedule("rotating", -1, 0)
    with pytest.raises(ValueError):
        select(-1, 0, s)


def _small_and_large(plan):
    small = [p for p in plan if int(np.prod(p[0])) <= SMALL_CHECK_ELEMENTS]
    large = [p for p in plan if int(np.prod(p[0])) > SMALL_CHECK_ELEMENTS]
    return small, large


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 123456789])
def test_on_rmsnorms_gate_every_small_shape_and_every_distribution_gets_run_4_at_every_evaluation(seed):
    """The plan lists each small shape's three checks consecutively, so a third of the plan by index is one check
    of every small shape, and the distributions rotate with the shape's position: all five are among them."""
    wl = RMSNorm("bf16")
    small, large = _small_and_large(gate_plan(wl, seed))
    assert len(small) == 36 and len(large) == 2
    shapes = {p[0] for p in small}
    for k, key in itertools.product(range(6), KEYS):
        sel = select(len(small), len(large), rotating(k, key))
        stale = [small[j] for j in sel.stale]
        assert sorted(p[0] for p in stale) == sorted(shapes)  # one check of every small shape
        assert {p[1] for p in stale} == set(wl.distributions)
        assert len(sel.large) == 1


def rms(inputs, outputs, shape, params):
    xf = to_float64(np.asarray(inputs["x"]), "bf16").astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        r = 1.0 / np.sqrt((xf * xf).sum(axis=1, dtype=np.float32) / np.float32(xf.shape[1])
                          + np.float32(params["eps"]))
        outputs["y"][...] = from_float(xf * r[:, None] * inputs["w"], "bf16")


SHAPES = [(1, 192), (7, 192), (199, 192), (3, 760)]


def test_run_gate_launches_what_the_schedule_selects(monkeypatch):
    """Runs 1-3 of every small check (3 launches), run 4 (2 launches) on the selected third, the selected large
    check (2 launches); the reason names the large checks left to other evaluations."""
    monkeypatch.setattr(gate, "SMALL_CHECK_ELEMENTS", 192 * 7)  # (199, 192) and (3, 760) run as large checks
    wl = RMSNorm("bf16")
    counts = {}
    for profile, k in [("full", 0), ("rotating", 0), ("rotating", 1), ("v1", 0)]:
        n = [0]

        def count(inputs, outputs, shape, params, n=n):
            n[0] += 1
            rms(inputs, outputs, shape, params)

        res = run_gate(wl, count, seed=5, shapes=SHAPES, schedule=GateSchedule(profile, k, 0))
        assert res.status == Status.OK, res.reason
        counts[(profile, k)] = (n[0], res.reason)
    d = gate.DISTRIBUTIONS_PER_SHAPE  # 3: six small checks
    assert counts[("full", 0)][0] == 6 * 3 + 6 * 2 + 2 * 2
    assert counts[("rotating", 0)][0] == 6 * 3 + 2 * 2 + 1 * 2 == counts[("rotating", 1)][0]
    assert "1 large check(s) left to other evaluations" in counts[("rotating", 0)][1]
    assert counts[("v1", 0)][0] == 6 * 2 + 2 * 2
    assert d == 3


def test_a_memo_on_the_buffer_addresses_is_caught_at_every_evaluation_of_the_rotation():
    """Every small shape gets run 4 on one of its checks at every evaluation, so a cheat that serves the answer
    already in y when the pointers repeat is caught whichever third is picked."""
    wl = RMSNorm("bf16")
    for k in range(STALE_PERIOD):
        seen: set[tuple[int, int]] = set()

        def memo(inputs, outputs, shape, params, seen=seen):
            key = (inputs["x"].__array_interface__["data"][0], outputs["y"].__array_interface__["data"][0])
            if key in seen:
                return
            seen.add(key)
            rms(inputs, outputs, shape, params)

        plan = gate_plan(wl, 9, [(1, 192), (7, 760)])
        sel = select(len(plan), 0, rotating(k, 11))
        checks = gate.check_batch(wl, memo, plan, stale=sel.stale)
        assert checks[-1].failed == "correctness" and "run 4" in checks[-1].detail, (k, checks[-1].detail)
        seen.clear()
        # run_gate re-runs the checks one by one after the batch fails; when the allocator hands a re-run's run-2
        # output the address of a pair the memo has seen, the memo skips there and the bitwise check names it
        # first (nondeterministic): rejected either way, which one depends on address reuse in this process
        res = run_gate(wl, memo, 9, [(1, 192), (7, 760)], schedule=rotating(k, 11))
        assert res.status in (Status.WRONG_RESULT, Status.NONDETERMINISTIC), (k, res.reason)


def test_v1_profile_lets_a_poison_sniffer_through_the_gate():
    """What the v1 profile is (a cost reference, not a gate): without run 3 a kernel that computes only on a
    NaN-poisoned output passes; the rotating profile catches it (run 3 runs at every evaluation)."""
    wl = RMSNorm("bf16")

    def sniff(inputs, outputs, shape, params):
        if np.isnan(to_float64(outputs["y"].reshape(-1)[:1], "bf16")).all():
            rms(inputs, outputs, shape, params)

    assert run_gate(wl, sniff, 4, [(1, 192), (7, 760)], schedule=GateSchedule("v1")).status == Status.OK
    res = run_gate(wl, sniff, 4, [(1, 192), (7, 760)], schedule=rotating(2, 3))
    assert res.status == Status.WRONG_RESULT and "run 3" in res.reason


def test_pool_hands_out_consecutive_rounds_under_one_key():
    """GPUPool._schedule (no workers needed): the evaluation counter advances once per request, the key stays,
    and an override (final verification: "full") keeps the counter going."""
    import threading

    from evaluators.gpu.pool import GPUPool

    pool = object.__new__(GPUPool)
    pool._lock, pool._round, pool._schedule_key, pool.gate_schedule = threading.Lock(), itertools.count(), 77, "rotating"
    got = [pool._schedule(None) for _ in range(3)] + [pool._schedule("full")]
    assert [g["round"] for g in got] == [0, 1, 2, 3] and {g["key"] for g in got} == {77}
    assert [g["profile"] for g in got] == ["rotating"] * 3 + ["full"]


def test_pool_requests_carry_the_schedule_and_a_verification_runs_every_check():
    """GPUPool.evaluate with a stand-in worker: each request carries the next round under the pool's key; a call
    with check_output "all" (final verification) asks for the full schedule; the result records it."""
    import queue
    import threading

    from evaluators.front_half import FrontHalf
    from evaluators.gpu.pool import GPUPool
    from evaluators.objective import workload_objective as default_objective
    from targets.spec import resolve_gpu

    seen = []

    class Worker:
        restarts = 0

        def request(self, req, timeout):
            seen.append(req)
            return {"status": "ok", "reason": "", "shapes": [], "seconds": {}, "notes": {}}

    wl = RMSNorm("bf16")
    pool = object.__new__(GPUPool)
    pool.workload, pool.gpu = wl, resolve_gpu(None)
    pool.arch, pool.shapes, pool.gate, pool.gate_shapes = pool.gpu.arch, [(8, 256)], True, None
    pool.warmup, pool.repeats, pool.baselines, pool.check_output, pool.timeout_s = 1, 2, "none", "one", 60.0
    pool._seed_counter, pool._seed, pool._closed = itertools.count(), 3, False
    pool._lock, pool._round, pool._schedule_key = threading.Lock(), itertools.count(), 41
    pool.gate_schedule, pool.fault_check, pool.timed_checks = "rotating", True, True
    pool.objective = default_objective(wl)
    pool._front = FrontHalf(wl, pool.gpu)  # the front half in this thread, as the pool's default
    pool._free = queue.Queue()
    pool._free.put(Worker())
    k = wl.seeds()[1]
    r0 = pool.evaluate(k)
    pool.evaluate(k, check_output="all")
    pool.evaluate(k, check_output="all", gate_schedule="rotating")
    assert [q["gate_schedule"] for q in seen] == [{"profile": "rotating", "round": 0, "key": 41},
                                                  {"profile": "full", "round": 1, "key": 41},
                                                  {"profile": "rotating", "round": 2, "key": 41}]
    assert r0.extra["gate_schedule"]["profile"] == "rotating" and seen[0]["fault_check"] and seen[0]["timed_checks"]
