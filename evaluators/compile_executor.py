"""Executors for the host-side compile work of a search: template instantiation (nvcc) and ptxas, off the
engine's thread.

Measured on the 2-core CPU machine (``experiments/host_time.py``): one template instantiation (nvcc, CUDA C++ ->
PTX) takes seconds, ptxas a few hundred ms, the parse of the instantiated PTX tens of ms. The engine proposes
ahead (``EngineSettings.ahead``) and hands every instantiation a proposal needs to an executor from this module,
so nvcc runs on other cores while the GPU evaluates earlier candidates; when the engine applies the edit, the
PTX comes from the content-hash cache of ``workloads.cuda_build`` (shared by processes: written atomically).

``make_compile_executor(kind, workers)`` returns a ``concurrent.futures.Executor``:

- ``"process"``: a ``ProcessPoolExecutor`` over ``workers`` processes (default: CPU cores - 1, at least 1),
  ``spawn`` start method (no inherited CUDA or thread state);
- ``"thread"``: a ``ThreadPoolExecutor`` (nvcc and ptxas are subprocesses: threads overlap them too, but the
  Python work of each job holds the GIL);
- ``"inline"``: runs each job in the calling thread at ``submit`` (tests, one core);
- ``"ray"``: ``evaluators.ray.RayExecutor``, one Ray task per job on any node's free CPU (joins the Ray
  connection ``evaluator.backend=ray`` opened, else starts a local cluster; ``workers`` bounds the tasks in
  flight). Instantiations warm the PTX cache of the node that ran them: on several hosts put
  ``$PTXFORGE_CACHE`` on a file system every node mounts (docs/ray.md).

``evaluators.ray`` provides a Ray-task executor with the same ``submit``/``shutdown`` interface. The jobs are
top-level functions taking plain data (a workload spec dict, knob dicts, PTX text), so any executor can ship
them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from functools import lru_cache
from typing import Any

KINDS = ("process", "thread", "inline", "ray")


class InlineExecutor(Executor):
    """A ``concurrent.futures.Executor`` that runs each call at ``submit`` in the calling thread."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as e:
            fut.set_exception(e)
        return fut


def default_workers() -> int:
    """CPU cores available to this process minus one (the engine's own thread), at least 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return max(1, n - 1)


def make_compile_executor(kind: str = "process", workers: int | None = None) -> Executor:
    """An executor for instantiation / ptxas jobs (module docstring). ValueError for an unknown kind or
    ``workers < 1``."""
    if kind not in KINDS:
        raise ValueError(f"compile executor kind must be one of {KINDS}, got {kind!r}")
    n = default_workers() if workers is None else int(workers)
    if n < 1:
        raise ValueError(f"compile executor workers must be >= 1, got {n}")
    if kind == "inline":
        return InlineExecutor()
    if kind == "ray":
        from evaluators.ray.executor import RayExecutor

        return RayExecutor(max_in_flight=workers)
    if kind == "thread":
        return ThreadPoolExecutor(max_workers=n, thread_name_prefix="compile")
    import multiprocessing as mp

    return ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"))


@lru_cache(maxsize=8)
def _workload(spec_key: str) -> Any:
    import json

    from workloads.registry import build_workload

    return build_workload(json.loads(spec_key))


def workload_from_spec(spec: Mapping[str, Any]) -> Any:
    """The workload of ``Workload.spec()`` (``_target_`` + options), built once per process."""
    import json

    return _workload(json.dumps(dict(spec), sort_keys=True, default=str))


def instantiate_template(spec: Mapping[str, Any], knobs: Mapping[str, int]) -> float:
    """Instantiate the workload's template at ``knobs`` into the shared PTX cache (``workload.template_ptx``:
    nvcc on a cache miss); returns the seconds it took. ValueError for knobs the template rejects,
    ``workloads.cuda_build.SeedBuildError`` when nvcc fails."""
    t0 = time.perf_counter()
    wl = workload_from_spec(spec)
    make = getattr(wl, "template_ptx", None)
    if make is None:  # a workload without a text-level template: instantiate builds (and caches) it whole
        wl.instantiate(dict(knobs))
    else:
        make(dict(knobs))
    return time.perf_counter() - t0


def compile_ptx_job(ptx: str, arch: str) -> tuple[float, bool]:
    """ptxas on ``ptx`` for ``arch`` into the toolchain's cache; returns (seconds, cached). CompileError on a
    refused module."""
    from evaluators.toolchain import compile_ptx

    t0 = time.perf_counter()
    res = compile_ptx(ptx, arch)
    return time.perf_counter() - t0, bool(res.cached)
