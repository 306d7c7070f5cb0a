"""The cap on one sanitizer launch's hold of a GPU's timing lock (``sanitizer.run_tool``'s ``launch_cap_s``): a
process whose launch holds the lock past it is cut, the kernel's verdict is deferred to the drain
(``VerdictQueue``), and the rest of its batch is re-run without it. R50-R53 (H200, 2026-12-03): racecheck over
some elites at 32768 x 512 ran past 60 s a launch while a candidate's benchmark waited 50 s for the lock. The tool
here is a stand-in executable that prints the replay's lock lines; the real replay prints them
(tests/gpu/test_sanitizer_pacing.py)."""

from __future__ import annotations

import json
import threading

import pytest

from evaluators.gpu.sanitizer import LaunchCapExceeded, Verdict, VerdictQueue, run_tool, sanitize
from evaluators.types import Status
from tests.test_sanitizer_phases import stand_in
from workloads.rmsnorm import RMSNorm

# holds the lock SLOW seconds for the kernels named in SLOW_IDS at the timed shape, 0 s otherwise
FAKE = '''#!{python}
import json, os, sys, time
args = sys.argv[1:]
spec = json.load(open(args[args.index("--spec") + 1]))
slow = json.loads(os.environ.get("SLOW_IDS", "[]"))
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps([k["id"] for k in spec["kernels"]]) + "\\n")
timed = [32768, 512] in spec.get("edge_shapes", [])
for k in spec["kernels"]:
    print(json.dumps({{"begin": k["id"]}}), flush=True)
    print(json.dumps({{"lock": {{"kernel": k["id"], "shape": [32768, 512]}}}}), flush=True)
    time.sleep(float(os.environ["SLOW"]) if timed and k["id"] in slow else 0.0)
    print(json.dumps({{"unlock": 0.0}}), flush=True)
    print(json.dumps({{"kernel": k["id"], "shape": [7, 4099], "ok": True}}), flush=True)
print(json.dumps({{"lock_seconds": 0.0}}))
print("========= ERROR SUMMARY: 0 errors")
'''


@pytest.fixture
def tool(tmp_path, monkeypatch):
    monkeypatch.setenv("SLOW", "30")
    return stand_in(tmp_path, FAKE, monkeypatch)


def spec(tmp_path, ids, timed=True):
    p = tmp_path / "spec.json"
    p.write_text(json.dumps({"kernels": [{"id": i} for i in ids], "edge_shapes": [[32768, 512]] if timed else []}))
    return p


def test_a_launch_holding_the_lock_past_the_cap_is_cut_and_named(tool, tmp_path, monkeypatch):
    exe, _ = tool
    monkeypatch.setenv("SLOW_IDS", "[1]")
    with pytest.raises(LaunchCapExceeded) as e:
        run_tool("racecheck", spec(tmp_path, [0, 1]), 60.0, exe, launch_cap_s=0.3)
    assert (e.value.kernel, e.value.shape) == (1, [32768, 512]) and 0.3 < e.value.seconds < 5.0
    monkeypatch.setenv("SLOW", "0.6")  # uncapped (the drain): the same launch runs to its end
    run = run_tool("racecheck", spec(tmp_path, [0, 1]), 60.0, exe, launch_cap_s=0.3, capped=lambda: False)
    assert run.errors == 0 and [r["kernel"] for r in run.replay if "ok" in r] == [0, 1]
    assert not any("lock" in r or "unlock" in r for r in run.replay)  # the lock lines are no results


def test_sanitize_defers_the_cut_kernel_and_re_runs_its_batch_without_it(tool, monkeypatch):
    from evaluators.gpu.duty_cycle import DutyCycle

    exe, log = tool
    monkeypatch.setenv("SLOW_IDS", "[1]")
    wl = RMSNorm("bf16")
    ks = [wl.seeds()[1], wl.instantiate({"rows_per_cta": 2}), wl.instantiate({"rows_per_cta": 4})]
    v = sanitize(ks, wl, arch="sm_90", exe=exe, device="0", duty=DutyCycle(1.0), tools=("racecheck",),
                 timed_shapes=wl.search_shapes, launch_cap_s=0.3)
    assert [(x.status, x.deferred) for x in v] == [(Status.OK, False), (Status.SKIPPED, True), (Status.OK, False)]
    assert "at shape [32768, 512] held the GPU's timing lock over 0.3 s" in v[1].reason
    runs = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert runs == [[0, 1, 2], [0, 1, 2], [0, 2]]  # fixed shapes, the timed shape cut at kernel 1, then without it


def test_no_cap_while_the_duty_cycle_drains(tool, monkeypatch):
    from evaluators.gpu.duty_cycle import DutyCycle

    exe, _ = tool
    monkeypatch.setenv("SLOW_IDS", "[0]")
    monkeypatch.setenv("SLOW", "0.6")
    wl = RMSNorm("bf16")
    duty = DutyCycle(0.5)
    with duty.draining():
        v = sanitize([wl.seeds()[1]], wl, arch="sm_90", exe=exe, device="0", duty=duty, tools=("racecheck",),
                     timed_shapes=wl.search_shapes, launch_cap_s=0.3)
    assert (v[0].status, v[0].deferred) == (Status.OK, False)


def test_a_deferred_verdict_is_pending_until_the_drain_asks_it_again():
    draining = threading.Event()
    calls = []

    def run(kernels):
        calls.append((list(kernels), draining.is_set()))
        return [Verdict(Status.SKIPPED, "cut", deferred=True) if k == "slow" and not draining.is_set()
                else Verdict(Status.OK) for k in kernels]

    q = VerdictQueue(run, max_batch=8)
    try:
        q.submit(1, "fast")
        q.submit(2, "slow")
        q.submit(3, "withdrawn-later")
        got = []
        while len(got) < 2:
            got += q.collect(wait=False)
            threading.Event().wait(0.01)
        assert sorted(k for k, _ in got) == [1, 3]
        assert q.pending == [2] and q.deferrals == 1  # not handed back: its verdict is owed
        draining.set()
        back = q.collect(wait=True, timeout=10.0)
        assert [(k, v.status) for k, v in back] == [(2, Status.OK)]
        assert calls[-1] == (["slow"], True) and q.pending == []
        q.submit(4, "slow")  # deferred again, then withdrawn: an elite displaced meanwhile owes no verdict
        draining.clear()
        while q.deferrals < 2:
            threading.Event().wait(0.01)
        assert q.withdraw(4) and q.pending == []
    finally:
        q.close()


def test_a_cut_process_takes_its_replay_child_with_it(tmp_path, monkeypatch):
    """compute-sanitizer runs the replay as its child: killing the tool alone left the child running (holding the
    GPU, its lock and the output pipes). The stand-in forks a child that would write a file after 1.5 s."""
    import time

    marker = tmp_path / "child-lived"
    exe, _ = stand_in(tmp_path, f'''#!{{python}}
import json, os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5); open({str(marker)!r}, 'w').write('x')"])
print(json.dumps({{{{"lock": {{{{"kernel": 0, "shape": [32768, 512]}}}}}}}}), flush=True)
time.sleep(30)
''', monkeypatch)
    t0 = time.perf_counter()
    with pytest.raises(LaunchCapExceeded):
        run_tool("racecheck", spec(tmp_path, [0]), 60.0, exe, launch_cap_s=0.3)
    assert time.perf_counter() - t0 < 1.5  # no reader left waiting on a pipe the child held open
    time.sleep(1.7)
    assert not marker.exists(), "the tool's child outlived the kill"


def test_a_kernel_cut_just_before_the_drain_began_is_still_asked_in_it():
    started, release = threading.Event(), threading.Event()
    calls = []

    def run(kernels):
        calls.append(list(kernels))
        if len(calls) == 1:  # the batch in flight when the drain begins: cut, deferred after the drain's requeue
            started.set()
            release.wait(10.0)
            return [Verdict(Status.SKIPPED, "cut", deferred=True)]
        return [Verdict(Status.OK)]

    q = VerdictQueue(run, max_batch=8)
    try:
        q.submit(7, "slow")
        assert started.wait(10.0)
        threading.Timer(0.2, release.set).start()
        back = q.collect(wait=True, timeout=10.0)
        assert [(k, v.status) for k, v in back] == [(7, Status.OK)] and calls == [["slow"], ["slow"]]
    finally:
        q.close()


def test_the_pool_cuts_only_its_background_verdicts(monkeypatch):
    """A direct ``GPUPool.sanitize`` waits for its own verdicts, so no launch of it is cut (R58, H200 2026-12-03:
    rt_sanitizer_dodge's racecheck at 32768 x 512 ran past the 10 s cap and a direct call came back SKIPPED); the
    background queue, beside a search that times candidates, passes the pool's cap."""
    import itertools

    from evaluators.gpu import pool as pool_mod
    from evaluators.gpu.pool import GPUPool

    caps = []
    monkeypatch.setattr(pool_mod, "sanitize", lambda kernels, *a, launch_cap_s=None, **kw:
                        caps.append(launch_cap_s) or [Verdict(Status.OK) for _ in kernels])
    p = GPUPool.__new__(GPUPool)  # the sanitizer's call alone: no workers
    p.devices, p._next_device, p._seed, p._sanitize_calls = [0], itertools.count(), 1, itertools.count()
    p.workload, p.arch, p.sanitizer_tools, p.sanitizer_timeout_s = None, "sm_90", ("racecheck",), 60.0
    p.shapes, p.sanitizer_timed_tools, p.sanitizer_launch_s = [(32768, 512)], None, 10.0
    p._duty, p._verdicts = {"0": None}, None
    monkeypatch.setattr(pool_mod, "physical_device", lambda d: d)
    assert [v.status for v in p.sanitize(["k"])] == [Status.OK] and caps == [None]
    p.submit_verdict(1, "k")
    try:
        assert [k for k, _ in p._verdicts.collect(wait=True, timeout=10.0)] == [1] and caps == [None, 10.0]
    finally:
        p._verdicts.close()
