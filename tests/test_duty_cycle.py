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

    draining_now = False

    def __init__(self):
        self.events: list[tuple[str, float]] = []

    def lease(self):
        return {}

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


def test_a_leased_bucket_is_the_parents_state_and_a_drain_file_lifts_it(tmp_path):
    clock = FakeClock()
    drain = tmp_path / "gpu0.drain"
    drain.write_text("")  # a killed run's file: removed, or it would lift every later bound
    parent = DutyCycle(0.05, burst_s=10.0, clock=clock, drain_path=drain)
    assert not drain.exists()
    parent.charge(12.5)  # credit -2.5
    env = parent.lease()
    assert env == {"PTXFORGE_LOCK_SHARE": "0.05", "PTXFORGE_LOCK_BURST": "10.0", "PTXFORGE_LOCK_CREDIT": "-2.5",
                   "PTXFORGE_LOCK_DRAIN": str(drain)}
    child = DutyCycle.from_env(env)
    assert (child.share, child.burst_s) == (0.05, 10.0)
    assert child.delay() == pytest.approx(50.0)  # 2.5 s of debt at 5 %
    with parent.draining():
        assert drain.exists() and child.delay() == 0.0  # a process already running is let go too
    assert not drain.exists() and child.delay() == pytest.approx(50.0, abs=0.1)
    assert DutyCycle.from_env({}) is None
    assert DutyCycle(1.0).lease() == {}  # no bound: nothing to pace
    with pytest.raises(ValueError, match="PTXFORGE_LOCK_CREDIT='x': not a number"):
        DutyCycle.from_env({**env, "PTXFORGE_LOCK_CREDIT": "x"})


def test_a_process_pacing_its_launches_holds_the_lock_within_the_share_at_every_launch():
    """R46's case: one process of 72 instrumented launches of ~2 s each. Charged only when it ended, it held the
    lock for minutes; paced per launch from the leased credit it never holds more than share * T + burst + one
    launch, and the parent's next process starts without a debt of more than one launch."""
    clock = FakeClock()
    parent = DutyCycle(0.05, burst_s=10.0, clock=clock)
    start = clock.t
    parent.wait(sleep=clock.sleep)
    child = DutyCycle.from_env(parent.lease())
    child._clock, child._t = clock, clock.t  # the process's own clock: the same wall time
    held = 0.0
    for launch_s in [2.0, 1.5, 3.0] * 24:
        child.wait(sleep=clock.sleep)
        clock.t += launch_s
        held += launch_s
        child.charge(launch_s)
        assert held <= 0.05 * (clock.t - start) + 10.0 + launch_s + 1e-9
        clock.t += 0.1  # the host's compare between launches
    parent.settle(held, child.credit())
    assert parent.delay() <= 3.0 / 0.05 + 1e-6  # at most one launch's debt left
    assert parent.stats()["charged_s"] == pytest.approx(held)
    assert held / (clock.t - start) == pytest.approx(0.05, rel=0.1)


RUN_TOOL_FAKE = '''#!{python}
import json, sys, time
print(json.dumps({{"paced": {paced}}}), flush=True)
time.sleep({sleep})
print(json.dumps({{"kernel": 0, "shape": [7, 4099], "ok": True}}))
print(json.dumps({{"lock_seconds": 0.5}}))
print("========= ERROR SUMMARY: 0 errors")
'''


@pytest.mark.parametrize("paced, finishes", [(5.0, True), (0.0, False)])
def test_seconds_a_tool_process_waits_for_credit_do_not_count_against_its_timeout(tmp_path, paced, finishes):
    import stat
    import subprocess
    import sys

    from evaluators.gpu.sanitizer import run_tool

    exe = tmp_path / "compute-sanitizer"
    exe.write_text(RUN_TOOL_FAKE.format(python=sys.executable, paced=paced, sleep=1.0))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    spec = tmp_path / "spec.json"
    spec.write_text("{}")
    if finishes:
        run = run_tool("memcheck", spec, 0.6, str(exe))
        assert (run.errors, run.lock_seconds) == (0, 0.5)
        assert run.replay == [{"kernel": 0, "shape": [7, 4099], "ok": True}]  # the paced line is no result
    else:
        with pytest.raises(subprocess.TimeoutExpired):
            run_tool("memcheck", spec, 0.6, str(exe))


def test_sanitize_leases_its_bucket_to_each_process_on_a_device_and_takes_back_its_credit(fake, monkeypatch, tmp_path):  # noqa: F811
    exe, log = fake
    text = open(exe).read().replace(
        'print(f"========= ERROR SUMMARY',
        'print(json.dumps({"lock_seconds": 1.0, "credit": -0.5}))\n'
        'open(os.environ["FAKE_LOG"] + ".env", "a").write(os.environ.get("PTXFORGE_LOCK_SHARE", "-") + " "'
        ' + os.environ.get("PTXFORGE_LOCK_DRAIN", "-") + "\\n")\n'
        'print(f"========= ERROR SUMMARY')
    open(exe, "w").write(text)
    monkeypatch.setenv("FAKE_RULES", "{}")
    wl = RMSNorm("bf16")
    drain = tmp_path / "gpu0.drain"
    duty = DutyCycle(0.5, burst_s=1.0, drain_path=drain)  # 0.5: the -0.5 debt is paid off in a second
    v = sanitize([wl.seeds()[0]], wl, arch="sm_90", exe=exe, device="0", duty=duty, tools=("memcheck",))
    assert v[0].status == Status.OK
    assert open(str(log) + ".env").read().split() == ["0.5", str(drain)]  # the lease reached the process
    assert duty.stats()["charged_s"] == pytest.approx(1.0)
    assert -0.5 <= duty.credit() < 0.5  # the process's credit taken over, not 1.0 - 1.0 charged again


@pytest.mark.parametrize("cap", [0, -1.0])
def test_a_gpu_pool_refuses_a_launch_cap_that_is_not_positive(cap):
    from evaluators.gpu.pool import GPUPool

    with pytest.raises(ValueError, match=rf"sanitizer_launch_s must be > 0 seconds or None, got {cap}"):
        GPUPool(RMSNorm("bf16"), sanitizer_launch_s=cap)
