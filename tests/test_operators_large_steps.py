"""Large-step operators over the template's knob space: template jumps and the CMA-ES emitter."""

from __future__ import annotations

import numpy as np
import pytest

from evaluators.types import EvalResult, Status
from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.jump import TemplateJumpOperator, recommended_sets
from evolve.operators.knob_es import KnobESOperator, decode, encode
from evolve.tasks import build_tasks
from population.kernel import Kernel, LaunchConfig
from workloads.registry import get_workload
from workloads.rmsnorm import BENCHMARK_SHAPES, TUNED_KNOBS


@pytest.fixture(scope="module")
def wl():
    return get_workload("rmsnorm")


_NAIVE: dict[str, Kernel] = {}


def _parent(wl, knobs):
    """A kernel whose launch carries ``knobs`` (the operators read only the launch config of a parent)."""
    naive = _NAIVE.get(wl.dtype) or _NAIVE.setdefault(wl.dtype, wl.seeds()[0])
    k = wl.check_knobs(knobs)
    return Kernel(module=naive.module, entry=naive.entry, launch=LaunchConfig(block=(k["threads"], 1, 1),
                                                                              knobs=tuple(k.items())))


def _knobs(script):
    (edit,) = script.edits
    return dict(edit.knobs)


def test_jump_goes_to_the_tuned_set_of_the_task(wl):
    tasks = build_tasks(BENCHMARK_SHAPES)
    op = TemplateJumpOperator(recommended_rate=1.0)
    parent = _parent(wl, wl.default_knobs)
    rng = np.random.default_rng(1)
    for t in (0, 8, 10):
        ctx = OperatorContext(workload=wl, task=tasks[t])
        got = _knobs(op.propose(parent, ctx, rng))
        n = tasks[t].shapes[0][-1]
        assert got == wl.check_knobs(TUNED_KNOBS[n])
        if t == 0:
            assert sum(got[k] != wl.default_knobs[k] for k in got) >= 3, "a jump moves several knobs at once"
    assert len(recommended_sets(wl)) == len({tuple(sorted(v.items())) for v in TUNED_KNOBS.values()})


def test_jump_uniform_sets_are_valid_and_far(wl):
    op = TemplateJumpOperator(recommended_rate=0.0, crossover_rate=0.0)
    parent = _parent(wl, wl.default_knobs)
    rng = np.random.default_rng(2)
    dists = []
    for _ in range(30):
        got = _knobs(op.propose(parent, OperatorContext(workload=wl), rng))
        assert wl.check_knobs(got) == got and got != wl.default_knobs
        dists.append(sum(got[k] != wl.default_knobs[k] for k in got))
    assert np.mean(dists) > 4


def test_jump_crossover_takes_donor_knobs(wl):
    donor = _parent(wl, TUNED_KNOBS[262144])
    op = TemplateJumpOperator(recommended_rate=0.0, crossover_rate=1.0, mix=0.0)
    got = _knobs(op.propose(_parent(wl, wl.default_knobs), OperatorContext(workload=wl, inspirations=[(donor, None)]),
                            np.random.default_rng(0)))
    assert got == wl.check_knobs(TUNED_KNOBS[262144])


def test_encode_decode_round_trip(wl):
    space = wl.knob_space
    k = wl.check_knobs(TUNED_KNOBS[65536])
    assert decode(encode(k, space), space) == k
    x = encode(k, space) + 0.4
    assert decode(x, space) == k
    assert decode(np.full(len(space), 99.0), space) == {n: v[-1] for n, v in space.items()}


def _told(op, wl, script, objective, task=None):
    knobs = _knobs(script)
    kernel = _parent(wl, knobs)
    res = EvalResult(Status.OK if objective is not None else Status.WRONG_RESULT, objective=objective,
                     features={} if task is None else {"task": float(task)})
    op.reflect(kernel, res, OperatorContext(workload=wl))
    return knobs


def test_cma_generations_move_toward_better_sets(wl):
    """A synthetic objective that rewards more threads and more chunks: after a few generations the CMA-ES mean
    has moved up those ladders."""
    op = KnobESOperator(popsize=6, sigma0=1.5)
    parent = _parent(wl, wl.default_knobs)
    rng = np.random.default_rng(3)
    ctx = OperatorContext(workload=wl)
    space = wl.knob_space
    names = sorted(space)
    for _ in range(90):  # ~16 generations: twelve knobs, and shared-memory limits cut off some large sets
        try:
            s = op.propose(parent, ctx, rng)
        except NoProposal:
            continue
        k = _knobs(s)
        obj = 1.0 + space["threads"].index(k["threads"]) + space["max_chunks"].index(k["max_chunks"])
        _told(op, wl, s, obj)
    assert op.generations["all"] >= 3
    mean = op._es["all"].mean
    start = encode(wl.default_knobs, space)
    assert mean[names.index("threads")] > start[names.index("threads")]
    assert mean[names.index("max_chunks")] > start[names.index("max_chunks")]


def test_cma_state_round_trip_continues_identically(wl):
    parent = _parent(wl, wl.default_knobs)
    ctx = OperatorContext(workload=wl)

    def run(op, rng, n):
        out = []
        for _ in range(n):
            s = op.propose(parent, ctx, rng)
            out.append(_told(op, wl, s, 1.0 + len(out) % 3))
        return out

    a = KnobESOperator(popsize=4)
    rng_a = np.random.default_rng(7)
    run(a, rng_a, 6)
    import json

    state = json.loads(json.dumps(a.state_dict()))
    b = KnobESOperator(popsize=4)
    b.load_state(state)
    rng_b = np.random.default_rng(7)
    rng_b.bit_generator.state = rng_a.bit_generator.state
    assert run(a, rng_a, 6) == run(b, rng_b, 6)


def test_cma_is_per_task_and_failures_are_penalised(wl):
    tasks = build_tasks(BENCHMARK_SHAPES)
    op = KnobESOperator(popsize=4)
    parent = _parent(wl, wl.default_knobs)
    rng = np.random.default_rng(0)
    s = op.propose(parent, OperatorContext(workload=wl, task=tasks[2]), rng)
    op.propose(parent, OperatorContext(workload=wl, task=tasks[5]), rng)
    assert set(op._es) == {"2", "5"}
    k = _told(op, wl, s, None, task=2)
    assert op._memo["2"][tuple(sorted(k.items()))] == op.penalty
