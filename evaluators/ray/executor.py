"""RayExecutor: a ``concurrent.futures.Executor`` whose calls run as Ray tasks on the cluster's CPUs.

The compile executor interface (``evaluators.compile_executor``'s local process pool has the same one) is the
standard library's ``Executor``: ``submit(fn, *args, **kwargs) -> Future``, ``map``, ``shutdown(wait,
cancel_futures)`` and the context manager. Whatever runs through it (ptxas, nvcc template instantiation) must be
a picklable module-level function with picklable arguments, as for a ``ProcessPoolExecutor``.

Each call is one Ray task reserving ``num_cpus`` CPUs (1 by default), so Ray spreads them over every node with
a free CPU; ``submit_ref`` returns the ``ray.ObjectRef`` itself, which a caller can hand to an actor method
(Ray resolves it before the method runs, so the actor's slot is not held while the task compiles).
A task whose node disappears is retried by Ray (``max_retries``); an exception raised by ``fn`` is not retried
and comes back from ``Future.result()`` as the original exception type (Ray's ``RayTaskError`` wraps it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Executor, Future
from typing import Any


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The Ray task body: run ``fn(*args, **kwargs)`` on a cluster worker (Ray resolves ObjectRef arguments)."""
    return fn(*args, **kwargs)


class RayExecutor(Executor):
    """Run callables as Ray tasks (module docstring).

    num_cpus: CPUs each task reserves (float; ptxas and nvcc are single-threaded: 1); max_retries: re-runs of a
    task whose worker or node died (not of one that raised); max_in_flight: tasks submitted but not finished
    beyond which ``submit`` blocks (None: unbounded; back-pressure for a producer faster than the cluster).
    Uses this process's Ray connection, or opens one with ``evaluators.ray.cluster.connect(address)`` (None: a
    local cluster).
    """

    def __init__(self, *, num_cpus: float = 1.0, max_retries: int = 3, max_in_flight: int | None = None,
                 address: str | None = None) -> None:
        from evaluators.ray.cluster import connect

        connect(address)
        import ray

        self._ray = ray
        self._remote = ray.remote(_call).options(num_cpus=num_cpus, max_retries=max_retries,
                                                 retry_exceptions=False)
        self._slots = threading.BoundedSemaphore(max_in_flight) if max_in_flight else None
        self._lock = threading.Lock()
        self._refs: dict[Any, Future] = {}
        self._shutdown = False

    def submit_ref(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Start ``fn(*args, **kwargs)`` as a task and return its ``ray.ObjectRef`` (no Future, no back-pressure).
        RuntimeError after ``shutdown``."""
        if self._shutdown:
            raise RuntimeError("cannot submit to a RayExecutor after shutdown")
        return self._remote.remote(fn, *args, **kwargs)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """Start ``fn(*args, **kwargs)`` as a Ray task; the Future holds its value or its exception (the
        original exception when ``fn`` raised). RuntimeError after ``shutdown``."""
        if self._slots is not None:
            self._slots.acquire()
        try:
            ref = self.submit_ref(fn, *args, **kwargs)
        except BaseException:
            if self._slots is not None:
                self._slots.release()
            raise
        out: Future = Future()
        out.set_running_or_notify_cancel()
        with self._lock:
            self._refs[ref] = out
        ref.future().add_done_callback(lambda f, ref=ref: self._finish(ref, f))
        return out

    def _finish(self, ref: Any, f: Future) -> None:
        with self._lock:
            out = self._refs.pop(ref, None)
        if self._slots is not None:
            self._slots.release()
        if out is None or out.done():
            return
        exc = f.exception()
        if exc is None:
            out.set_result(f.result())
            return
        cause = getattr(exc, "cause", None)  # RayTaskError carries the exception fn raised
        out.set_exception(cause if isinstance(cause, BaseException) else exc)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop accepting work; ``cancel_futures`` cancels the tasks not finished (``ray.cancel``), ``wait``
        blocks until every submitted task is done."""
        self._shutdown = True
        with self._lock:
            pending = dict(self._refs)
        if cancel_futures:
            for ref, fut in pending.items():
                try:
                    self._ray.cancel(ref, force=False)
                except Exception:
                    pass
                if not fut.done():
                    fut.set_exception(CancelledError())
        if wait and pending:
            self._ray.wait(list(pending), num_returns=len(pending), fetch_local=False)
