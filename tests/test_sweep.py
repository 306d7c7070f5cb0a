"""A Hydra multirun of two algorithms x two seeds: four run dirs, four W&B offline runs grouped by experiment
and tagged by algorithm and seed, and the comparison table of experiments/compare_algorithms.py."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evolve.tracking import offline_run_dirs, read_offline_run

REPO = Path(__file__).resolve().parents[1]


def compare_module():
    spec = importlib.util.spec_from_file_location("compare_algorithms", REPO / "experiments/compare_algorithms.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_sweep_two_algorithms_two_seeds(tmp_path):
    sweep = tmp_path / "sweep"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    cmd = [sys.executable, "-m", "evolve", "-m", "algorithm=map_elites,random", "seed=0,1", "evaluator=static",
           "budget.evaluations=12", "logger.log_every=4", "engine.progress=false", "experiment_name=sweeptest",
           "mutator=template", "knowledge=none", f"hydra.sweep.dir={sweep}"]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-4000:]

    job_dirs = sorted(p.parent for p in sweep.rglob("summary.json"))
    assert len(job_dirs) == 4
    seen = set()
    for d in job_dirs:
        summary = json.loads((d / "summary.json").read_text())
        runs = offline_run_dirs(d)
        assert len(runs) == 1, f"{d}: expected one W&B run, got {runs}"
        wb = read_offline_run(runs[0])
        assert wb["group"] == "sweeptest"
        assert summary["algorithm"] in wb["tags"] and f"seed={summary['seed']}" in wb["tags"]
        assert wb["job_type"] == summary["algorithm"]
        assert wb["summary"]["qd_score"] == pytest.approx(summary["qd_score"])
        assert wb["config"]["seed"] == summary["seed"] and wb["config"]["algorithm"]["name"] == summary["algorithm"]
        seen.add((summary["algorithm"], summary["seed"]))
    assert seen == {("map_elites", 0), ("map_elites", 1), ("random", 0), ("random", 1)}

    mod = compare_module()
    runs = mod.load_runs([sweep])
    runs, warnings = mod.select_runs(runs)
    assert warnings == []
    marks = mod.evaluation_marks(runs, 3)
    assert marks == [4, 8, 12]
    rows, _tests, lags = mod.comparison_table(runs, marks)
    assert lags == []
    qd = [r for r in rows if r["metric"] == "qd_score"]
    assert [r["algorithm"] for r in qd] == ["map_elites"] * 3 + ["random"] * 3
    assert [r["evaluations"] for r in qd[:3]] == [4, 8, 12]
    # The last point's mean QD score is the mean of the two seeds' final QD scores.
    finals = {}
    for d in job_dirs:
        s = json.loads((d / "summary.json").read_text())
        finals.setdefault(s["algorithm"], []).append(s["qd_score"])
    for r in (qd[2], qd[5]):
        assert r["n"] == 2 and r["seeds"] == [0, 1]
        assert r["mean"] == pytest.approx(sum(finals[r["algorithm"]]) / 2)
    text = subprocess.run([sys.executable, str(REPO / "experiments/compare_algorithms.py"), str(sweep),
                           "--points", "3", "--no-plots"], capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    assert "QD score" in text.stdout and "map_elites" in text.stdout and "random" in text.stdout
    assert "ESTIMATES" in text.stdout
