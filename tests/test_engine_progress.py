"""The progress line's text, the rich bar, and the plain log line used when stderr is not a terminal."""

from __future__ import annotations

import logging

from evolve.engine import Snapshot
from evolve.progress import ProgressLine, format_line


def snap(best: float | None = 1.2345) -> Snapshot:
    return Snapshot(evaluations=40, candidates=55, valid_rate=0.85, best=best, qd_score=12.34, coverage=0.0421,
                    n_elites=24, evals_per_s=21.53, seconds=1.9, statuses={"ok": 34, "compile_error": 6},
                    duplicates=3, operator_rewards={"launch": 0.5})


def test_format_line():
    assert format_line(snap(), 200) == ("evaluated 40/200 | valid 85.0% | best 1.234 | QD 12.34 | "
                                        "coverage 4.2% | 21.5 eval/s")
    assert format_line(snap(None), None).startswith("evaluated 40 | valid 85.0% | best - |")


def test_flat_metrics():
    flat = snap().flat()
    assert flat["failures/compile_error"] == 6 and "failures/ok" not in flat
    assert flat["operator_reward/launch"] == 0.5 and flat["best_objective"] == 1.2345
    assert "best_objective" not in snap(None).flat()


def test_plain_log_line(caplog):
    with caplog.at_level(logging.INFO, logger="evolve.progress"), ProgressLine(200, rich=False) as p:
        p.update(snap())
        p.update(snap())  # the closing snapshot at the same count: not a second line
    assert "evaluated 40/200" in caplog.text
    assert sum("evaluated 40/200" in m for m in caplog.messages) == 1


def test_rich_bar_and_disabled(capsys):
    with ProgressLine(200, rich=True) as p:
        p.update(snap())
    assert "evaluated 40/200" in capsys.readouterr().err
    with ProgressLine(200, enabled=False) as p:
        p.update(snap())
    assert capsys.readouterr().err == ""
