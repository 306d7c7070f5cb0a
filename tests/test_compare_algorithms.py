"""experiments/compare_algorithms.py on real runs (``evolve.app.run`` with an instant hash evaluator): snapshot
points, statistics (bootstrap CI, Mann-Whitney U, Holm), refusal to pool unlike runs, missing / duplicate seeds,
killed runs, PNG plots."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from hash_evaluator import HashEvaluator
from hydra import compose, initialize_config_dir
from scipy import stats

from evolve.app import run
from evolve.config import register

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments"))
import compare_algorithms as ca  # noqa: E402

CONF = str(REPO / "conf")


def one_run(run_dir: Path, *overrides: str) -> dict:
    register()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=[f"run_dir={run_dir}", "engine.progress=false", "logger=none",
                                           "engine.export=false", "mutator=template", "budget.evaluations=12",
                                           "logger.log_every=3", *overrides])
    return run(cfg, evaluator=HashEvaluator())


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """2 algorithms x 3 seeds, as a Hydra multirun lays them out."""
    root = tmp_path_factory.mktemp("sweep")
    for i, (alg, seed) in enumerate((a, s) for a in ("map_elites", "random") for s in (0, 1, 2)):
        one_run(root / f"{i}-{alg}-s{seed}", f"algorithm={alg}", f"seed={seed}")
    return root


def test_snapshot_at_10_holds_evaluation_10(tmp_path):
    one_run(tmp_path / "r", "logger.log_every=10", "budget.evaluations=25")
    evals = [json.loads(x)["evaluations"] for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert evals == [1, 10, 20, 25]  # was [1, 11, 21, 25]: the "10 evaluations" row held evaluation 1
    rec = ca.load_run(tmp_path / "r")
    assert rec.at(10, "qd_score")[1] == 10


def test_default_marks_land_on_snapshots(tmp_path):
    """30 evaluations logged every 10 (the README's small CPU sweep), 4 points: the first point, 7.5, was
    rounded to 8, which no snapshot holds, and every run warned that it used the one at evaluation 1."""
    runs = []
    for seed in (0, 1):
        one_run(tmp_path / f"r{seed}", "logger.log_every=10", "budget.evaluations=30", f"seed={seed}")
        runs.append(ca.load_run(tmp_path / f"r{seed}"))
    assert [r.log_every for r in runs] == [10, 10] and [r.reached for r in runs] == [30, 30]
    marks = ca.evaluation_marks(runs, 4)
    assert marks == [10, 20, 30]
    _rows, _tests, lags = ca.comparison_table(runs, marks)
    assert lags == []
    # A run shorter than log_every still gets its points (between the snapshots at 1 and at its end).
    short = [ca.load_run(tmp_path / "r0")]
    short[0].log_every = 50
    assert ca.evaluation_marks(short, 3) == [10, 20, 30]


def at_12(run_dir: Path) -> float:
    """qd_score of the snapshot logged at evaluation 12 (read straight from metrics.jsonl)."""
    snaps = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [s["qd_score"] for s in snaps if s["evaluations"] == 12][-1]


def test_statistics_match_scipy(sweep, capsys):
    runs, warn = ca.select_runs(ca.load_runs([sweep]))
    assert warn == [] and len(runs) == 6
    marks = ca.evaluation_marks(runs, 4)
    assert marks == [3, 6, 9, 12]
    rows, tests, lags = ca.comparison_table(runs, marks)
    assert lags == []
    r = next(x for x in rows if x["algorithm"] == "random" and x["metric"] == "qd_score" and x["evaluations"] == 12)
    vals = [at_12(d) for d in sorted(sweep.glob("*random*"))]
    assert r["n"] == 3 and r["mean"] == pytest.approx(np.mean(vals)) and r["median"] == pytest.approx(np.median(vals))
    assert r["ci_low"] <= r["mean"] <= r["ci_high"] and r["ci_low"] >= min(vals) - 1e-9
    t = next(x for x in tests if x["metric"] == "qd_score" and x["evaluations"] == 12)
    other = [at_12(d) for d in sorted(sweep.glob("*map_elites*"))]
    ref = stats.mannwhitneyu(other, vals, alternative="two-sided")
    assert (t["a"], t["b"]) == ("map_elites", "random")
    assert t["p"] == pytest.approx(ref.pvalue) and t["U"] == pytest.approx(ref.statistic)
    assert t["p_holm"] == pytest.approx(t["p"])  # one pair: Holm leaves it as it is
    assert ca.main([str(sweep), "--plots", str(sweep / "png")]) == 0
    out = capsys.readouterr().out
    assert "95% CI of the mean" in out and "Mann-Whitney" in out and "ESTIMATE" in out
    for m in ("qd_score", "coverage", "best_objective"):
        png = sweep / "png" / f"{m}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_holm_step_down():
    # Holm 1979: sorted p (0.01, 0.02, 0.03, 0.5) x (4, 3, 2, 1) = (0.04, 0.06, 0.06, 0.5) with running max.
    assert ca.holm([0.03, 0.01, 0.5, 0.02]) == pytest.approx([0.06, 0.04, 0.5, 0.06])
    assert ca.holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])


def test_bootstrap_ci_edge_cases():
    assert ca.bootstrap_ci([2.0, 2.0, 2.0]) == (2.0, 2.0)
    lo, hi = ca.bootstrap_ci([1.0])
    assert lo != lo and hi != hi  # nan: one seed has no interval
    lo, hi = ca.bootstrap_ci([1.0, 2.0, 3.0, 4.0, 10.0])
    assert 1.0 <= lo < 4.0 < hi <= 10.0


def test_unlike_runs_are_refused_unless_asked(sweep, tmp_path, capsys):
    root = tmp_path / "mixed"
    shutil.copytree(sweep, root)
    one_run(root / "x-budget", "algorithm=random", "seed=5", "budget.evaluations=15")
    with pytest.raises(ca.PoolError, match=r"budget: .*evaluations.*15"):
        ca.select_runs(ca.load_runs([root]))
    assert ca.main([str(root), "--no-plots"]) == 2
    assert "--pool-anyway" in capsys.readouterr().err
    _runs, warn = ca.select_runs(ca.load_runs([root]), pool_anyway=True)
    assert any("POOLED ANYWAY" in w for w in warn)
    # a run of another workload and evaluator (its provenance as app.run writes it) is refused as well
    other = root / "1-map_elites-s1" / "summary.json"
    summ = json.loads(other.read_text())
    summ["provenance"]["workload"]["dtype"] = "f32"
    summ["provenance"]["evaluator"] = "gpu"
    other.write_text(json.dumps(summ))
    shutil.rmtree(root / "x-budget")
    with pytest.raises(ca.PoolError) as e:
        ca.select_runs(ca.load_runs([root]))
    assert "workload: " in str(e.value) and "evaluator: " in str(e.value) and "f32" in str(e.value)


def test_duplicate_missing_seeds_and_killed_runs(sweep, tmp_path):
    root = tmp_path / "s"
    shutil.copytree(sweep, root)
    # the same sweep pooled twice gave "23 seeds" with seed 0 repeated: a second copy of map_elites seed 0
    shutil.copytree(root / "0-map_elites-s0", root / "dup-map_elites-s0")
    # a killed run: metrics.jsonl but no summary.json
    killed = root / "5-random-s2"
    (killed / "summary.json").unlink()
    runs, warn = ca.select_runs(ca.load_runs([root]))
    text = "\n".join(warn)
    assert "1 partial run(s)" in text and "random seed 2" in text
    assert "duplicate seed: map_elites seed 0" in text
    assert "missing seeds: random has no run for seed(s) [2]" in text
    assert sorted((r.algorithm, r.seed) for r in runs) == [("map_elites", 0), ("map_elites", 1), ("map_elites", 2),
                                                          ("random", 0), ("random", 1)]
    runs, warn = ca.select_runs(ca.load_runs([root]), include_partial=True)
    assert ("random", 2) in [(r.algorithm, r.seed) for r in runs]


def test_tables_and_plots_go_to_wandb(sweep, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    runs, _ = ca.select_runs(ca.load_runs([sweep]))
    rows, tests, _ = ca.comparison_table(runs, [6, 12])
    pngs = ca.plot_metrics(runs, tmp_path / "png")
    run_dir = Path(ca.log_to_wandb(rows, tests, pngs, group="cmp", mode="offline", run_dir=tmp_path))
    tables = sorted(p.name.split("_")[0] for p in (run_dir / "files" / "media" / "table").glob("*.table.json"))
    assert tables == ["comparison", "pairwise"]
    images = list((run_dir / "files" / "media" / "images").rglob("*.png"))
    assert len(images) == 3
