"""On a GPU: the gate cases (tests/gpu/kernels/gate_cases, cheating RMSNorm kernels and one honest control)
evaluated through GPUPool with the settings of ``experiment=rmsnorm_h200`` (search shapes, gate on, cached
baselines, one checked timed launch per shape), each getting the status its header names."""

from __future__ import annotations

import pytest

from evaluators.types import Status
from population.kernel import Kernel
from tests.gpu.rmsnorm_kernels import KERNELS, WARP_ROWS, rmsnorm_kernel

pytestmark = pytest.mark.gpu

# The ``pool`` fixture (tests/gpu/conftest.py): experiment=rmsnorm_h200 settings, torch baseline only.
POOL_SEED = 20261201

CASES = KERNELS / "gate_cases"


def case(name: str, knobs: tuple = WARP_ROWS) -> Kernel:
    return rmsnorm_kernel(CASES / f"{name}.cu", None, knobs)


def test_honest_control_is_ok(pool):
    r = pool.evaluate(case("rt_honest"))
    assert r.status == Status.OK, r.reason
    assert r.objective is not None and r.objective > 0 and r.extra["gate_version"] >= 2
    assert len(r.shapes) == 4


@pytest.mark.parametrize("name, reasons", [
    # eps dropped: wrong under `tiny` inputs; its fmaxf(mean(x^2), 1e-30f) also turns a NaN row's scale finite,
    # so `nonfinite` inputs catch it as well (want nan, got x * 1e15 * w), whichever the gate's rotation runs
    # first. tests/test_gate_case_drop_eps.py shows each distribution alone catches it on the CPU.
    ("rt_drop_eps", ("tiny inputs", "nonfinite inputs")),
])
def test_gate_rejects_the_cheat(pool, name, reasons):
    r = pool.evaluate(case(name))
    assert r.status == Status.WRONG_RESULT, (r.status, r.reason)
    assert "check failed" in r.reason and any(w in r.reason for w in reasons), r.reason


def test_poison_sniffer_is_rejected_before_any_gpu_time(pool):
    """rt_poison_sniff idles on %globaltimer to stay under the roofline: the race lint's time rule rejects it
    before the gate runs (its run 3, outputs pre-filled with finite values, catches it as well: on the CPU,
    tests/test_gate_v2_logic.py::test_poison_sniffer_is_caught_when_the_output_holds_finite_values)."""
    r = pool.evaluate(case("rt_poison_sniff"))
    assert r.status == Status.NONDETERMINISTIC, (r.status, r.reason)
    assert "static race lint: time_dependent" in r.reason and "%globaltimer" in r.reason
    assert "seconds" not in r.extra  # never reached a worker


def test_wrong_only_at_the_large_search_shape_is_rejected_at_every_evaluation(pool):
    k = case("rt_shape_search_only")
    for _ in range(3):
        r = pool.evaluate(k)
        assert r.status == Status.WRONG_RESULT, (r.status, r.reason)
        # the gate's large-regime shape or the checked timed launches at 16384 x 131072
        assert "8192x65544" in r.reason or ("16384" in r.reason and "131072" in r.reason)


def test_input_scratch_is_rejected_before_any_gpu_time(pool):
    r = pool.evaluate(case("rt_x_scratch"))
    assert r.status == Status.INPUT_MUTATED, (r.status, r.reason)
    assert "static input-store check" in r.reason and "'x'" in r.reason
    assert "seconds" not in r.extra  # never reached a worker


def test_shared_memory_race_gets_the_sanitizer_verdict(pool):
    from evaluators.gpu.sanitizer import find_sanitizer

    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer not installed")
    race = case("rt_smem_war_race", (("rows_per_cta", 1), ("row_iters", 4)))
    honest = case("rt_honest")
    verdicts = pool.sanitize([honest, race])
    assert verdicts[0].status == Status.OK, verdicts[0].reason
    assert verdicts[1].status == Status.SANITIZER, verdicts[1]
    assert "racecheck" in verdicts[1].reason or "output wrong" in verdicts[1].reason


def test_worker_keeps_serving_honest_kernels_after_the_cheats(pool, workload):
    r = pool.evaluate(workload.seeds()[1])
    assert r.status == Status.OK, r.reason


def test_read_far_past_an_input_faults_in_the_fault_check_and_costs_one_restart(pool):
    """tests/gpu/kernels/gate_extra/rt_oob_far.cu: a masked read 4 KiB past x; with x ending at an unmapped page
    the read faults (a sticky error: the worker answers, exits and is restarted once)."""
    k = rmsnorm_kernel(KERNELS / "gate_extra" / "rt_oob_far.cu")
    before = pool._sups[0].restarts
    r = pool.evaluate(k)
    assert r.status in (Status.WRONG_RESULT, Status.CRASH), (r.status, r.reason)
    assert "fault" in r.reason
    assert r.extra["worker_restarts"] == before + 1


def test_benchmark_inputs_written_during_timing_are_found_and_restored(pool, workload):
    """tests/gpu/kernels/gate_extra/rt_x_write_laundered.cu: flips a bit of x through a laundered pointer, only
    at the largest search shape; the fingerprints after the timed launches find it, and the inputs are restored
    (an honest kernel evaluated next is not rejected for the changed inputs)."""
    k = rmsnorm_kernel(KERNELS / "gate_extra" / "rt_x_write_laundered.cu")
    r = pool.evaluate(k)
    assert r.status == Status.INPUT_MUTATED, (r.status, r.reason)
    # the allow-list input-store check rejects the laundered store before any GPU time (it was only listed as
    # unproven before; InputSets.mutated itself is tested in tests/test_timed_checks.py)
    assert "static input-store check" in r.reason
    after = pool.evaluate(case("rt_honest"))
    assert after.status == Status.OK, after.reason
