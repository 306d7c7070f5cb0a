"""The last line of ``python -m evolve``: where the run went and how it ended."""

from evolve.__main__ import _final_line


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
