"""DutyCycle: a bound on the share of wall time the sanitizer may hold a GPU's timing lock while a search runs.

The sanitizer's replay holds the GPU's ``TimingLock`` around each instrumented launch, so a worker that wants to
time a candidate waits meanwhile. Unbounded, a busy verdict queue took a quarter of the worker's time on an H200
(2026-12-01, R17: 64 benchmarks of 570 waited 0.9-1.8 s instead of ~0.2 s, ~72 s of the worker's 264 s) and the
search loop's rate fell with it. A token bucket (Tanenbaum, *Computer Networks*, "the token bucket algorithm")
bounds it: credit accrues at ``share`` seconds of lock time per wall second, up to ``burst_s``; each sanitizer
process is charged the lock seconds it reports (``sanitize_replay``: ``{"lock_seconds": ...}``), and the next
process starts only once the credit is back to zero. Over any window of T seconds the sanitizer therefore holds
the lock at most ``share * T + burst_s`` seconds (plus one process's own lock time: a process is never cut), so
the loop loses at most about ``share`` of its GPU time to verdicts. The sanitizer processes themselves are never
slowed, so their timeouts keep their meaning.

``draining()`` lifts the bound while the caller waits for the verdicts and times nothing (the engine's end-of-run
wait): owed verdicts then run at full speed.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator


class DutyCycle:
    """Token bucket over lock seconds (module docstring). Thread-safe.

    share: the bound, a fraction of wall time in (0, 1] (1: no bound); burst_s: credit at start and its cap,
    seconds of lock time (lets the first verdicts of a run start at once); clock: monotonic seconds (tests
    inject one). Raises ValueError for a share outside (0, 1] or a negative burst."""

    def __init__(self, share: float, burst_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        share, burst_s = float(share), float(burst_s)
        if not 0.0 < share <= 1.0:
            raise ValueError(f"sanitizer duty share must be in (0, 1], got {share}")
        if burst_s < 0:
            raise ValueError(f"sanitizer duty burst_s must be >= 0 seconds, got {burst_s}")
        self.share, self.burst_s, self._clock = share, burst_s, clock
        self._credit, self._t = burst_s, clock()
        self._drain = 0
        self._cv = threading.Condition()
        self.charged_s = 0.0  # lock seconds reported so far
        self.waited_s = 0.0  # seconds spent in wait()

    def _refill(self) -> None:
        now = self._clock()
        self._credit = min(self.burst_s, self._credit + self.share * (now - self._t))
        self._t = now

    def charge(self, lock_seconds: float) -> None:
        """Record ``lock_seconds`` (>= 0) of lock time used by one sanitizer process."""
        used = max(0.0, float(lock_seconds))
        with self._cv:
            self._refill()
            self._credit -= used
            self.charged_s += used

    def delay(self) -> float:
        """Seconds until the next process may start: 0 with credit >= 0, while draining, or at share 1."""
        with self._cv:
            self._refill()
            if self._drain or self.share >= 1.0 or self._credit >= -1e-6:  # a microsecond: rounding of the refill
                return 0.0
            return -self._credit / self.share

    def wait(self, sleep: Callable[[threading.Condition, float], object] | None = None) -> float:
        """Block until ``delay()`` is 0 (``draining()`` wakes it early); returns the seconds waited.
        ``sleep(cv, seconds)`` waits on the held condition (default ``cv.wait``; tests pass one that advances
        their clock)."""
        t0 = self._clock()
        with self._cv:
            while True:
                d = self.delay()
                if d <= 0:
                    break
                (sleep or threading.Condition.wait)(self._cv, d)
        waited = self._clock() - t0
        self.waited_s += waited
        return waited

    @contextlib.contextmanager
    def draining(self) -> Iterator[None]:
        """No bound inside the block (nested blocks allowed): the caller waits for verdicts and times nothing."""
        with self._cv:
            self._drain += 1
            self._cv.notify_all()
        try:
            yield
        finally:
            with self._cv:
                self._drain -= 1

    def stats(self) -> dict[str, float]:
        """``share``, ``charged_s`` (lock seconds reported) and ``waited_s`` (seconds processes were held back)."""
        return {"share": self.share, "charged_s": round(self.charged_s, 3), "waited_s": round(self.waited_s, 3)}
