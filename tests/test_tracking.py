"""W&B tracking of a real (small) run: read the offline run back with wandb's reader and check its values
against the store and summary.json; logger=none writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from archive.store import Store
from evolve.app import run
from evolve.config import register
from evolve.engine import CHECKPOINT
from evolve.tracking import INDIVIDUAL_COLUMNS, individual_rows, offline_run_dirs, read_offline_run

CONF = str(Path(__file__).resolve().parents[1] / "conf")


def compose_run(run_dir: Path, *overrides: str):
    register()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=[f"run_dir={run_dir}", "evaluator=static", "engine.progress=false", "knowledge=none",
                                            *overrides])


@pytest.mark.slow
def test_offline_run_reads_back(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = compose_run(tmp_path, "logger=wandb", "logger.mode=offline", "budget.evaluations=14",
                      "logger.log_every=5", "experiment_name=trk", "seed=4", "mutator=template")
    summary = run(cfg)
    runs = offline_run_dirs(tmp_path)
    assert len(runs) == 1
    wb = read_offline_run(runs[0])
    assert wb["group"] == "trk" and {"map_elites", "seed=4", "rmsnorm", "h200"} <= set(wb["tags"])
    s = wb["summary"]
    for key in ("qd_score", "coverage", "valid_rate", "best_objective", "evaluations", "n_elites"):
        assert s[key] == pytest.approx(summary[key]), key
    with Store(tmp_path / "store.sqlite", readonly=True) as store:
        archive = store.load_checkpoint(CHECKPOINT)["archive"]
        objs = [e["objective"] for e in archive["elites"]]
        assert s["qd_score"] == pytest.approx(sum(objs))
        assert s["best_objective"] == pytest.approx(max(objs))
        assert s["evaluations"] == 14 == store.count() - store.count("no_proposal") - store.count("apply_error") \
            - store.count("operator_error")
        assert len(individual_rows(store)) == store.count()
    # History: logged against evaluations, first snapshot at 1, then every 5, then the final one.
    evals = [h["evaluations"] for h in wb["history"] if "qd_score" in h]
    assert evals[0] == 1 and evals[-1] == 14 and evals == sorted(evals)
    assert [h for h in wb["history"] if "qd_score" in h][-1]["qd_score"] == pytest.approx(summary["qd_score"])
    assert any(k.startswith("operator_reward/") for k in s)
    # Tables, figures, the exported kernel artifact.
    arts = {name: (kind, paths) for name, kind, paths in wb["artifacts"]}
    assert any(k.endswith("-individuals") and v[0] == "run_table" for k, v in arts.items())
    assert any(k.endswith("-archive") and v[0] == "run_table" for k, v in arts.items())
    kernels = [v for v in arts.values() if v[0] == "kernel"]
    assert kernels and "best.ptx" in kernels[0][1] and "best.cubin" in kernels[0][1]
    assert "best_lineage" in s and "family_tree" in s
    assert any(k.startswith("heatmap/") for k in s)
    assert s["individuals"]["ncols"] == len(INDIVIDUAL_COLUMNS)
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["estimate"] is True and saved["experiment"] == "trk"


def test_logger_none_writes_no_wandb(tmp_path):
    cfg = compose_run(tmp_path, "logger=none", "budget.evaluations=3", "mutator=template")
    summary = run(cfg)
    assert summary["evaluations"] == 3
    assert not (tmp_path / "wandb").exists()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["evaluations"] == 3
