"""DutyCycle: a bound on the share of wall time the sanitizer may hold a GPU's timing lock while a search runs.

The sanitizer's replay holds the GPU's ``TimingLock`` around each instrumented launch, so a worker that wants to
time a candidate waits meanwhile. Unbounded, a busy verdict queue took a quarter of the worker's time on an H200
(2026-12-01, R17: 64 benchmarks of 570 waited 0.9-1.8 s instead of ~0.2 s, ~72 s of the worker's 264 s) and the
search loop's rate fell with it. A token bucket (Tanenbaum, *Computer Networks*, "the token bucket algorithm")
bounds it: credit accrues at ``share`` seconds of lock time per wall second, up to ``burst_s``, and is spent by
the lock seconds used.

The bound is kept per launch, not per process: one tool process over a batch of 8 kernels replays each at the
timed shape at three scalar settings (~1.5-3 s of lock per instrumented launch, R14), i.e. a minute of lock in one
process, and a bucket charged only when a process ends let a worker wait that whole minute (R46, H200 2026-12-02:
7 candidates in 60 s at the end of a 130 s search). So the parent bucket hands its state to each process
(``lease``: environment variables), the replay rebuilds it (``from_env``), waits for credit before each launch
and charges it after, and reports the seconds it waited (``{"paced": s}`` lines, which ``sanitizer.run_tool``
adds to the process's timeout: the timeout still bounds the tool's own run time). When the process ends the
parent takes over its bucket's last credit (``settle``; a process that reports none is charged its wall time,
``charge``), and starts the next process only once its credit is back to zero (``wait``). Over any window of T seconds the sanitizer therefore holds a GPU's lock at most
``share * T + burst_s`` seconds plus one launch's lock time.

``draining()`` lifts the bound while the caller waits for the verdicts and times nothing (the engine's end-of-run
wait): owed verdicts then run at full speed, including a process already running (``drain_path``: a file that
exists while a drain is on, which the replay checks while it waits).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

# The environment a sanitizer process reads its share of the bucket from (``lease`` / ``from_env``).
ENV_SHARE, ENV_BURST, ENV_CREDIT, ENV_DRAIN = ("PTXFORGE_LOCK_SHARE", "PTXFORGE_LOCK_BURST", "PTXFORGE_LOCK_CREDIT",
                                               "PTXFORGE_LOCK_DRAIN")
POLL_S = 0.25  # longest sleep between looks at the drain file while waiting for credit


class DutyCycle:
    """Token bucket over lock seconds (module docstring). Thread-safe.

    share: the bound, a fraction of wall time in (0, 1] (1: no bound); burst_s: the credit's cap, seconds of
    lock time (lets the first verdicts of a run start at once); credit: the credit at start (None: ``burst_s``;
    a process's bucket starts from its parent's, ``from_env``); clock: monotonic seconds (tests inject one);
    drain_path: the file ``draining()`` creates and removes (None: none; a stale one is removed here), and the
    one whose existence lifts the bound in a process's bucket. Raises ValueError for a share outside (0, 1] or
    a negative burst."""

    def __init__(self, share: float, burst_s: float = 10.0, clock: Callable[[], float] = time.monotonic,
                 credit: float | None = None, drain_path: str | Path | None = None):
        share, burst_s = float(share), float(burst_s)
        if not 0.0 < share <= 1.0:
            raise ValueError(f"sanitizer duty share must be in (0, 1], got {share}")
        if burst_s < 0:
            raise ValueError(f"sanitizer duty burst_s must be >= 0 seconds, got {burst_s}")
        self.share, self.burst_s, self._clock = share, burst_s, clock
        self._credit, self._t = (burst_s if credit is None else min(burst_s, float(credit))), clock()
        self._drain = 0
        self.drain_path = None if drain_path is None else Path(drain_path)
        if self.drain_path is not None:
            self.drain_path.unlink(missing_ok=True)  # a killed run's: it would lift every later bound
        self._cv = threading.Condition()
        self.charged_s = 0.0  # lock seconds reported so far
        self.waited_s = 0.0  # seconds spent in wait()

    def _refill(self) -> None:
        now = self._clock()
        self._credit = min(self.burst_s, self._credit + self.share * (now - self._t))
        self._t = now

    def charge(self, lock_seconds: float) -> None:
        """Record ``lock_seconds`` (>= 0) of lock time used (by one sanitizer process, or in a process's bucket
        by one launch)."""
        used = max(0.0, float(lock_seconds))
        with self._cv:
            self._refill()
            self._credit -= used
            self.charged_s += used

    def credit(self) -> float:
        """The credit now, seconds of lock time (negative: a debt)."""
        with self._cv:
            self._refill()
            return self._credit

    def settle(self, lock_seconds: float, credit: float) -> None:
        """Take over the state a process's leased bucket ended with: its ``credit`` (what it reported last,
        having charged each of its launches) and the ``lock_seconds`` it used, for the stats. Charging the
        process's total instead would count twice what it paid for launch by launch: the parent's own credit,
        capped at ``burst_s``, earned nothing meanwhile."""
        with self._cv:
            self._refill()
            self._credit = min(self.burst_s, float(credit))
            self.charged_s += max(0.0, float(lock_seconds))
            self._cv.notify_all()

    def delay(self) -> float:
        """Seconds until the next process (launch) may start: 0 with credit >= 0, while draining (here, or the
        drain file exists), or at share 1."""
        with self._cv:
            self._refill()
            if self._drain or self.share >= 1.0 or self._credit >= -1e-6:  # a microsecond: rounding of the refill
                return 0.0
            if self.drain_path is not None and self.drain_path.exists():
                return 0.0
            return -self._credit / self.share

    def wait(self, sleep: Callable[[threading.Condition, float], object] | None = None) -> float:
        """Block until ``delay()`` is 0 (``draining()`` wakes it early; with a ``drain_path``, looked at every
        POLL_S seconds); returns the seconds waited. ``sleep(cv, seconds)`` waits on the held condition (default
        ``cv.wait``; tests pass one that advances their clock)."""
        t0 = self._clock()
        with self._cv:
            while True:
                d = self.delay()
                if d <= 0:
                    break
                if self.drain_path is not None:
                    d = min(d, POLL_S)
                (sleep or threading.Condition.wait)(self._cv, d)
        waited = self._clock() - t0
        self.waited_s += waited
        return waited

    @contextlib.contextmanager
    def draining(self) -> Iterator[None]:
        """No bound inside the block (nested blocks allowed): the caller waits for verdicts and times nothing."""
        with self._cv:
            self._drain += 1
            if self._drain == 1 and self.drain_path is not None:
                self.drain_path.touch()
            self._cv.notify_all()
        try:
            yield
        finally:
            with self._cv:
                self._drain -= 1
                if self._drain == 0 and self.drain_path is not None:
                    self.drain_path.unlink(missing_ok=True)

    @property
    def draining_now(self) -> bool:
        """True inside ``draining()``: nothing is timed, so no cap on a sanitizer launch applies."""
        return self._drain > 0

    def lease(self) -> dict[str, str]:
        """The environment of a sanitizer process that paces its own launches (``from_env``): the share, the
        burst, the credit now and the drain file. Empty at share 1 (no bound)."""
        if self.share >= 1.0:
            return {}
        with self._cv:
            self._refill()
            env = {ENV_SHARE: repr(self.share), ENV_BURST: repr(self.burst_s), ENV_CREDIT: repr(self._credit)}
        if self.drain_path is not None:
            env[ENV_DRAIN] = str(self.drain_path)
        return env

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> DutyCycle | None:
        """The bucket a parent leased to this process (``lease``), or None when it leased none. Raises
        ValueError naming the variable when one does not parse."""
        if ENV_SHARE not in environ:
            return None
        vals = {}
        for name in (ENV_SHARE, ENV_BURST, ENV_CREDIT):
            try:
                vals[name] = float(environ[name])
            except (KeyError, ValueError) as e:
                raise ValueError(f"{name}={environ.get(name)!r}: not a number") from e
        bucket = cls(vals[ENV_SHARE], vals[ENV_BURST], credit=vals[ENV_CREDIT])
        bucket.drain_path = Path(environ[ENV_DRAIN]) if environ.get(ENV_DRAIN) else None  # never removed here
        return bucket

    def stats(self) -> dict[str, float]:
        """``share``, ``charged_s`` (lock seconds reported) and ``waited_s`` (seconds processes were held back)."""
        return {"share": self.share, "charged_s": round(self.charged_s, 3), "waited_s": round(self.waited_s, 3)}
