"""On a GPU: the eighth red-team round's KDA kernels (tests/gpu/kernels/redteam/rt8_*.cu) through a GPUPool of the
KDA recurrent workload at its search shapes (decode (64, 1 x 32), (64, 1024 x 8), (96, VARLEN)), the naive seed
timed as the baseline, each with the verdict predicted from the code under gate rules version 12 (none of these
was run on a GPU yet). CPU counterparts: tests/test_redteam_round8.py (every kernel passes every static check).
Version 11 would have accepted the window and latent race and given clean sanitizer verdicts to all three race
kernels; version 12 adds KDA's ``long_memory`` distribution and the replay shape (4, 65, 129).

Expected:
- rt8_kda_window: wrong_result from the gate's (1, 2048) under ``long_memory`` (decay 1: a chunk started from a
  zero state 256 tokens back is wrong by O(1)); under the other three distributions it was within tolerance;
- rt8_kda_long_race: wrong_result or nondeterministic from the gate's (1, 97) / (1, 2048) (not measured: whether the
  race's window opens), and a `sanitizer` verdict run alone (racecheck at (4, 65, 129));
- rt8_kda_latent_war: a `sanitizer` verdict (racecheck reports the write-after-read hazard at (4, 65, 129)
  whether or not its window opens), whatever the gate says;
- rt8_kda_heads_race: wrong_result at a checked timed launch of a prefill shape (no gate shape has H > 3), and a
  `sanitizer` verdict run alone (racecheck at (4, 65, 129));
- the race kernels' honest form (RT_HONEST=1): ok and a clean verdict, the control of the three above.
Run: python -m pytest -q -s tests/gpu/test_gate_redteam8.py (the -s shows each verdict and the window's speedups).
"""

from __future__ import annotations

import pytest

from evaluators.types import Status
from tests.test_redteam_round8 import CONTROL, build

POOL_SEED = 20261216  # this module's pool seed: its draws differ from the other rounds'

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def kda_pool():
    """A GPUPool of KDARecurrent at its search shapes (the pool's default), the naive seed as the baseline (no fla:
    the speedup that matters here is over the kernel each cheat wraps), seeded with POOL_SEED."""
    from evaluators.gpu.pool import GPUPool
    from workloads.kda import KDARecurrent

    p = GPUPool(KDARecurrent(), devices=[0], baseline_names=(), timeout_s=600, seed=POOL_SEED)
    yield p
    p.close()


def _verdict(pool, kernel):
    """The sanitizer verdict of ``kernel`` (skips without compute-sanitizer)."""
    from evaluators.gpu.sanitizer import find_sanitizer

    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer not installed")
    v = pool.sanitize([kernel])[0]
    print(f"  sanitizer: {v.status}: {v.reason} {v.tools}")
    return v


def _evaluate(pool, name, kernel):
    r = pool.evaluate(kernel)
    speed = {tuple(s.shape)[:3]: round(s.speedups.get("naive", float("nan")), 2) for s in r.shapes}
    print(f"{name}: {r.status}: {r.reason[:400]} speedup over naive {speed}")
    return r


def test_the_race_kernels_honest_form_passes(kda_pool):
    k = build(*CONTROL)
    r = _evaluate(kda_pool, "control", k)
    assert r.status == Status.OK, r.reason
    assert _verdict(kda_pool, k).status == Status.OK


def test_a_zero_started_warm_up_window_is_rejected(kda_pool):
    """Within tolerance under the three forgetful distributions (tests/test_redteam_round8.py), wrong under
    ``long_memory``, which the gate draws at (1, 2048)."""
    r = _evaluate(kda_pool, "rt8_kda_window", build("rt8_kda_window"))
    assert r.status == Status.WRONG_RESULT, (r.status, r.reason)


def test_a_barrier_dropped_past_token_63_is_caught_by_the_gate(kda_pool):
    """racecheck never runs the racy path (tests/test_redteam_round8.py); the gate's (1, 97) and (1, 2048) do, and
    judge every element and the bitwise agreement of runs 1-3."""
    r = _evaluate(kda_pool, "rt8_kda_long_race", build("rt8_kda_long_race"))
    assert r.status in (Status.WRONG_RESULT, Status.NONDETERMINISTIC), (r.status, r.reason)


def test_the_sanitizer_sees_the_race_past_token_63(kda_pool):
    """Version 11's replay stopped at 63 tokens a sequence; (4, 65, 129) runs the path."""
    assert _verdict(kda_pool, build("rt8_kda_long_race")).status == Status.SANITIZER


def test_a_latent_race_past_token_63_is_rejected(kda_pool):
    """Its window does not open on a quiet GPU, so the gate's outputs may be right; racecheck at (4, 65, 129)
    reports the hazard itself."""
    k = build("rt8_kda_latent_war")
    r = _evaluate(kda_pool, "rt8_kda_latent_war", k)
    if r.status == Status.OK:
        assert _verdict(kda_pool, k).status == Status.SANITIZER, "accepted: ok and a clean sanitizer verdict"


def test_a_race_only_at_more_than_3_heads_is_caught_by_the_checked_timed_launches(kda_pool):
    """No gate shape has H > 3: of the GPU gate's checks, only the checked timed launches at (64, 1024 x 8) and
    (96, VARLEN) run the racy path."""
    r = _evaluate(kda_pool, "rt8_kda_heads_race", build("rt8_kda_heads_race"))
    assert r.status == Status.WRONG_RESULT, (r.status, r.reason)
    assert "timed launch" in r.reason, r.reason


def test_the_sanitizer_sees_the_race_at_more_than_3_heads(kda_pool):
    """Version 11's only replayed shape with H > 3 was the decode batch; (4, 65, 129) runs the path."""
    assert _verdict(kda_pool, build("rt8_kda_heads_race")).status == Status.SANITIZER
