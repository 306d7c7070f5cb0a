"""Multi-task search: shape buckets (evolve.tasks), the task dimension of the archive, the engine's task choice,
transfers to neighbouring tasks, per-task QD and resume; the best-library objective (evaluators.objective)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hash_evaluator import hash_result

from archive.grid import GridArchive, default_dimensions
from archive.store import Store
from evaluators.objective import ObjectiveSpec, best_library_speedups, evaluate_objective, reference_of
from evaluators.types import EvalResult, ShapeResult, Status
from evolve.algorithms.map_elites import MapElites
from evolve.budget import Budget
from evolve.engine import CHECKPOINT, TRANSFER, Engine, EngineSettings
from evolve.operators.registry import build_operators
from evolve.selection import OperatorSelector
from evolve.tasks import TASK_FEATURE, Task, TaskSet, best_per_task, build_tasks, midpoint_edges, task_stats
from workloads.registry import get_workload
from workloads.rmsnorm import BENCHMARK_SHAPES


# ------------------------------------------------------------------------------------------------ tasks
def test_midpoint_edges_put_one_length_per_bucket():
    assert midpoint_edges([256, 512, 1024, 1024]) == [362, 724]


def test_build_tasks_from_benchmark_shapes():
    ts = build_tasks(BENCHMARK_SHAPES)
    assert len(ts) == 11
    assert [t.shapes for t in ts.tasks][:2] == [((32768, 256),), ((32768, 512),)]
    assert ts[0].lo == 0 and ts[-1].hi is None
    assert ts.task_of(1).index == 0 and ts.task_of(362).index == 0 and ts.task_of(363).index == 1
    assert ts.task_of(10**7).index == 10 and ts.task_of(3000).index == 4 and ts.task_of(6144).index == 5
    assert ts[4].name == "2896<N<=5792" and ts[0].name == "N<=362" and ts[10].name == "N>185363"
    assert TaskSet.from_json(ts.to_json()) == ts


def test_build_tasks_with_explicit_edges_groups_shapes():
    ts = build_tasks(BENCHMARK_SHAPES, [768, 3072, 49152])
    assert [len(t.shapes) for t in ts.tasks] == [2, 2, 4, 3]


@pytest.mark.parametrize("edges, msg", [([3000, 1000], "increasing"), ([100], "holds none"), ([0, 5], "positive")])
def test_bad_edges_name_the_key(edges, msg):
    with pytest.raises(ValueError, match=rf"tasks.edges.*{msg}"):
        build_tasks(BENCHMARK_SHAPES, edges)


def test_taskset_rejects_gaps_and_bounded_last():
    with pytest.raises(ValueError, match="starts at 10"):
        TaskSet((Task(0, 0, 5, ((1, 5),)), Task(1, 10, None, ((1, 20),))))
    with pytest.raises(ValueError, match="unbounded"):
        TaskSet((Task(0, 0, 5, ((1, 5),)),))
    with pytest.raises(ValueError, match="outside"):
        TaskSet((Task(0, 0, 5, ((1, 6),)), Task(1, 5, None, ((1, 20),))))


def test_choose_keeps_parent_task_or_goes_next_door():
    ts = build_tasks(BENCHMARK_SHAPES, neighbour_rate=0.25, radius=2)
    rng = np.random.default_rng(0)
    picks = [ts.choose(5, rng) for _ in range(4000)]
    away = [p for p in picks if p != 5]
    assert abs(len(away) / len(picks) - 0.25) < 0.03
    assert set(away) == {3, 4, 6, 7}
    assert ts.neighbours(0) == [1, 2] and ts.neighbours(0, 1) == [1] and ts.neighbours(5, 2) == [4, 6, 3, 7]
    assert ts.transfer_targets(10) == [9]
    assert {ts.choose(None, rng) for _ in range(300)} == set(range(11))


def test_task_dimension_bins_each_index_apart():
    ts = build_tasks(BENCHMARK_SHAPES)
    d = ts.dimension()
    assert [d.bin(i) for i in range(11)] == list(range(11))
    archive = GridArchive([d, *default_dimensions()])
    feats = {"registers": 30, "active_warps": 40, "traffic_ratio": 1.0}
    archive.add(1, 2.0, {**feats, TASK_FEATURE: 3})
    archive.add(2, 1.5, {**feats, TASK_FEATURE: 3})
    archive.add(3, 0.5, {**feats, TASK_FEATURE: 4})
    archive.add(4, 0.9, {**feats, "registers": 100, TASK_FEATURE: 4})
    st = task_stats(archive, ts)
    assert st["t03"]["qd_score"] == 2.0 and st["t04"]["qd_score"] == pytest.approx(1.4)
    assert math.isnan(st["t00"]["best"]) and st["t04"]["n_elites"] == 2
    assert sum(v["qd_score"] for v in st.values()) == pytest.approx(archive.stats().qd_score)
    assert {t: e.candidate_id for t, e in best_per_task(archive, ts).items()} == {3: 1, 4: 4}


# -------------------------------------------------------------------------------------------- objective
def _sr(shape, t, **base):
    return ShapeResult(shape=shape, dtype="bf16", time_us=t, gbps=1.0, frac_copy=0.5, baseline_us=dict(base))


def test_best_library_per_shape_and_missing_reported():
    spec = ObjectiveSpec()
    shapes = [_sr((8, 256), 10.0, torch=30.0, torch_compile=11.0, liger=12.0, quack=15.0),
              _sr((8, 65536), 100.0, torch=300.0, torch_compile=140.0, quack=90.0)]
    ov = evaluate_objective(shapes, spec)
    assert ov.reference == {"8x256": "torch_compile", "8x65536": "quack"}
    assert ov.value == pytest.approx(math.sqrt(1.1 * 0.9))
    assert ov.missing == {"8x256": ["quack_tuned"], "8x65536": ["liger", "quack_tuned"]}
    assert ov.name == "best_library" and not ov.fallback_shapes
    assert best_library_speedups(shapes, spec) == pytest.approx({"8x256": 1.1, "8x65536": 0.9})


def test_fallback_to_eager_then_copy_roofline():
    spec = ObjectiveSpec()
    ov = evaluate_objective([_sr((4, 512), 10.0, torch=20.0, naive=40.0)], spec)
    assert (ov.value, ov.name, ov.fallback_shapes) == (2.0, "best_library+fallback", ["4x512"])
    ov = evaluate_objective([_sr((4, 512), 10.0)], spec)
    assert (ov.value, ov.name) == (0.5, "copy_roofline")


def test_single_baseline_objective_and_config_errors():
    spec = ObjectiveSpec.from_config({"baseline": "torch"})
    assert reference_of({"torch": 5.0, "torch_compile": 1.0}, spec)[:2] == ("torch", 5.0)
    assert evaluate_objective([_sr((4, 512), 10.0, torch=20.0, quack=5.0)], spec).value == 2.0
    assert spec.baseline_names == ("torch",)
    assert "quack_tuned" in ObjectiveSpec().describe()
    with pytest.raises(ValueError, match="unknown key"):
        ObjectiveSpec.from_config({"baselin": "torch"})
    with pytest.raises(ValueError, match="libraries is empty"):
        ObjectiveSpec(libraries=())


# ------------------------------------------------------------------------------------------------ engine
class ShapeHashEvaluator:
    """Deterministic and instant: the objective depends on the kernel identity AND the shapes, so a kernel's
    value differs from task to task; records the shapes of every call."""

    capacity = 1

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    def evaluate(self, kernel, *, shapes=None):
        shapes = tuple(tuple(s) for s in shapes)
        self.calls.append((kernel.identity, shapes))
        return hash_result(kernel.identity, fail_below=30, objective_key=f"{kernel.identity}{shapes}")

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def workload():
    return get_workload("rmsnorm")


def make_mt_engine(workload, store, tasks, *, budget=40, seed=0):
    archive = GridArchive([tasks.dimension(), *default_dimensions()])
    operators = build_operators([{"name": n} for n in ("launch", "hints")], workload)
    return Engine(workload=workload, evaluator=ShapeHashEvaluator(), algorithm=MapElites(archive),
                  archive=archive, operators=operators, selector=OperatorSelector([o.name for o in operators]),
                  store=store, budget=Budget(max_evaluations=budget), seed=seed, settings=EngineSettings(),
                  tasks=tasks)


def test_multitask_engine_evaluates_per_task_and_transfers(workload, tmp_path):
    tasks = build_tasks(BENCHMARK_SHAPES[:5], neighbour_rate=0.3)
    with Store(tmp_path / "s.sqlite") as store:
        eng = make_mt_engine(workload, store, tasks, budget=45)
        snap = eng.run()
        rows = [r for r in store.candidates(with_ptx=False) if r.status in {s.value for s in Status}]
        assert len(rows) == 45 == len(eng.evaluator.calls)
        # seeds on every task first, each with the task's shapes
        assert [(r.operator, int(r.features[TASK_FEATURE])) for r in rows[:10]] == [
            ("seed", t) for _ in range(2) for t in range(5)]
        for r, (_, shapes) in zip(rows, eng.evaluator.calls):
            assert shapes == tasks[int(r.features[TASK_FEATURE])].shapes
        keys = [(r.identity, int(r.features[TASK_FEATURE])) for r in rows]
        assert len(keys) == len(set(keys)), "a kernel is evaluated at most once per task"
        moved = [r for r in rows if "transfer_from_task" in r.timings]
        assert moved, "a new best of a task is tried on its neighbours"
        for r in moved:
            assert abs(int(r.timings["transfer_from_task"]) - int(r.features[TASK_FEATURE])) == 1
            assert any(o.identity == r.identity and o.id < r.id for o in rows)
        assert sum(v["qd_score"] for v in snap.tasks.values()) == pytest.approx(snap.qd_score)
        assert "task/t00/qd_score" in snap.flat()
        assert TRANSFER not in eng.selector.counts


class CompileGateEvaluator(ShapeHashEvaluator):
    """ShapeHashEvaluator that rejects kernels holding the planted bogus instruction as compile errors."""

    def evaluate(self, kernel, *, shapes=None):
        if "bogus.instruction" in kernel.ptx:
            return EvalResult(Status.COMPILE_ERROR, reason="ptxas: bogus.instruction")
        return super().evaluate(kernel, shapes=shapes)


def test_multitask_repaired_child_keeps_its_task(workload, tmp_path):
    """A repair (the LLM operator's second try after a failure) is evaluated on the failed child's task."""
    from test_engine import PlantedBug

    tasks = build_tasks(BENCHMARK_SHAPES[:3])
    op = PlantedBug()
    archive = GridArchive([tasks.dimension(), *default_dimensions()])
    with Store(tmp_path / "s.sqlite") as store:
        eng = Engine(workload=workload, evaluator=CompileGateEvaluator(), algorithm=MapElites(archive),
                     archive=archive, operators=[op], selector=OperatorSelector([op.name]), store=store,
                     budget=Budget(max_evaluations=14), seed=0, settings=EngineSettings(), tasks=tasks)
        eng.run()
        rows = store.candidates(with_ptx=False)
        failed = {r.id: r for r in rows if r.status == "compile_error"}
        repaired = [r for r in rows if r.parent_ids and r.parent_ids[0] in failed
                    and "transfer_from_task" not in r.timings]  # a new best is also tried on its neighbours
        assert op.repairs and repaired
        for r in repaired:
            assert r.status == "ok", r.reason
            assert int(r.features[TASK_FEATURE]) == int(failed[r.parent_ids[0]].features[TASK_FEATURE])


def test_multitask_resume_matches_uninterrupted(workload, tmp_path):
    tasks = build_tasks(BENCHMARK_SHAPES[:4], neighbour_rate=0.3)

    def sig(store):
        return [(r.identity, r.status, r.objective, r.features.get(TASK_FEATURE), r.timings.get("transfer_from_task"))
                for r in store.candidates(with_ptx=False)]

    with Store(tmp_path / "a.sqlite") as a:
        make_mt_engine(workload, a, tasks, budget=36).run()
        want = sig(a)
    with Store(tmp_path / "b.sqlite") as b:
        make_mt_engine(workload, b, tasks, budget=20).run()
        assert b.checkpoint(CHECKPOINT) is not None
    with Store(tmp_path / "b.sqlite") as b:
        eng = make_mt_engine(workload, b, tasks, budget=36)
        assert eng.try_resume()
        eng.budget.max_evaluations = 36
        eng.run()
        assert sig(b) == want


def test_engine_refuses_tasks_without_task_dimension(workload, tmp_path):
    tasks = build_tasks(BENCHMARK_SHAPES[:3])
    with Store(tmp_path / "s.sqlite") as store, pytest.raises(ValueError, match="'task' dimension"):
        archive = GridArchive(default_dimensions())
        Engine(workload=workload, evaluator=ShapeHashEvaluator(), algorithm=MapElites(archive), archive=archive,
               operators=[], selector=OperatorSelector(["x"]), store=store, budget=Budget(max_evaluations=1),
               seed=0, tasks=tasks)


def make_staged_engine(workload, store, tasks, *, budget, ahead=3):
    from evaluators.compile_executor import make_compile_executor

    eng = make_mt_engine(workload, store, tasks, budget=budget)
    eng.settings.ahead = ahead
    eng.compile_executor = make_compile_executor("inline")
    return eng


def test_staged_proposals_resume_like_an_uninterrupted_run(workload, tmp_path):
    """Proposals made ahead of the evaluation window (engine.ahead) are checkpointed as edit scripts and rebuilt
    on resume: the resumed run ends with the same rows as an uninterrupted one."""
    tasks = build_tasks(BENCHMARK_SHAPES[:3], neighbour_rate=0.3)

    def sig(store):
        return [(r.identity, r.status, r.operator, r.objective, r.features.get(TASK_FEATURE))
                for r in store.candidates(with_ptx=False)]

    with Store(tmp_path / "a.sqlite") as a:
        snap = make_staged_engine(workload, a, tasks, budget=30).run()
        want = sig(a)
        assert {"propose", "apply", "tell", "wait_evaluation"} <= set(snap.host_seconds)
        assert "host/tell_s" in snap.flat()
    with Store(tmp_path / "b.sqlite") as b:
        eng = make_staged_engine(workload, b, tasks, budget=17)
        eng.run()
        assert eng.staged, "proposals beyond the budget stay staged in the checkpoint"
        assert b.checkpoint(CHECKPOINT).state["staged"]
    with Store(tmp_path / "b.sqlite") as b:
        eng = make_staged_engine(workload, b, tasks, budget=30)
        assert eng.try_resume()
        eng.run()
        assert sig(b) == want


def test_compile_executor_instantiates_into_the_shared_cache(workload):
    from evaluators.compile_executor import instantiate_template, make_compile_executor

    with pytest.raises(ValueError, match="kind"):
        make_compile_executor("gpu")
    with pytest.raises(ValueError, match="workers"):
        make_compile_executor("thread", 0)
    ex = make_compile_executor("thread", 1)
    try:
        secs = ex.submit(instantiate_template, workload.spec(), workload.default_knobs).result(timeout=120)
    finally:
        ex.shutdown()
    assert 0 <= secs < 120
    with pytest.raises(ValueError, match="threads"):
        instantiate_template(workload.spec(), {"threads": 48})


def test_dispatch_export_covers_every_row_length(workload, tmp_path):
    """The product of a multi-task run: one kernel per bucket (cubin, PTX, card with lineage), manifest.json, and
    archive.launcher's dispatch.json whose buckets select by row length exactly as the tasks do."""
    import json

    from archive.dispatch import bucket_for, export_dispatch, load_manifest
    from archive.launcher import load

    tasks = build_tasks(BENCHMARK_SHAPES[:3])
    with Store(tmp_path / "s.sqlite") as store:
        eng = make_mt_engine(workload, store, tasks, budget=14)
        eng.run()
        man = export_dispatch(store, eng.archive, tasks, workload, tmp_path / "dispatch")
    assert [b["task"] for b in man["buckets"]] == [0, 1, 2]
    for b in man["buckets"]:
        assert (tmp_path / "dispatch" / b["cubin"]).stat().st_size > 0
        card = json.loads((tmp_path / "dispatch" / b["card"]).read_text())
        assert card["lineage"][0]["operator"] == "seed" and card["candidate_id"] == b["candidate_id"]
    assert load_manifest(tmp_path / "dispatch") == json.loads((tmp_path / "dispatch" / "manifest.json").read_text())
    kern = load(tmp_path / "dispatch")
    for n in (1, 256, 362, 363, 700, 724, 725, 10**6):
        assert kern.bucket_for((3, n)).info["task"] == tasks.task_of(n).index == bucket_for(man, n)["task"]
    bad = dict(man, buckets=man["buckets"][:2])
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="unbounded"):
        load_manifest(tmp_path / "bad.json")


def _mt_cfg(tmp_path, *overrides):
    from hydra import compose, initialize_config_dir

    from evolve.config import register

    register()
    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        return compose("config", overrides=["tasks.enabled=true", "logger=none", f"run_dir={tmp_path / 'run'}",
                                            "budget.evaluations=4", *overrides])


@pytest.mark.parametrize("override, which", [("evaluator=replay", "evaluator=replay"),
                                             ("evaluator=ray", "evaluator.backend=ray")])
def test_multitask_refuses_evaluators_of_fixed_shapes_before_building_them(tmp_path, override, which):
    """Replay answers only the recorded search shapes and the Ray evaluator takes no shapes=: a multi-task run
    with either used to record every candidate as a crash; now it is a ConfigError before the record is loaded
    or a cluster starts."""
    from evolve.app import run
    from evolve.config import ConfigError

    with pytest.raises(ConfigError, match=rf"^tasks\.enabled=true with {re.escape(which)}: .*fixed shapes"):
        run(_mt_cfg(tmp_path, override))


def test_multitask_refuses_a_given_evaluator_without_shapes(tmp_path):
    from evolve.app import run, takes_shapes
    from evolve.config import ConfigError

    class FixedShapes(ShapeHashEvaluator):
        def evaluate(self, kernel):  # no shapes=: evaluates its own fixed shapes only
            return super().evaluate(kernel)

    assert takes_shapes(ShapeHashEvaluator()) and not takes_shapes(FixedShapes())
    with pytest.raises(ConfigError, match=r"^tasks\.enabled=true: FixedShapes\.evaluate takes no shapes="):
        run(_mt_cfg(tmp_path, "evaluator=static"), evaluator=FixedShapes())
