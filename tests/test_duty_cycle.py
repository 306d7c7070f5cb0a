"""The sanitizer's duty cycle (``evaluators.gpu.duty_cycle``): a token bucket over the seconds the replay holds
a GPU's timing lock, charged per process, lifted while the caller drains the owed verdicts; and how
``sanitizer.sanitize`` paces its tool processes with it (a stand-in tool that reports its lock seconds)."""

from __future__ import annotations

import json
import threading

import pytest

from evaluators.gpu.duty_cycle import DutyCycle
from evaluators.gpu.sanitizer import sanitize
from evaluators.types import Status
from tests.test_sanitizer_phases import fake, runs  # noqa: F401  (fixture)
from workloads.rmsnorm import RMSNorm


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t

    def sleep(self, cv, seconds):  # stands in for Condition.wait: time passes, nothing sleeps
        self.t += seconds


def test_the_share_of_lock_time_stays_bounded_over_any_run_of_processes():
    clock = FakeClock()
    duty = DutyCycle(0.1, burst_s=10.0, clock=clock)
    start, held = clock.t, 0.0
    for lock_s in [4.0, 6.0, 2.5, 9.0, 0.5, 12.0, 3.0] * 5:  # processes of uneven lock time
        duty.wait(sleep=clock.sleep)
        clock.t += lock_s + 2.0  # the process: its lock time plus start-up
        held += lock_s
        duty.charge(lock_s)
        # share * T + burst + the last process's own lock time (a process is never cut)
        assert held <= 0.1 * (clock.t - start) + 10.0 + lock_s + 1e-9
    elapsed = clock.t - start
    assert 0.09 < held / elapsed <= 0.1 + (10.0 + 12.0) / elapsed  # near the share, not far below it
    assert duty.stats()["charged_s"] == pytest.approx(held)
    assert duty.waited_s > 0


def test_credit_starts_full_and_is_capped_at_the_burst():
    clock = FakeClock()
    duty = DutyCycle(0.25, burst_s=8.0, clock=clock)
    assert duty.delay() == 0.0  # the first verdicts start at once
    duty.charge(10.0)  # credit 8 - 10 = -2: 2 / 0.25 = 8 s to wait
    assert duty.delay() == pytest.approx(8.0)
    clock.t += 10_000  # a long idle spell earns no more than the burst
    duty.charge(8.0)
    assert duty.delay() == 0.0
    duty.charge(0.5)
    assert duty.delay() == pytest.approx(2.0)


def test_draining_lifts_the_bound_and_wakes_a_waiting_process():
    duty = DutyCycle(0.01, burst_s=0.0)
    duty.charge(3600.0)  # an hour of debt at 1 %: 100 hours to wait
    assert duty.delay() > 3.5e5
    woke = threading.Event()
    t = threading.Thread(target=lambda: (duty.wait(), woke.set()), daemon=True)
    t.start()
    with duty.draining():
        assert duty.delay() == 0.0
        assert woke.wait(10.0), "draining did not wake the waiting process"
    t.join(10.0)
    assert duty.delay() > 3.5e5  # bound back after the drain


@pytest.mark.parametrize("share", [0.0, -0.1, 1.5])
def test_a_share_outside_zero_to_one_is_refused(share):
    with pytest.raises(ValueError, match=r"share must be in \(0, 1\]"):
        DutyCycle(share)


def test_a_gpu_pool_refuses_a_bad_duty_before_any_worker_starts():
    from evaluators.gpu.pool import GPUPool

    with pytest.raises(ValueError, match=r"sanitizer duty share must be in \(0, 1\], got 0.0"):
        GPUPool(RMSNorm("bf16"), sanitizer_duty=0)


class RecordingDuty:
    """Duck-typed DutyCycle: records the order of waits and charges."""

    def __init__(self):
        self.events: list[tuple[str, float]] = []

    def wait(self):
        self.events.append(("wait", 0.0))

    def charge(self, s):
        self.events.append(("charge", s))


def test_sanitize_waits_before_each_tool_process_and_charges_its_reported_lock_seconds(fake, monkeypatch):  # noqa: F811
    exe, log = fake
    # the stand-in tool prints the replay's last line, as sanitize_replay does
    text = open(exe).read().replace('print(f"========= ERROR SUMMARY',
                                    'print(json.dumps({"lock_seconds": 1.25}))\nprint(f"========= ERROR SUMMARY')
    open(exe, "w").write(text)
    monkeypatch.setenv("FAKE_RULES", json.dumps({"racecheck": {"1": "fixed"}}))
    wl = RMSNorm("bf16")
    duty = RecordingDuty()
    v = sanitize([wl.seeds()[0], wl.seeds()[1]], wl, arch="sm_90", exe=exe, timed_shapes=wl.search_shapes,
                 duty=duty)
    assert [x.status for x in v] == [Status.OK, Status.SANITIZER]
    n = len(runs(log))  # every process: the batches, the split, the timed phase
    assert n == 3 + 2 + 3  # fixed: memcheck, racecheck (split in two), synccheck; timed: three tools for kernel 0
    assert duty.events == [("wait", 0.0), ("charge", 1.25)] * n
    assert all("lock_seconds" not in r for x in v for r in [x.tools])  # the line is not a replay result


def test_a_process_that_reports_no_lock_seconds_is_charged_its_wall_time(fake, monkeypatch):  # noqa: F811
    exe, _ = fake
    monkeypatch.setenv("FAKE_RULES", "{}")
    wl = RMSNorm("bf16")
    duty = RecordingDuty()
    sanitize([wl.seeds()[0]], wl, arch="sm_90", exe=exe, duty=duty, tools=("memcheck",))
    (w, _), (c, s) = duty.events
    assert (w, c) == ("wait", "charge") and 0.0 < s < 60.0
