"""On a GPU: a compute-sanitizer process paces its instrumented launches to its leased share of the GPU's timing
lock (``duty_cycle``: R46, H200 2026-12-02, one process of a batch held the lock ~60 s at the end of a search)."""

from __future__ import annotations

import time

import pytest

from evaluators.gpu.duty_cycle import DutyCycle
from evaluators.types import Status
from workloads.rmsnorm import RMSNorm

pytestmark = pytest.mark.gpu


def test_the_replay_holds_the_timing_lock_within_its_share_launch_by_launch(tmp_path):
    from evaluators.gpu.sanitizer import find_sanitizer, sanitize

    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer not installed")
    wl = RMSNorm("bf16")
    share = 0.2
    duty = DutyCycle(share, burst_s=0.0, drain_path=tmp_path / "gpu0.drain")  # no burst: every launch is paced
    t0 = time.perf_counter()
    v = sanitize([wl.seeds()[1]], wl, arch="sm_90", tools=("memcheck",), timed_shapes=wl.search_shapes,
                 device="0", duty=duty)[0]
    wall = time.perf_counter() - t0
    held = duty.stats()["charged_s"]
    print(f"memcheck over the template seed at share {share}: lock {held:.2f} s of {wall:.2f} s wall "
          f"({held / wall:.3f}); credit after {duty.credit():.2f} s")
    assert v.status == Status.OK, v.reason
    assert held > 0.5  # the timed shape's three launches under memcheck: ~1-2 s each (R14)
    # share * T plus one launch (the 32768 x 512 launch under memcheck: < 3 s, R14: 8.1 s for the process)
    assert held <= share * wall + 3.0, (held, wall)
    assert duty.credit() >= -3.0  # at most one launch's debt handed back
