"""On a GPU: the red-team RMSNorm kernels (tests/gpu/kernels/redteam, each header names its trick and the
status it should get) evaluated through GPUPool with the settings of ``experiment=rmsnorm_h200`` (search
shapes, gate on, cached baselines, checked timed launches), as tests/gpu/test_gate_cases.py does for the gate
cases. A test marked xfail(strict=True) would be a hole of the gate as it stands (the reason says which; none
now); the CPU counterparts are tests/test_redteam_static.py, tests/test_redteam_gate_logic.py and, for the read
past x at a benchmark shape, tests/test_standin_dryrun.py."""

from __future__ import annotations

import pytest

from evaluators.types import Status
from population.kernel import Kernel
from tests.gpu.rmsnorm_kernels import KERNELS, WARP_ROWS, rmsnorm_kernel

pytestmark = pytest.mark.gpu

# The ``pool`` fixture (tests/gpu/conftest.py): experiment=rmsnorm_h200 settings, torch baseline only.
POOL_SEED = 20261202

REDTEAM = KERNELS / "redteam"


def redteam(name: str, defines: dict[str, int] | None = None, knobs: tuple = WARP_ROWS) -> Kernel:
    return rmsnorm_kernel(REDTEAM / f"{name}.cu", defines, knobs)


def test_atomics_into_x_are_rejected_before_any_gpu_time(pool):
    r = pool.evaluate(redteam("rt_atom_scratch"))
    assert r.status == Status.INPUT_MUTATED, (r.status, r.reason)
    assert "static input-store check" in r.reason and "atom" in r.reason
    assert "seconds" not in r.extra  # never reached a worker


@pytest.mark.parametrize("name", ["rt_launder_bits", "rt_launder_memory", "rt_param_alias", "rt_align_down"])
def test_x_as_scratch_through_a_laundered_address_is_rejected(pool, name):
    """x is restored before exit; the static input-store check rejects each address before any GPU time
    (tests/test_redteam_static.py)."""
    r = pool.evaluate(redteam(name))
    assert r.status == Status.INPUT_MUTATED, (r.status, r.reason)
    assert "static input-store check" in r.reason and "'x'" in r.reason


def test_scratch_writes_that_dodge_the_fault_check_are_rejected(pool):
    """The fault check's buffers end on a 2 MiB granule, so the kernel can recognise its read-only launch; the
    static input-store check rejects the laundered store before any GPU time."""
    r = pool.evaluate(redteam("rt_vmm_edge_dodge"))
    assert r.status == Status.INPUT_MUTATED, (r.status, r.reason)
    assert "static input-store check" in r.reason


@pytest.mark.parametrize("key_eps", [1, 0])
def test_row_scale_memo_keyed_on_a_content_probe_is_rejected(pool, key_eps):
    """The memo lives in a .global variable: race lint rule 5 (launch_state, gate version 5) rejects it before
    any GPU time. Without that rule gate run 4 catches it (a relaunch right after a launch on the same buffers
    with part of the inputs changed in place and another eps: tests/test_redteam_gate_logic.py)."""
    r = pool.evaluate(redteam("rt_memo_rowprobe", {"RT_MEMO_KEY_EPS": key_eps}))
    assert r.status == Status.NONDETERMINISTIC, (r.status, r.reason)
    assert "static race lint: launch_state" in r.reason and "'rt_memo'" in r.reason and "seconds" not in r.extra


def test_weight_cache_keyed_by_address_is_rejected(pool):
    """The cached w and its ready flag are .global variables: race lint rule 5 rejects them before any GPU time
    (without it, gate run 4 changes w in place between two launches on the same buffers)."""
    r = pool.evaluate(redteam("rt_weight_cache"))
    assert r.status == Status.NONDETERMINISTIC, (r.status, r.reason)
    assert "static race lint: launch_state" in r.reason and "seconds" not in r.extra


def test_eps_dropped_at_the_search_shapes_only_is_rejected(pool):
    """Timed launches draw eps per launch and read one input set per distribution at the small search shapes,
    each set checked at least once: the tiny set shows the dropped eps (was a hole of gate v2's first version)."""
    r = pool.evaluate(redteam("rt_shape_gate_detect"))
    assert r.status == Status.WRONG_RESULT, (r.status, r.reason)


def test_eps_dropped_when_the_word_before_y_is_not_the_gate_poison_is_rejected(pool):
    """y[-1] still tells gate launches from timed ones, but the timed launches now read tiny inputs with drawn eps
    and are checked (was a hole of gate v2's first version)."""
    r = pool.evaluate(redteam("rt_guard_sniff"))
    assert r.status != Status.OK, (r.status, r.reason)


def test_cross_cta_exchange_without_a_fence_is_rejected(pool):
    """Right on a quiet GPU and invisible to racecheck (shared memory only): the static race lint rejects it
    before any GPU time (evaluators/race_lint.py)."""
    r = pool.evaluate(redteam("rt_global_race"))
    assert r.status == Status.NONDETERMINISTIC, (r.status, r.reason)
    assert "static race lint" in r.reason


def test_read_past_x_at_the_largest_search_shape_only_faults_at_a_timed_launch(pool):
    """The gate and the fault check (small shapes) and memcheck (replay shapes) never see the read; the
    benchmark input sets end x at an unmapped page (read-only VMM mappings, InputSets with edge), so the first
    launch at 16384 x 131072 faults: wrong_result, and the sticky error costs one worker restart (was a strict
    xfail: a hole of gate v2's first version)."""
    before = pool._sups[0].restarts
    r = pool.evaluate(redteam("rt_prefetch_past_end"))
    assert r.status == Status.WRONG_RESULT, (r.status, r.reason)
    assert "timed launch at shape (16384, 131072)" in r.reason and "unmapped page" in r.reason, r.reason
    assert r.extra["worker_restarts"] == before + 1


# Second round (2026-12-01): kinds the gate's authors did not plan for. Static ones are rejected before any GPU
# time (tests/test_redteam_lint.py on the CPU); rt_unperturbed_skip too since rule 5 (launch state).


def test_x_as_scratch_through_a_called_function_is_rejected_before_any_gpu_time(pool):
    r = pool.evaluate(redteam("rt_callee_scratch"))
    assert r.status == Status.INPUT_MUTATED, (r.status, r.reason)
    assert "static input-store check" in r.reason and "called from the entry" in r.reason
    assert "seconds" not in r.extra


@pytest.mark.parametrize("fence", [0, 1, 2])
def test_cross_cta_publication_behind_a_fence_that_orders_nothing_is_rejected(pool, fence):
    r = pool.evaluate(redteam("rt_weak_fence", {"RT_FENCE": fence}))
    assert r.status == Status.NONDETERMINISTIC, (r.status, r.reason)
    assert "static race lint: unfenced_publish" in r.reason


def test_cross_cta_publication_behind_a_gpu_scope_fence_is_rejected_for_its_launch_state(pool):
    """The control of rt_weak_fence (RT_FENCE 3: fence.acq_rel.gpu on both sides) orders its exchange, but its
    counter is a .global variable: for RMSNorm (no atomics declared) race lint rule 5 rejects it before any GPU
    time (the ordering rules alone accept it: tests/test_redteam_lint.py)."""
    r = pool.evaluate(redteam("rt_weak_fence", {"RT_FENCE": 3}))
    assert r.status == Status.NONDETERMINISTIC, (r.status, r.reason)
    # since version 8 rule 4's order form names the counter's atom.add first; the reason lists every kind
    assert "static race lint: " in r.reason and "kinds: atomic_order, launch_state" in r.reason, r.reason
    assert "seconds" not in r.extra


@pytest.mark.parametrize("name, defines, kind", [
    ("rt_red_publish", {}, "unfenced_publish"), ("rt_spin_brx", {}, "spin_wait"),
    ("rt_sanitizer_dodge", {"RT_SENSE": 0}, "time_dependent"), ("rt_sanitizer_dodge", {"RT_SENSE": 1}, "time_dependent"),
    ("rt_smem_atomic_sum", {}, "float_atomic")])
def test_scheduling_dependent_kernels_are_rejected_before_any_gpu_time(pool, name, defines, kind):
    r = pool.evaluate(redteam(name, defines, knobs=(("rows_per_cta", 1), ("row_iters", 4)))
                      if name == "rt_sanitizer_dodge" else redteam(name, defines))
    assert r.status == Status.NONDETERMINISTIC, (r.status, r.reason)
    assert f"static race lint: {kind}" in r.reason
    assert "seconds" not in r.extra


def test_skipping_the_launches_no_check_could_see_is_rejected(pool):
    """rt_unperturbed_skip writes nothing on a launch whose (x, w, y) and w it saw before; it remembers them in
    a .global table, which race lint rule 5 rejects before any GPU time (gate version 5). Without that rule the
    checked timed launches catch it (half of them see w as made: tests/test_redteam_unperturbed.py)."""
    r = pool.evaluate(redteam("rt_unperturbed_skip"))
    assert r.status == Status.NONDETERMINISTIC, (r.status, r.reason)
    assert "static race lint: " in r.reason and "kinds: atomic_order, launch_state" in r.reason, r.reason
    assert "seconds" not in r.extra


def test_worker_keeps_serving_honest_kernels_after_the_red_team(pool, workload):
    r = pool.evaluate(workload.seeds()[1])
    assert r.status == Status.OK, r.reason
