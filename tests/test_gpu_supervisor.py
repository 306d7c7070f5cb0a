"""The supervisor's deadline, process-group kill and respawn, with a CPU worker process standing in for CUDA.

The worker here is a real spawned process that behaves like a GPU worker that hangs, dies or reports a sticky
error; what is under test is the supervisor's handling of real processes, pipes and process groups.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from evaluators.gpu.supervisor import Supervisor, WorkerStartError
from evaluators.types import Status


def cpu_worker(conn, device, workload_spec, config):
    os.setpgrp()
    if config.get("fail_start"):
        conn.send({"op": "ready", "ok": False, "error": "CUDA init failed (planted)"})
        return
    helper = subprocess.Popen(["sleep", "1000"])  # a grandchild in the same group: must die with the worker
    conn.send({"op": "ready", "ok": True, "device": f"cpu{device}", "copy_gbps": 1.0, "helper": helper.pid,
               "pid": os.getpid(), "env": os.environ.get("CUDA_VISIBLE_DEVICES")})
    while True:
        req = conn.recv()
        what = req.get("behaviour")
        if req.get("op") == "stop":
            helper.kill()
            return
        if what == "hang":
            time.sleep(1000)
        if what == "die":
            os._exit(9)
        conn.send({"status": "ok" if what == "ok" else "crash", "reason": what, "pid": os.getpid(),
                   "fatal": what == "fatal"})
        if what == "fatal":
            os._exit(3)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


@pytest.fixture
def sup():
    s = Supervisor(3, {"_target_": "workloads.rmsnorm.RMSNorm"}, {}, startup_timeout_s=60, target=cpu_worker)
    yield s
    s.close()


def test_pinned_device_and_ok_request(sup, monkeypatch):
    info = sup.wait_ready()
    assert info["env"] == "3" and info["device"] == "cpu3"
    r = sup.request({"behaviour": "ok"}, timeout_s=10)
    assert r["status"] == "ok" and r["pid"] == info["pid"] and sup.restarts == 0


def test_deadline_kills_process_group_and_respawns(sup):
    info = sup.wait_ready()
    t0 = time.perf_counter()
    r = sup.request({"behaviour": "hang"}, timeout_s=1.5)
    assert r["status"] == Status.TIMEOUT.value and "killed" in r["reason"]
    assert 1.4 < time.perf_counter() - t0 < 20
    time.sleep(0.3)
    assert not _alive(info["pid"]) and not _alive(info["helper"]), "the whole process group must be gone"
    assert sup.restarts == 1
    r = sup.request({"behaviour": "ok"}, timeout_s=10)  # the next candidate is served by a fresh worker
    assert r["status"] == "ok" and r["pid"] != info["pid"]


def test_worker_death_is_crash_then_respawn(sup):
    first = sup.wait_ready()["pid"]
    r = sup.request({"behaviour": "die"}, timeout_s=10)
    assert r["status"] == Status.CRASH.value and "exit code 9" in r["reason"]
    r = sup.request({"behaviour": "ok"}, timeout_s=10)
    assert r["status"] == "ok" and r["pid"] != first


def test_fatal_reply_respawns_before_next_request(sup):
    first = sup.wait_ready()["pid"]
    r = sup.request({"behaviour": "fatal"}, timeout_s=10)
    assert r["status"] == "crash" and sup.restarts == 1
    r = sup.request({"behaviour": "ok"}, timeout_s=10)
    assert r["status"] == "ok" and r["pid"] != first


def test_failed_start_raises_with_message():
    s = Supervisor(0, {"_target_": "workloads.rmsnorm.RMSNorm"}, {"fail_start": True}, startup_timeout_s=30, target=cpu_worker)
    with pytest.raises(WorkerStartError, match="planted"):
        s.wait_ready()
    s.close()
