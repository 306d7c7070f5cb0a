"""The last line of ``python -m evolve``: where the run went and how it ended."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evolve.__main__ import _final_line

REPO = Path(__file__).resolve().parents[1]


def test_final_line_names_the_run_dir_and_labels_estimates() -> None:
    line = _final_line({"evaluations": 8, "best_objective": 2.1787, "qd_score": 3.1787, "coverage": 0.00347,
                        "run_dir": "/tmp/run-a", "estimate": True})
    assert line == ("done: 8 evaluations, best objective 2.179 (ESTIMATE: static evaluator), QD score 3.179, "
                    "coverage 0.3%; run dir /tmp/run-a (store.sqlite, summary.json, best/)")
    measured = _final_line({"evaluations": 498, "best_objective": 1.1216, "qd_score": 23.51, "coverage": 0.0486,
                            "run_dir": "/tmp/run-b", "estimate": False})
    assert "ESTIMATE" not in measured and "best objective 1.122," in measured
    replay = _final_line({"evaluations": 5, "best_objective": 1.5, "run_dir": "/tmp/run-d", "estimate": True,
                          "provenance": {"evaluator": "replay"}})
    assert "(replay: recorded GPU time where measured, surrogate ESTIMATE otherwise)" in replay
    assert "static evaluator" not in replay
    assert "best objective none" in _final_line({"run_dir": "/tmp/run-c"})


def test_final_line_says_what_the_objective_is_over_and_the_archive_size() -> None:
    """The main job's line on a CPU (a newcomer could not tell what 2.027 was a speedup over, or of how many
    cells 2.1% was)."""
    line = _final_line({"evaluations": 200, "best_objective": 2.02724, "qd_score": 20.9654, "n_elites": 12,
                        "coverage": 12 / 576, "run_dir": "/tmp/run-e", "estimate": True,
                        "stop_reason": "evaluation budget spent (200 of 200 evaluations)",
                        "provenance": {"evaluator": "static", "baseline": "naive_seed", "estimate": True}})
    assert line == ("done: 200 evaluations, best objective 2.027 (geomean speedup over the naive seed; ESTIMATE: "
                    "static evaluator), QD score 20.97, coverage 2.1% (12 of 576 cells); run dir /tmp/run-e "
                    "(store.sqlite, summary.json, best/); stopped: evaluation budget spent (200 of 200 evaluations)")
    gpu = _final_line({"evaluations": 498, "best_objective": 1.1216, "qd_score": 23.51, "n_elites": 28,
                       "coverage": 28 / 576, "run_dir": "/tmp/run-f", "estimate": False,
                       "provenance": {"evaluator": "gpu", "baseline": "best"}})
    assert "best objective 1.122 (geomean speedup over the fastest library), " in gpu and "ESTIMATE" not in gpu
    assert "coverage 4.9% (28 of 576 cells)" in gpu
    replay = _final_line({"evaluations": 5, "best_objective": 1.5, "run_dir": "/tmp/run-d", "estimate": True,
                          "provenance": {"evaluator": "replay", "baseline": "torch"}})
    assert ("best objective 1.5 (geomean speedup over torch; replay: recorded GPU time where measured, "
            "surrogate ESTIMATE otherwise)") in replay


@pytest.mark.slow
def test_main_job_output_on_a_cpu(tmp_path) -> None:
    """`python -m evolve` without a GPU: the estimate banner once on the console (it was printed framed and then
    again as a log line) and kept in evolve.log; the last line says what the objective is over and the archive
    size (RMSNorm on the h200 grid: 576 cells)."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "disabled"}
    out = subprocess.run([sys.executable, "-m", "evolve", "evaluator=static", "logger=none", "mutator=template",
                          "budget.evaluations=4", "engine.export=false", f"hydra.run.dir={run_dir}"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    head = "every time, GB/s and speedup is an ESTIMATE"
    assert out.stderr.count(head) == 1, out.stderr[-3000:]
    assert (run_dir / "evolve.log").read_text().count(head) == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith(f"done: 4 evaluations, best objective {summary['best_objective']:.4g} (geomean speedup "
                           "over the naive seed; ESTIMATE: static evaluator), ")
    assert f"coverage {summary['coverage']:.1%} ({summary['n_elites']} of 576 cells); run dir {run_dir} " in last
