"""On a GPU: the seventh red-team round's kernels (tests/gpu/kernels/redteam, README: seventh round) through GPUPool
with the settings of ``experiment=rmsnorm_h200``, each with the status its header names under gate rules version
11. CPU counterparts: tests/test_redteam_round7.py.

Expected at the next GPU session (version 10 in brackets, predicted from the code: none of these was run there):
- rt_global_lww_clock (and RT_VIA_CP=1): nondeterministic before any GPU time (race lint rule 8,
  ``global_exchange``) [ok with a clean sanitizer verdict: racecheck runs the barrier path];
- rt_mbarrier_race_clock RT_FORM 0, 1 and 2: nondeterministic before any GPU time (rule 4's mbarrier form,
  ``atomic_order``) [ok, clean verdict];
- rt_laundered_state RT_SPACE 0 and 1: nondeterministic before any GPU time (rule 5's address form,
  ``launch_state``) [ok, clean verdict, on rt_local_state's and rt_shared_state's premise that the counter
  survives between launches];
- rt_guarded_init_state: nondeterministic before any GPU time (rule 5's ``.local`` form: a guarded store counts
  only for a load under the same guard) [ok, clean verdict, on rt_local_state's premise];
- rt_laundered_state RT_SPACE 2: ok from the gate (the race latent) and a clean sanitizer verdict, predicted: the
  load names y, and no check of version 11 sees that it reads local memory (a strict xfail).
"""

from __future__ import annotations

import pytest

from evaluators.types import Status
from tests.gpu.rmsnorm_kernels import DODGE, REDTEAM, rmsnorm_kernel

POOL_SEED = 20261215  # the pool fixture's seed (tests/gpu/conftest.py): its draws differ from the other rounds'

pytestmark = pytest.mark.gpu

STATIC = [
    ("rt_global_lww_clock", {}, "global_exchange"),
    ("rt_global_lww_clock", {"RT_VIA_CP": 1}, "global_exchange"),
    ("rt_mbarrier_race_clock", {"RT_FORM": 0}, "atomic_order"),
    ("rt_mbarrier_race_clock", {"RT_FORM": 1}, "atomic_order"),
    ("rt_mbarrier_race_clock", {"RT_FORM": 2}, "atomic_order"),
    ("rt_laundered_state", {"RT_SPACE": 0}, "launch_state"),
    ("rt_laundered_state", {"RT_SPACE": 1}, "launch_state"),
    ("rt_guarded_init_state", {}, "launch_state"),
]


@pytest.mark.parametrize("name, defines, kind", STATIC)
def test_each_kernel_is_rejected_before_any_gpu_time(pool, name, defines, kind):
    r = pool.evaluate(rmsnorm_kernel(REDTEAM / f"{name}.cu", defines, DODGE))
    assert r.status == Status.NONDETERMINISTIC, (r.status, r.reason)
    assert f"static race lint: {kind}" in r.reason and "seconds" not in r.extra


def test_a_counter_read_at_y_plus_a_laundered_distance_is_caught(pool):
    """No static rule sees the load read local memory (its address names y, the output), so the GPU gate runs it
    and passes it; the sanitizer verdict catches it: on the H200 (2026-12-02, R21, gate rules version 11) the
    pool gave ``ok`` and racecheck reported 253 hazards over the replay. Predicted before: a clean verdict (the
    replay, a fresh process, would see the barrier path); that the replay took the racy path is measured, why is
    not established (the count lives in ``.local`` memory, whose contents under the tool the kernel does not
    control). The static gap stays open (GATE.md, "Known gaps")."""
    from evaluators.gpu.sanitizer import find_sanitizer

    k = rmsnorm_kernel(REDTEAM / "rt_laundered_state.cu", {"RT_SPACE": 2}, DODGE)
    r = pool.evaluate(k)
    print(f"rt_laundered_state RT_SPACE 2: {r.status}: {r.reason}")  # which judge caught it, when one did
    if r.status != Status.OK:
        assert r.status in (Status.NONDETERMINISTIC, Status.WRONG_RESULT), (r.status, r.reason)
        return
    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer not installed")
    v = pool.sanitize([k])[0]
    print(f"rt_laundered_state RT_SPACE 2 sanitizer: {v.status}: {v.reason} {v.tools}")
    assert v.status == Status.SANITIZER, (v.reason, v.tools)
