"""A 200-evaluation run of every algorithm on RMSNorm with the static evaluator (real ptxas, real operators),
and the island model's separation checked on the store of a real run."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from archive.store import Store
from evolve.app import run
from evolve.config import register
from evolve.engine import CHECKPOINT

CONF = str(Path(__file__).resolve().parents[1] / "conf")
EVAL_STATUSES = {"ok", "compile_error", "load_error", "launch_error", "timeout", "crash", "wrong_result",
                 "nondeterministic", "too_fast_to_be_true", "skipped"}


def compose_run(run_dir: Path, *overrides: str):
    register()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=[f"run_dir={run_dir}", "evaluator=static", "logger=none",
                                            "engine.progress=false", "knowledge=none", "engine.export=false", *overrides])


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["map_elites", "random", "hill_climb", "ga", "islands"])
def test_200_evaluations(algorithm, tmp_path):
    summary = run(compose_run(tmp_path, f"algorithm={algorithm}", "budget.evaluations=200"))
    assert summary["evaluations"] == 200 and summary["algorithm"] == algorithm
    with Store(tmp_path / "store.sqlite", readonly=True) as store:
        rows = store.candidates(with_ptx=False)
        assert sum(r.status in EVAL_STATUSES for r in rows) == 200
        assert summary["best_objective"] == pytest.approx(store.best().objective)
        ops = {r.operator for r in rows}
        if algorithm == "ga":
            assert "crossover" in ops
        state = store.load_checkpoint(CHECKPOINT)
        assert state["pending"] == [] and state["budget"]["evaluations"] == 200
    assert summary["valid_rate"] > 0.5
    assert summary["n_elites"] >= 2


@pytest.mark.slow
def test_islands_stay_separate_in_a_real_run(tmp_path):
    run(compose_run(tmp_path, "algorithm=islands", "algorithm.n_islands=3", "algorithm.migration_interval=20",
                    "budget.evaluations=80", "mutator=template"))
    with Store(tmp_path / "store.sqlite", readonly=True) as store:
        rows = {r.id: r for r in store.candidates(with_ptx=False)}
        alg = store.load_checkpoint(CHECKPOINT)["algorithm"]
    migrated = {i: {m["id"] for m in alg["migrations"] if m["to"] == i and m["accepted"]} for i in range(3)}
    seeds = {i for i, r in rows.items() if r.operator == "seed"}
    children = [r for r in rows.values() if r.operator != "seed" and r.status in EVAL_STATUSES]
    assert children and all(r.island in (0, 1, 2) for r in children)
    for r in children:
        parent = rows[r.parent_ids[0]]
        # The parent was a seed, bred on the same island, or arrived there by a logged migration.
        assert parent.id in seeds or parent.island == r.island or parent.id in migrated[r.island], (r.id, r.island)
    for i, arch in enumerate(alg["archives"]):
        for e in arch["elites"]:
            cid = e["candidate_id"]
            assert cid in seeds or rows[cid].island == i or cid in migrated[i]
    assert alg["migrations"], "80 evaluations at interval 20 must migrate"
