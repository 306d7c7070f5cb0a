"""On a GPU machine, under the Ray backend: one evaluation actor per GPU (each owning a GPUPool), ptxas as
Ray tasks. Seeds pass the gate and benchmark on every actor, each actor reports its GPU and ptxas target, a
hanging kernel and a faulting kernel each cost one candidate while the actor lives on, and a short search
through ``evaluator=ray`` records every evaluation. Needs Ray (``scripts/fetch_ray_wheel.sh`` on a machine
without network) and a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.types import Status
from workloads.rmsnorm import RMSNorm

pytestmark = pytest.mark.gpu
ray = pytest.importorskip("ray")

SMALL_BENCH = [(4096, 1024), (2048, 8192)]
CONF = str(Path(__file__).resolve().parents[2] / "conf")


@pytest.fixture(scope="module")
def cluster():
    from evaluators.gpu.devices import gpu_count
    from evaluators.ray import connect

    resources = connect(None, num_gpus=gpu_count(), ship_toolchain=False)
    yield resources
    ray.shutdown()


@pytest.fixture(scope="module")
def evaluator(cluster):
    from evaluators.ray import RayEvaluator

    ev = RayEvaluator(RMSNorm("bf16"), kind="gpu", depth=2,
                      options={"shapes": SMALL_BENCH, "timeout_s": 30, "baseline_names": ["torch"], "repeats": 10,
                               "seed": 7})
    yield ev
    ev.close()


def test_one_actor_per_gpu_reporting_its_device(cluster, evaluator):
    actors = evaluator.actors
    assert len(actors) == int(cluster["GPU"]) and evaluator.capacity == 2 * len(actors)
    for a in actors:
        assert a["kind"] == "gpu" and a["arch"].startswith("sm_") and a["copy_gbps"] > 100
        assert a["worker_pid"] and a["cuda_visible_devices"] not in (None, "")
    assert len({a["cuda_visible_devices"] for a in actors}) == len(actors)  # one GPU each


def test_elite_sanitizer_verdicts_come_back_through_the_actors(evaluator):
    """GPUPool's background compute-sanitizer verdicts, asked of and collected from the actors."""
    seed = RMSNorm("bf16").seeds()[0]
    assert evaluator.shapes == [list(s) for s in SMALL_BENCH] and evaluator.objective
    evaluator.submit_verdict(101, seed)
    got = evaluator.collect_verdicts(wait=True, timeout=300)
    assert [k for k, _ in got] == [101]
    assert got[0][1].status in (Status.OK, Status.SKIPPED), got[0][1].reason  # SKIPPED: no compute-sanitizer


def test_seeds_pass_on_the_actors(evaluator):
    wl = RMSNorm("bf16")
    for k in wl.seeds():
        r = evaluator.evaluate(k)
        assert r.status == Status.OK, r.reason
        assert r.objective is not None and r.objective > 0 and len(r.shapes) == len(SMALL_BENCH)
        assert r.extra["arch"].startswith("sm_") and r.extra["gpu"]
        assert "compile_task" not in r.extra, r.extra.get("compile_task")  # the Ray task's cubin was used
        assert r.extra["compile_cached"] is True


@pytest.mark.parametrize("defect, status, words", [(4, Status.TIMEOUT, "killed"), (5, Status.CRASH, "fault")])
def test_hang_or_fault_costs_one_candidate_and_the_actor_survives(evaluator, broken, defect, status, words):
    before = {a["index"]: a["pid"] for a in evaluator.actors}
    r = evaluator.evaluate(broken(defect))
    assert r.status == status and words in r.reason, (r.status, r.reason)
    assert "requeued" not in r.extra  # the worker died, not the actor
    after = evaluator.evaluate(RMSNorm("bf16").seeds()[0])
    assert after.status == Status.OK, after.reason
    assert {a["index"]: a["pid"] for a in evaluator.actors} == before and evaluator.lost == 0


def test_search_under_the_ray_backend(cluster, evaluator, tmp_path):
    evaluator.close()  # its actors hold every GPU; the search starts its own
    from hydra import compose, initialize_config_dir

    from archive.store import Store
    from evolve.app import run
    from evolve.config import register

    register()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=[f"run_dir={tmp_path}", "evaluator=ray", "evaluator.kind=gpu",
                                           "logger=none", "engine.progress=false", "knowledge=none",
                                           "engine.export=false", "budget.evaluations=24",
                                           "+evaluator.options.shapes=[[4096,1024],[2048,8192]]",
                                           "+evaluator.options.repeats=10"])
    summary = run(cfg)
    assert summary["evaluations"] == 24 and not summary["estimate"]
    with Store(tmp_path / "store.sqlite", readonly=True) as s:
        rows = s.candidates(with_ptx=False)
    evaluated = [r for r in rows if r.status in {str(x) for x in Status}]
    assert len(evaluated) == 24 and sum(r.status == "ok" for r in evaluated) >= 2
    assert summary["best_objective"] > 0
