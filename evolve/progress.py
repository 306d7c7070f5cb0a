"""The progress line: evaluated, valid %, best objective, QD score, coverage, evaluations/s, failures of the
LLM operator and operators switched off, and what the run is waiting on right now ("LLM generating, 12 s").

On a terminal it is a rich progress bar (``rich.progress``) redrawn in place, ten times a second, so the
activity's seconds count up while a model generates; otherwise (logs, CI, Hydra multirun) one plain line per
snapshot goes to the ``evolve.progress`` logger, and an activity that took longer than ``SLOW_ACTIVITY_S`` is
logged when it ends, so files stay readable.

Activities: ``with activity("LLM generating"):`` around a slow call (any thread) makes it the current activity.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("evolve.progress")
SLOW_ACTIVITY_S = 5.0
_activity_lock = threading.Lock()
_activity: tuple[str, float] | None = None


@contextlib.contextmanager
def activity(text: str) -> Iterator[None]:
    """Mark ``text`` as what the run is doing until the block ends (``current_activity`` reads it)."""
    global _activity
    start = time.monotonic()
    with _activity_lock:
        previous, _activity = _activity, (text, start)
    try:
        yield
    finally:
        with _activity_lock:
            _activity = previous
        took = time.monotonic() - start
        if took >= SLOW_ACTIVITY_S:
            log.info("%s took %.0f s", text, took)


_notes: dict[str, str] = {}


def note(key: str, text: str) -> None:
    """Show ``text`` in the live line under ``key`` (replacing the previous note of that key) and log it at
    once as a warning, e.g. ``note("llm", "LLM failures 3/5: HTTP 500 ...")``. "" clears the key."""
    with _activity_lock:
        if text:
            _notes[key] = text
        else:
            _notes.pop(key, None)
    if text:
        log.warning(text)


def current_activity() -> str:
    """``"<text>, <n> s"`` for the activity in progress, "" when none."""
    with _activity_lock:
        a = _activity
    return "" if a is None else f"{a[0]}, {time.monotonic() - a[1]:.0f} s"


def format_line(snap: Any, total: int | None) -> str:
    """One line for an ``evolve.engine.Snapshot``:
    ``evaluated 40/200 | valid 85.0% | best 1.234 | QD 12.3 | coverage 4.2% | 21.5 eval/s``."""
    of = f"/{total}" if total else ""
    best = "-" if snap.best is None else f"{snap.best:.4g}"
    line = (f"evaluated {snap.evaluations}{of} | valid {100 * snap.valid_rate:.1f}% | best {best} | "
            f"QD {snap.qd_score:.4g} | coverage {100 * snap.coverage:.1f}% | {snap.evals_per_s:.1f} eval/s")
    failures = {s: n for s, n in (getattr(snap, "statuses", None) or {}).items() if s in SHOWN_FAILURES and n}
    if failures:
        line += " | " + ", ".join(f"{s} {n}" for s, n in sorted(failures.items()))
    off = getattr(snap, "disabled", None) or {}
    if off:
        line += " | switched off: " + ", ".join(sorted(off))
    return line


# Failures of the proposal machinery (not of kernels) shown in the line as they happen.
SHOWN_FAILURES = ("llm_error", "operator_error")


class ProgressLine:
    """total: the evaluation budget (None for a time budget); enabled: False shows nothing;
    rich: draw a live bar (default: only when stderr is a terminal). Use as a context manager."""

    def __init__(self, total: int | None, *, enabled: bool = True, rich: bool | None = None) -> None:
        self.total, self.enabled = total, enabled
        self.use_rich = enabled and (sys.stderr.isatty() if rich is None else rich)
        self._progress: Any = None
        self._task: Any = None
        self._logged = -1  # evaluations of the last plain line: the run's closing snapshot repeats the count

    def __enter__(self) -> ProgressLine:
        if self.use_rich:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
            from rich.text import Text

            class ActivityColumn(ProgressColumn):
                def render(self, task: Any) -> Text:
                    with _activity_lock:
                        notes = [n[:80] for n in _notes.values()]
                    parts = [p for p in (current_activity(), *notes) if p]
                    return Text("| " + " | ".join(parts) if parts else "", style="yellow")

            self._progress = Progress(BarColumn(), TextColumn("{task.description}"), ActivityColumn(),
                                      TimeElapsedColumn(), console=Console(stderr=True), transient=False,
                                      refresh_per_second=10)
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
        elif snap.evaluations != self._logged:
            self._logged = snap.evaluations
            log.info(line)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
