"""The progress line: evaluated, valid %, best objective, QD score, coverage, evaluations/s.

On a terminal it is a rich progress bar (``rich.progress``) redrawn in place; otherwise (logs, CI, Hydra
multirun) one plain line per snapshot goes to the ``evolve.progress`` logger, so files stay readable.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

log = logging.getLogger("evolve.progress")


def format_line(snap: Any, total: int | None) -> str:
    """One line for an ``evolve.engine.Snapshot``:
    ``evaluated 40/200 | valid 85.0% | best 1.234 | QD 12.3 | coverage 4.2% | 21.5 eval/s``."""
    of = f"/{total}" if total else ""
    best = "-" if snap.best is None else f"{snap.best:.4g}"
    return (f"evaluated {snap.evaluations}{of} | valid {100 * snap.valid_rate:.1f}% | best {best} | "
            f"QD {snap.qd_score:.4g} | coverage {100 * snap.coverage:.1f}% | {snap.evals_per_s:.1f} eval/s")


class ProgressLine:
    """total: the evaluation budget (None for a time budget); enabled: False shows nothing;
    rich: draw a live bar (default: only when stderr is a terminal). Use as a context manager."""

    def __init__(self, total: int | None, *, enabled: bool = True, rich: bool | None = None) -> None:
        self.total, self.enabled = total, enabled
        self.use_rich = enabled and (sys.stderr.isatty() if rich is None else rich)
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> ProgressLine:
        if self.use_rich:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(BarColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                      console=Console(stderr=True), transient=False)
            self._progress.start()
            self._task = self._progress.add_task("starting", total=self.total)
        return self

    def update(self, snap: Any) -> None:
        """Show ``snap`` (an ``evolve.engine.Snapshot``)."""
        if not self.enabled:
            return
        line = format_line(snap, self.total)
        if self._progress is not None:
            self._progress.update(self._task, completed=snap.evaluations, description=line)
        else:
            log.info(line)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
