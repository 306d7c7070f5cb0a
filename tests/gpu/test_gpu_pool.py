"""On a GPU: seeds pass the gate and benchmark; broken kernels are rejected with the right status and the
worker keeps serving."""

from __future__ import annotations

import pytest

from evaluators.types import Status
from workloads.rmsnorm import RMSNorm

pytestmark = pytest.mark.gpu

SMALL_BENCH = [(4096, 1024), (2048, 8192)]


@pytest.fixture(scope="module")
def workload():
    return RMSNorm("bf16")


@pytest.fixture(scope="module")
def pool(workload):
    from evaluators.gpu.pool import GPUPool

    p = GPUPool(workload, devices=[0], shapes=SMALL_BENCH, timeout_s=30, baseline_names=("torch",), repeats=10,
                seed=7)
    yield p
    p.close()


def test_seeds_pass_gate_and_benchmark(pool, workload):
    for k in workload.seeds():
        r = pool.evaluate(k)
        assert r.status == Status.OK, r.reason
        assert r.extra["gate_checks"] >= len(workload.gate_shapes)
        assert len(r.shapes) == len(SMALL_BENCH) and r.objective is not None and r.objective > 0
        for s in r.shapes:
            assert 0 < s.frac_copy <= 1.05 and s.time_us > 0
            assert {"torch", "naive"} <= set(s.speedups)
        assert r.resources.registers > 0 and r.occupancy.active_warps > 0


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_other_dtypes_pass_gate(dtype):
    from evaluators.gpu.pool import GPUPool

    wl = RMSNorm(dtype)
    with GPUPool(wl, devices=[0], shapes=[(1024, 4096)], baselines="none", naive_baseline=False,
                 baseline_names=()) as p:
        for k in wl.seeds():
            r = p.evaluate(k)
            assert r.status == Status.OK, r.reason


@pytest.mark.parametrize("defect, statuses, words", [
    (1, {Status.WRONG_RESULT}, "unwritten"),
    (2, {Status.NONDETERMINISTIC}, "launch_state"),  # static since gate rules version 8 (rule 5's .shared form)
    (3, {Status.WRONG_RESULT, Status.NONDETERMINISTIC}, "gate"),
    (4, {Status.TIMEOUT}, "killed"),
    (5, {Status.CRASH}, "fault"),
    (6, {Status.WRONG_RESULT}, "bounds"),
])
def test_broken_kernel_rejected_and_worker_survives(pool, workload, broken, defect, statuses, words):
    r = pool.evaluate(broken(defect))
    assert r.status in statuses, (r.status, r.reason)
    assert words in r.reason
    after = pool.evaluate(workload.seeds()[0])  # the next candidate evaluates fine
    assert after.status == Status.OK, after.reason


@pytest.mark.parametrize("n", [256, 4096, 65536, 262144])
def test_tuned_knob_sets_pass_gate(pool, workload, n):
    """The recommended template sets (row groups + row loop at small N, clusters with distributed shared memory
    at large N) pass the whole gate and run at the row length they were made for."""
    from workloads.rmsnorm import tuned_knobs

    k = workload.instantiate(tuned_knobs(n))
    shape = (max(8, (1 << 24) // n), n)
    r = pool.evaluate(k, shapes=[shape], baselines="none")
    assert r.status == Status.OK, r.reason
    assert r.extra["gate_checks"] >= len(workload.gate_shapes)
    assert [s.shape for s in r.shapes] == [shape] and 0 < r.shapes[0].frac_copy <= 1.05
