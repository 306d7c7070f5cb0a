"""One GPU worker process under supervision: start, deadline, kill, respawn.

A ``Supervisor`` owns one worker (``evaluators.gpu.worker.worker_main``) started with the ``spawn`` context
and pinned to one GPU. ``request`` sends a dict and waits for the reply until a deadline; past it the worker's
process group is killed with SIGKILL (a hung kernel cannot be interrupted any other way) and a fresh worker is
started. A worker that dies (segfault, sticky CUDA error after which it exits on purpose) is likewise replaced.
Not thread-safe by itself: the pool hands each supervisor to one thread at a time.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evaluators.types import Status

_ENV_LOCK = threading.Lock()  # CUDA_VISIBLE_DEVICES is set around start(): the spawned child inherits it


class WorkerStartError(RuntimeError):
    """The worker could not start (no GPU, CuPy missing, CUDA init failed); message carries its traceback."""


@dataclass
class Supervisor:
    """Supervises the worker for GPU ``device`` (an index into the visible devices).

    startup_timeout_s: how long a (re)start may take (copy roofline + baseline compilation), seconds.
    target: the process entry point, ``worker_main(conn, device, workload_spec, config)``
    by default (a module-level function, as ``spawn`` requires).
    """

    device: int
    workload_spec: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)
    startup_timeout_s: float = 600.0
    target: Callable[..., None] | None = None
    restarts: int = 0
    info: dict[str, Any] = field(default_factory=dict)
    _proc: Any = None
    _conn: Any = None
    _ready: bool = False

    # ------------------------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Spawn the worker (non-blocking); ``wait_ready`` waits for its handshake."""
        from evaluators.gpu.devices import physical_device
        from evaluators.gpu.worker import worker_main

        pinned = physical_device(self.device)
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=self.target or worker_main, name=f"ptxforge-gpu{self.device}",
                           args=(child, pinned, self.workload_spec, self.config),
                           daemon=True)
        with _ENV_LOCK:
            old = os.environ.get("CUDA_VISIBLE_DEVICES")
            os.environ["CUDA_VISIBLE_DEVICES"] = pinned
            try:
                proc.start()
            finally:
                if old is None:
                    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
                else:
                    os.environ["CUDA_VISIBLE_DEVICES"] = old
        child.close()
        self._proc, self._conn, self._ready = proc, parent, False

    def wait_ready(self) -> dict[str, Any]:
        """Block until the worker reports ready; WorkerStartError if it fails or exceeds startup_timeout_s."""
        if self._proc is None:
            self.start()
        if self._ready:
            return self.info
        if not self._conn.poll(self.startup_timeout_s):
            self.kill()
            raise WorkerStartError(f"GPU worker {self.device} not ready within {self.startup_timeout_s:.0f} s")
        try:
            msg = self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(timeout=5)
            code = self._proc.exitcode
            self.kill()
            raise WorkerStartError(f"GPU worker {self.device} died while starting (exit code {code}); a script "
                                   "that starts workers needs an `if __name__ == '__main__':` guard") from None
        if not msg.get("ok"):
            self.kill()
            raise WorkerStartError(f"GPU worker {self.device} failed to start:\n{msg.get('error', '')}")
        self._ready, self.info = True, msg
        return msg

    def kill(self) -> None:
        """SIGKILL the worker's process group (and the worker itself), reap it, drop the pipe."""
        proc = self._proc
        if proc is not None and proc.pid is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the worker leads its own group (os.setpgrp)
            except (ProcessLookupError, PermissionError, OSError):
                pass
            try:
                proc.kill()
            except (ProcessLookupError, OSError, ValueError):
                pass
            proc.join(timeout=10)
        if self._conn is not None:
            self._conn.close()
        self._proc, self._conn, self._ready = None, None, False

    def restart(self) -> None:
        """Kill and start a new worker (non-blocking; the next request waits for it)."""
        self.kill()
        self.restarts += 1
        self.start()

    def close(self) -> None:
        """Ask the worker to stop, then make sure it is gone."""
        if self._conn is not None and self._ready:
            try:
                self._conn.send({"op": "stop"})
                self._proc.join(timeout=5)
            except (OSError, BrokenPipeError, ValueError):
                pass
        self.kill()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    # -------------------------------------------------------------------------------------------- requests
    def request(self, req: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send ``req`` and return the worker's reply, or a reply with status ``timeout`` / ``crash`` made
        here when the deadline passes or the worker dies (the worker is then replaced).

        Raises WorkerStartError when a worker cannot be (re)started at all.
        """
        self.wait_ready()
        t0 = time.perf_counter()
        try:
            self._conn.send(req)
        except (OSError, BrokenPipeError):
            self.restart()
            return {"status": Status.CRASH.value, "reason": "GPU worker pipe broken before the request"}
        if not self._conn.poll(timeout_s):
            pid = self._proc.pid
            self.restart()
            return {"status": Status.TIMEOUT.value,
                    "reason": f"no result within {timeout_s:.0f} s: worker {pid} killed (process group) and respawned",
                    "seconds": {"total": time.perf_counter() - t0}}
        try:
            reply = self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(timeout=5)
            code = self._proc.exitcode
            self.restart()
            return {"status": Status.CRASH.value, "reason": f"GPU worker died during the evaluation (exit code {code})"}
        if reply.get("fatal"):
            self._proc.join(timeout=10)  # it exits by itself after a sticky CUDA error
        if reply.get("fatal") or not self._proc.is_alive():
            self.restart()  # a fresh context serves the next request
        return reply
