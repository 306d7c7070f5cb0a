"""Guards on a run directory: one process at a time, and no new run written over an old one.

``RunDirLock`` takes an exclusive advisory lock (``fcntl.flock``, ``LOCK_EX | LOCK_NB``) on ``<run dir>/run.lock``
for the lifetime of a run, and writes the holder (pid, host, start time, command line) into that file, so a
second ``python -m evolve hydra.run.dir=<dir>`` while the first still runs is refused with a message naming the
holder. The kernel drops a flock when its process dies (kill -9 included), so a stale file never blocks a resume.
A filesystem that cannot take the lock (some NFS mounts answer ``ENOLCK``/``EOPNOTSUPP``) is reported as an
error naming the path, never silently ignored; ``engine.lock=false`` runs without the lock on purpose.

``check_fresh_dir`` refuses ``resume=false`` into a directory that already holds a run's outputs (two runs'
rows would mix in one store and the summary and best/ would be wrong).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

LOCK_NAME = "run.lock"
# What a run writes into its dir (Hydra's own .hydra/ and the log file are there before the run starts).
RUN_OUTPUTS = ("store.sqlite", "metrics.jsonl", "summary.json", "best", "wandb", "llm_cache.sqlite")


class RunDirError(RuntimeError):
    """The run directory cannot be used: locked by another process, not lockable, or holding another run."""


class RunDirLocked(RunDirError):
    """Another live process holds the run directory's lock; ``holder`` is what it wrote (pid, host, ...)."""

    def __init__(self, message: str, holder: dict[str, Any]) -> None:
        super().__init__(message)
        self.holder = holder


def _read_holder(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text() or "{}")
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


class RunDirLock:
    """Exclusive lock on ``run_dir`` (module docstring). Use as a context manager or ``acquire``/``release``.

    run_dir: the run directory (created if missing); flock: the locking call (``fcntl.flock``; a parameter so
    that a filesystem without lock support can be reproduced). Raises RunDirLocked when another process holds
    it (message: path, holder pid, host, start time, command), RunDirError when the filesystem refuses the lock
    or the lock file cannot be created (message: path and the OS error)."""

    def __init__(self, run_dir: str | Path, *, flock: Callable[[int, int], None] = fcntl.flock) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self._flock = flock
        self._fd: int | None = None

    def acquire(self) -> RunDirLock:
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise RunDirError(f"hydra.run.dir: cannot create the lock file {self.path}: {e.strerror or e}") from None
        try:
            self._flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                h = _read_holder(self.path)
                since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(h["started"])) if "started" in h else "?"
                raise RunDirLocked(
                    f"{self.run_dir} is in use by another run: pid {h.get('pid', '?')} on host "
                    f"{h.get('host', '?')} since {since} ({h.get('command', '?')}); wait for it to end, or leave "
                    f"out hydra.run.dir to start a new run", h) from None
            raise RunDirError(
                f"hydra.run.dir: cannot lock {self.path} ({os.strerror(e.errno) if e.errno else e}); this "
                f"filesystem does not support flock, so two processes could write one store. Put the run dir on "
                f"a local filesystem, or set engine.lock=false to run without the lock at your own risk") from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
                  "command": " ".join(sys.argv)[:500]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Drop the lock (the file stays; its content names the last holder)."""
        if self._fd is not None:
            try:
                self._flock(self._fd, fcntl.LOCK_UN)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def existing_outputs(run_dir: str | Path) -> list[str]:
    """Names of run outputs (``RUN_OUTPUTS``) already present in ``run_dir`` ([] for a missing dir)."""
    d = Path(run_dir)
    return [n for n in RUN_OUTPUTS if (d / n).exists()]


def check_fresh_dir(run_dir: str | Path, resume: bool) -> None:
    """With ``resume`` false, raise RunDirError when ``run_dir`` already holds a run's outputs (naming them)."""
    found = existing_outputs(run_dir)
    if not resume and found:
        raise RunDirError(f"resume=false but {run_dir} already holds a run ({', '.join(found)}); a new run there "
                          f"would mix its rows with the old ones. Leave out hydra.run.dir for a new run dir, "
                          f"delete the old one, or use resume=true to continue it")


def check_writable(run_dir: str | Path, key: str = "hydra.run.dir") -> None:
    """Create ``run_dir`` if needed and check that files can be written in it; RunDirError naming ``key`` and
    the path otherwise."""
    d = Path(run_dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunDirError(f"{key}: cannot create {d}: {e.strerror or e}") from None
    if not os.access(d, os.W_OK | os.X_OK):
        raise RunDirError(f"{key}: {d} is not writable")
