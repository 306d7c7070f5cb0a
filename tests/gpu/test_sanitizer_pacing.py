"""On a GPU: a compute-sanitizer process paces its instrumented launches to its leased share of the GPU's timing
lock (``duty_cycle``), and says which launch held the lock longest (R46 / R50, H200: a candidate's benchmark took
50 s at the end of a 130 s search while the verdicts ran)."""

from __future__ import annotations

import time

import pytest

from evaluators.gpu import sanitizer
from evaluators.gpu.duty_cycle import DutyCycle
from evaluators.types import Status
from workloads.rmsnorm import RMSNorm

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck"])
def test_the_replay_holds_the_timing_lock_within_its_share_launch_by_launch(tmp_path, monkeypatch, tool):
    if sanitizer.find_sanitizer() is None:
        pytest.skip("compute-sanitizer not installed")
    runs = []
    real = sanitizer.run_tool
    monkeypatch.setattr(sanitizer, "run_tool", lambda *a, **k: runs.append(real(*a, **k)) or runs[-1])
    wl = RMSNorm("bf16")
    share = 0.2
    duty = DutyCycle(share, burst_s=0.0, drain_path=tmp_path / "gpu0.drain")  # no burst: every launch is paced
    t0 = time.perf_counter()
    v = sanitizer.sanitize([wl.seeds()[1]], wl, arch="sm_90", tools=(tool,), timed_shapes=wl.search_shapes,
                           device="0", duty=duty)[0]
    wall = time.perf_counter() - t0
    held = duty.stats()["charged_s"]
    longest = max((r.longest["s"] for r in runs if r.longest), default=0.0)
    print(f"\n{tool} over the template seed at share {share}: lock {held:.3f} s of {wall:.2f} s wall "
          f"({held / wall:.3f}); per process: " + "; ".join(f"{r.seconds:.1f} s, lock {r.lock_seconds}, longest "
                                                          f"{r.longest}" for r in runs))
    assert v.status == Status.OK, v.reason
    assert len(runs) == 2 and all(r.lock_seconds is not None and r.credit is not None for r in runs)
    assert held <= share * wall + longest + 1e-3, (held, wall, longest)


def test_a_launch_past_the_cap_is_deferred_and_runs_uncut_in_the_drain(tmp_path):
    """The template seed's racecheck launch at 32768 x 512 holds the lock ~0.8-1.5 s (R51): a cap of 0.1 s (fixed shapes: < 0.03 s) cuts
    it while candidates could be timed (a deferred SKIPPED verdict), and the same replay while the duty cycle
    drains runs to its clean verdict."""
    if sanitizer.find_sanitizer() is None:
        pytest.skip("compute-sanitizer not installed")
    wl = RMSNorm("bf16")
    duty = DutyCycle(1.0, drain_path=tmp_path / "gpu0.drain")
    kw = dict(arch="sm_90", tools=("racecheck",), timed_shapes=wl.search_shapes, device="0", duty=duty,
              launch_cap_s=0.1)
    v = sanitizer.sanitize([wl.seeds()[1]], wl, **kw)[0]
    assert (v.status, v.deferred) == (Status.SKIPPED, True), v.reason
    assert "[32768, 512]" in v.reason
    with duty.draining():
        v = sanitizer.sanitize([wl.seeds()[1]], wl, **kw)[0]
    assert (v.status, v.deferred) == (Status.OK, False), v.reason
