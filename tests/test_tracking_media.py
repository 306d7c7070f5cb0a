"""W&B media during a run (lineage, heatmaps, tables every logger.media_every evaluations, not only at the end)
and a resumed run's back-filled history, read back with wandb's own reader from the offline run."""

from __future__ import annotations

from pathlib import Path

import pytest
from hash_evaluator import HashEvaluator
from hydra import compose, initialize_config_dir

from evolve.app import run
from evolve.config import register
from evolve.tracking import offline_run_dirs, read_offline_run

CONF = str(Path(__file__).resolve().parents[1] / "conf")


def cfg_for(run_dir: Path, budget: int):
    register()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=[f"run_dir={run_dir}", "engine.progress=false", "logger=wandb",
                                            "logger.mode=offline", f"budget.evaluations={budget}",
                                            "logger.log_every=2", "logger.media_every=4", "mutator=template",
                                            "engine.export=false", "logger.artifact=false"])


@pytest.mark.slow
def test_media_every_k_and_backfill_on_resume(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    run(cfg_for(tmp_path, 10), evaluator=HashEvaluator())
    (first,) = offline_run_dirs(tmp_path)
    wb1 = read_offline_run(first)
    h = wb1["history"]
    tables = [x["evaluations"] for x in h if x.get("individuals._type") == "table-file"]
    assert tables == [4, 8, 10]  # every 4 evaluations, then the final one
    assert [x["evaluations"] for x in h if x.get("lineage._type") == "table-file"] == [4, 8, 10]
    assert [x["evaluations"] for x in h if x.get("best_lineage._type") == "plotly-file"] == [4, 8, 10]
    assert any(k.startswith("heatmap/") for x in h if x.get("evaluations") == 4 for k in x)

    # a resumed run (a larger budget) first re-logs the earlier history from metrics.jsonl
    run(cfg_for(tmp_path, 14), evaluator=HashEvaluator())
    second = [d for d in offline_run_dirs(tmp_path) if d != first]
    assert len(second) == 1
    wb = read_offline_run(second[0])
    curve = sorted({x["evaluations"] for x in wb["history"] if "qd_score" in x})
    assert curve == [1, 2, 4, 6, 8, 10, 12, 14]  # was: the curve started where the new session started
    assert wb["run_id"] == wb1["run_id"]
