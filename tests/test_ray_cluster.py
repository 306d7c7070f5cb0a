"""A real Ray cluster on this host: a head and two worker nodes (``ray.cluster_utils.Cluster``: separate
raylets, as separate hosts would run them), CPU evaluation actors with the static evaluator, ptxas as Ray tasks.

A search through the Ray backend must record exactly the rows an in-process static run records (ordered
tells, deterministic evaluator), also when an actor is killed (SIGKILL) mid-run or a whole node is stopped:
only in-flight candidates are re-evaluated, nothing is lost or duplicated in the store.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from hydra import compose, initialize_config_dir  # noqa: E402

from archive.store import Store  # noqa: E402
from evolve.app import run  # noqa: E402
from evolve.config import register  # noqa: E402
from evolve.engine import CHECKPOINT  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONF = str(REPO / "conf")
BUDGET = 16
EVAL_STATUSES = {"ok", "compile_error", "load_error", "launch_error", "timeout", "crash", "wrong_result",
                 "nondeterministic", "too_fast_to_be_true", "skipped"}


def _free_port() -> int:
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return int(so.getsockname()[1])


@pytest.fixture(scope="module")
def cluster():
    """Head (no CPU for work: the driver's host) plus two 3-CPU worker nodes, joined by this process."""
    from ray.cluster_utils import Cluster

    # The dashboard serves job submission (the sweep test); each node's agent needs its own port on one host.
    # Health checks every 0.5 s: a stopped node is declared dead in ~2 s instead of Ray's default ~30 s.
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": True, "dashboard_port": _free_port(),
        "dashboard_agent_listen_port": _free_port(),
        "_system_config": {"health_check_period_ms": 500, "health_check_timeout_ms": 500,
                           "health_check_failure_threshold": 3}})
    nodes = [c.add_node(num_cpus=3, dashboard_agent_listen_port=_free_port()) for _ in range(2)]
    c.wait_for_nodes()
    from evaluators.ray import connect

    connect(c.address, ship_toolchain=False)  # one host: the nodes already have this ptxas
    yield c, nodes
    ray.shutdown()
    c.shutdown()


def compose_run(run_dir: Path, *overrides: str):
    register()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=[f"run_dir={run_dir}", "evaluator=static", "logger=none",
                                            "engine.progress=false", "knowledge=none", "engine.export=false",
                                            f"budget.evaluations={BUDGET}", "seed=5", "engine.capacity=4", *overrides])


def rows(path: Path) -> list[tuple]:
    with Store(path, readonly=True) as s:
        return [(r.id, r.identity, r.status, r.operator, r.edit_text, r.objective, r.parent_ids, r.cell)
                for r in s.candidates(with_ptx=False)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same search with the in-process static evaluator."""
    d = tmp_path_factory.mktemp("reference")
    run(compose_run(d))
    return rows(d / "store.sqlite")


class FaultAt:
    """An evaluator proxy that runs ``faults[n](inner)`` just before its n-th evaluate call (other candidates are in
    flight then), then delegates."""

    def __init__(self, inner, faults):
        self.inner, self.faults = inner, dict(faults)
        self.capacity, self.estimate = inner.capacity, inner.estimate
        self.submit_verdict = self.collect_verdicts = None
        self._calls = itertools.count(1)

    def evaluate(self, kernel):
        fault = self.faults.pop(next(self._calls), None)
        if fault is not None:
            fault(self.inner)
        return self.inner.evaluate(kernel)

    def close(self):
        self.inner.close()


def test_executor_runs_tasks_on_the_cluster(cluster):
    from evaluators.ray import RayExecutor
    from evaluators.ray.actor import compile_task
    from evaluators.types import CompileError
    from workloads.registry import get_workload

    seed = get_workload("rmsnorm").seeds()[0]
    with RayExecutor() as ex:
        futs = [ex.submit(pow, 3, k) for k in range(4)]
        assert [f.result(timeout=120) for f in futs] == [1, 3, 9, 27]
        from evaluators.compile_executor import compile_ptx_job, make_compile_executor

        ce = make_compile_executor("ray", 2)  # engine.compile_executor=ray: the same executor, bounded
        seconds, cached = ce.submit(compile_ptx_job, seed.ptx, "sm_90").result(timeout=120)
        assert isinstance(ce, RayExecutor) and seconds > 0 and cached is False
        with pytest.raises(ZeroDivisionError):  # the callable's own exception, not Ray's wrapper
            ex.submit(divmod, 1, 0).result(timeout=120)
        done = ex.submit(compile_task, seed, "sm_90").result(timeout=120)
        assert done.ptxas_release and done.result.resources[seed.entry].registers > 0
        bad = ex.submit(compile_task, seed.ptx.replace("ret;", "ret_bogus;", 1), "sm_90").result(timeout=120)
        assert bad.result is None and isinstance(bad.outcome(), CompileError) and bad.error[1] is not None
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(pow, 2, 2)


def test_a_hung_worker_inside_a_ray_worker_loses_its_process_group_and_respawns(cluster):
    """What a GPU actor relies on, on a Ray worker of another node: GPUPool's Supervisor kills a hung worker's
    whole process group at the deadline and starts a fresh one (a CPU process stands in for the GPU worker,
    as in tests/test_gpu_supervisor.py)."""

    def supervise() -> tuple:
        from evaluators.gpu.supervisor import Supervisor
        from tests.test_gpu_supervisor import _alive, cpu_worker

        sup = Supervisor(0, {}, {}, startup_timeout_s=60, target=cpu_worker)
        first = sup.wait_ready()
        hung = sup.request({"behaviour": "hang"}, 1.0)
        gone = not _alive(first["pid"]) and not _alive(first["helper"])
        after = sup.request({"behaviour": "ok"}, 30.0)
        sup.close()
        return hung["status"], gone, after["status"], after["pid"] != first["pid"], sup.restarts

    assert ray.get(ray.remote(num_cpus=1)(supervise).remote(), timeout=300) == ("timeout", True, "ok", True, 1)


def test_actors_report_where_they_run_and_evaluate_like_the_static_evaluator(cluster):
    from evaluators.ray import RayEvaluator
    from evaluators.static import StaticEvaluator
    from workloads.registry import get_workload

    wl = get_workload("rmsnorm")
    local = StaticEvaluator(wl)
    with RayEvaluator(wl, kind="static", actors=2, depth=2, actor_cpus=1) as ev:
        assert ev.capacity == 4 and ev.estimate
        assert ev.submit_verdict is None and ev.collect_verdicts is None  # static: elites confirmed at once
        info = ev.actors
        assert len(info) == 2 and all(a["arch"] == "sm_90" and a["gpu"] == "h200" for a in info)
        assert len({a["node_id"] for a in info}) == 2, "SPREAD: one actor per node"
        seeds = wl.seeds()
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(ev.evaluate, seeds + seeds))
    for k, r in zip(seeds + seeds, got):
        want = local.evaluate(k)
        assert r.status == want.status and r.objective == pytest.approx(want.objective)
        assert r.resources == want.resources and r.features == want.features
        assert r.extra["compile_host"] and "compile_task" not in r.extra  # the task's cubin was used
        assert r.extra["ptxas_cached"] is True  # ... so the actor did not run ptxas again


def test_search_survives_an_actor_killed_and_a_node_stopped_mid_run(cluster, reference, tmp_path):
    """SIGKILL of an actor (at the 6th evaluation), then a whole node stopped (at the 12th): the search records
    exactly the reference rows, no crash, and the actors left run elsewhere."""
    from evaluators.ray import RayEvaluator
    from workloads.registry import get_workload

    c, nodes = cluster
    killed, stopped = [], []

    def kill(ev):
        killed.append(ev.actors[0]["pid"])
        os.kill(killed[0], signal.SIGKILL)

    def stop_node(ev):
        victim = next(n for n in nodes if n.node_id == ev.actors[-1]["node_id"])
        stopped.append(victim)
        c.remove_node(victim, allow_graceful=False)

    ev = RayEvaluator(get_workload("rmsnorm"), kind="static", actors=2, depth=2, actor_cpus=1)
    try:
        summary = run(compose_run(tmp_path, "evaluator.backend=ray"), evaluator=FaultAt(ev, {6: kill, 12: stop_node}))
        assert killed and stopped and summary["evaluations"] == BUDGET
        assert ev.lost >= 2 and all(a["pid"] != killed[0] for a in ev.actors)
        assert stopped[0].node_id not in {a["node_id"] for a in ev.actors}
        with Store(tmp_path / "store.sqlite", readonly=True) as s:
            crashes = [r.reason for r in s.candidates(with_ptx=False) if r.status == "crash"]
        assert not crashes, crashes
        got = rows(tmp_path / "store.sqlite")
        assert got == reference  # same rows, same order, same objectives: the faults cost nothing but time
        assert sum(r[2] in EVAL_STATUSES for r in got) == BUDGET
    finally:
        for n in stopped:  # give the module's cluster its second node back
            nodes.remove(n)
            nodes.append(c.add_node(num_cpus=3, dashboard_agent_listen_port=_free_port()))
        c.wait_for_nodes()


def _count(path: Path) -> int:
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        try:
            return int(con.execute("SELECT COUNT(*) FROM candidates").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_driver_kill9_resumes_on_the_cluster(cluster, reference, tmp_path):
    """``python -m evolve evaluator=ray`` joins the cluster; SIGKILL of the driver mid-run, then the same
    command resumes and ends with the rows of an uninterrupted run."""
    c, _ = cluster
    cmd = [sys.executable, "-m", "evolve", "evaluator=ray", "evaluator.kind=static", f"evaluator.ray.address={c.address}",
           "evaluator.ray.ship_toolchain=false",
           "logger=none", f"budget.evaluations={BUDGET}", "engine.progress=false", "engine.export=false",
           "knowledge=none", "seed=5", "engine.capacity=4", f"hydra.run.dir={tmp_path}"]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while _count(tmp_path / "store.sqlite") < 6:
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no progress within 300 s"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert 6 <= _count(tmp_path / "store.sqlite") < len(reference)
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resumed from checkpoint" in out.stderr
    assert rows(tmp_path / "store.sqlite") == reference
    with Store(tmp_path / "store.sqlite", readonly=True) as s:
        state = s.load_checkpoint(CHECKPOINT)
        assert state["budget"]["evaluations"] == BUDGET and state["pending"] == []


def test_sweep_runs_as_ray_jobs(cluster, tmp_path):
    """``python -m evolve -m hydra/launcher=ray_jobs``: each sweep job a Ray job (here 0 GPUs per job, static
    evaluator), each run dir complete."""
    c, _ = cluster
    url = f"http://{c.head_node.address_info['webui_url']}"
    cmd = [sys.executable, "-m", "evolve", "-m", "hydra/launcher=ray_jobs", f"hydra.launcher.address={url}",
           "hydra.launcher.gpus_per_job=0", "hydra.launcher.poll_s=0.2", "evaluator=static", "logger=none",
           "budget.evaluations=3", "engine.progress=false", "knowledge=none", "engine.export=false", "seed=0,1",
           f"hydra.sweep.dir={tmp_path}"]
    out = subprocess.run(cmd, cwd=REPO, env={**os.environ, "WANDB_MODE": "disabled"}, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    runs = sorted(p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert [p.name.split("-")[0] for p in runs] == ["0", "1"] and all("seed=" in p.name for p in runs)
    for p in runs:
        assert (p / "summary.json").is_file()
        with Store(p / "store.sqlite", readonly=True) as s:
            assert sum(r.status in EVAL_STATUSES for r in s.candidates(with_ptx=False)) == 3
    assert (out.stdout + out.stderr).count(": SUCCEEDED (") == 2
