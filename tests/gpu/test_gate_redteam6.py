"""On a GPU: the sixth red-team round's kernels (tests/gpu/kernels/redteam, README: sixth round) through GPUPool
with the settings of ``experiment=rmsnorm_h200``, each with the status its header names under gate rules version
10. CPU counterparts: tests/test_redteam_round6.py (which also checks that this module's POOL_SEED gives the
replay's drawn conditions a racy path for each replay dodge at each of the pool's first eight sanitize calls).

Expected at the next GPU session (version 9 in brackets, predicted from the code: none of these was run there):
- rt_cluster_exit_race: nondeterministic before any GPU time (race lint rule 7, ``cluster_lifetime``) [ok; the
  read of an exited peer's shared memory lands before the memory is reused almost always, and racecheck reports
  hazards between accesses, not accesses to a block that has exited: clean verdict predicted, not measured];
  its honest control (RT_EXIT_SYNC=1) ok with a clean sanitizer verdict;
- rt_local_spin_dodge: nondeterministic before any GPU time (rule 1 traced through the local copy: spin_wait)
  [ok, clean verdict: racecheck runs the barrier path, the flag is global memory racecheck does not track];
- rt_cluster_of_one: nondeterministic before any GPU time (spin_wait: a cluster of one CTA is no cluster launch)
  [ok: the pair of CTAs is dispatched together, racecheck sees no shared memory race];
- rt_replay_refill_dodge, rt_replay_scale_dodge, rt_replay_seed_dodge: ok from the gate (the race latent), then a
  racecheck verdict (the replay draws each launch's refill pattern and input distribution, from a seed of its
  own) [ok with a clean verdict: every replayed launch read normal rows of seed 7 + i into all-ones outputs].
"""

from __future__ import annotations

import pytest

from evaluators.types import Status
from tests.gpu.rmsnorm_kernels import DODGE, REDTEAM, WARP_ROWS, redteam, rmsnorm_kernel, sanitized

POOL_SEED = 20261208  # the pool fixture's seed (tests/gpu/conftest.py): its draws differ from the other rounds'
CLUSTER2 = (("rows_per_cta", 8), ("cluster", 2))

pytestmark = pytest.mark.gpu


def test_a_cluster_that_drops_its_exit_barrier_is_rejected_before_any_gpu_time(pool):
    r = pool.evaluate(redteam("rt_cluster_exit_race", CLUSTER2))
    assert r.status == Status.NONDETERMINISTIC, (r.status, r.reason)
    assert "static race lint: cluster_lifetime" in r.reason and "seconds" not in r.extra


def test_the_same_cluster_exchange_with_its_exit_barrier_is_ok(pool):
    """The control: rt_cluster_exit_race with the trailing cluster.sync() (the template's form) passes the gate,
    the checked timed launches and the sanitizer (racecheck, memcheck and synccheck over distributed shared
    memory)."""
    k = rmsnorm_kernel(REDTEAM / "rt_cluster_exit_race.cu", {"RT_EXIT_SYNC": 1}, CLUSTER2)
    status, verdict = sanitized(pool, k)
    assert (status, verdict) == (Status.OK, Status.OK)


def test_a_wait_through_a_local_copy_is_rejected_before_any_gpu_time(pool):
    r = pool.evaluate(redteam("rt_local_spin_dodge", DODGE))
    assert r.status == Status.NONDETERMINISTIC, (r.status, r.reason)
    assert "static race lint: spin_wait" in r.reason and "seconds" not in r.extra


def test_a_cluster_of_one_cta_is_no_cluster_launch(pool):
    r = pool.evaluate(redteam("rt_cluster_of_one", WARP_ROWS))
    assert r.status == Status.NONDETERMINISTIC, (r.status, r.reason)
    assert "static race lint: spin_wait" in r.reason and "seconds" not in r.extra


@pytest.mark.parametrize("name", ["rt_replay_refill_dodge", "rt_replay_scale_dodge", "rt_replay_seed_dodge"])
def test_a_sanitizer_dodge_keyed_on_the_replays_former_conditions_is_caught(pool, name):
    """Gate rules version 10: the replay's launches draw their refill pattern and input distribution (and its
    inputs' seed is drawn per call), so the racy path runs under racecheck (or a gate or checked timed launch
    already saw the race)."""
    from evaluators.gpu.sanitizer import find_sanitizer

    r = pool.evaluate(redteam(name, DODGE))
    if r.status != Status.OK:
        assert r.status in (Status.NONDETERMINISTIC, Status.WRONG_RESULT), (r.status, r.reason)
        return
    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer not installed")
    v = pool.sanitize([redteam(name, DODGE)])[0]
    assert v.status == Status.SANITIZER, (v.reason, v.tools)
    assert v.tools["racecheck"]["clean"] is False and v.seed is not None, v.tools
