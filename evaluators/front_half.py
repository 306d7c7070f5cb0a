"""FrontHalf: where an evaluator runs ``evaluators.pipeline.prepare`` (ptxas, ABI, input stores, race lint,
launch, traffic and features): in the calling thread, or in a pool of worker processes.

Why: on the H200 (2026-12-02, R21, gate v2) a candidate's eval_seconds were 0.568 s, of which 0.128 ptxas and
about 0.136 s neither ptxas nor the GPU worker: the front half's pure-Python analyses (profiled on a CPU: traffic
and features ~45 %, race lint ~33 %, input-store check ~20 %). They hold the GIL that the engine's thread and
the other evaluation in flight need, and the loop ran at 82 % of its GPU-bound rate. In a process the same work
holds no lock of the main process; the calling thread only waits on a future. ptxas is a subprocess either way.

``where="process"``: a ``ProcessPoolExecutor`` (spawn: no inherited CUDA or thread state) of ``workers``
processes, each rebuilding the workload from its spec once (``_workload``); a kernel travels as PTX text, entry
and launch (re-parsed there, tens of ms) and the ``Prepared`` comes back pickled (the cubin included). A
rejection comes back as data and is raised again as ``Rejected`` here (its constructor is not pickle's).
"""

from __future__ import annotations

import json
import os
from concurrent.futures import Executor, ProcessPoolExecutor
from functools import lru_cache
from typing import Any

from evaluators.pipeline import Prepared, Rejected, prepare
from population.kernel import Kernel, LaunchConfig
from targets.spec import GPUSpec
from workloads.base import Shape, Workload

WHERE = ("thread", "process")


def check_where(where: str) -> str:
    """``where`` when it is one of WHERE; else ValueError naming the choices (the GPU pool calls it before any
    worker starts)."""
    if where not in WHERE:
        raise ValueError(f"front_half must be one of {WHERE}, got {where!r}")
    return where


@lru_cache(maxsize=8)
def _workload(spec_json: str) -> Workload:
    from workloads.registry import build_workload

    return build_workload(json.loads(spec_json))


def prepare_job(spec_json: str, ptx: str, entry: str, launch: dict[str, Any], gpu: GPUSpec,
                shapes: list[Shape], arch: str | None) -> tuple[str, Any]:
    """``prepare`` of the kernel given as text, in a worker process: ("ok", Prepared) or ("rejected", (status,
    reason, step, fields, extra))."""
    from population.parser import parse_module

    kernel = Kernel(parse_module(ptx), entry, LaunchConfig.from_json(launch))
    try:
        return "ok", prepare(kernel, _workload(spec_json), gpu, shapes, arch=arch)
    except Rejected as r:
        return "rejected", (r.status, r.reason, r.step, r.fields, r.extra)


class FrontHalf:
    """Runs the front half of ``workload``'s evaluations on ``gpu`` (``arch``: the ptxas target, None:
    ``gpu.arch``) where ``where`` says (module docstring); ``workers``: processes (default: CPU cores - 2, at
    least 1). Calling it returns the ``Prepared`` or raises ``Rejected``, as ``prepare`` does. Thread-safe.
    ValueError for an unknown ``where``."""

    def __init__(self, workload: Workload, gpu: GPUSpec, arch: str | None = None, where: str = "thread",
                 workers: int | None = None):
        self.workload, self.gpu, self.arch, self.where = workload, gpu, arch, check_where(where)
        self._spec = json.dumps(workload.spec(), sort_keys=True)
        self._pool: Executor | None = None
        if where == "process":
            import multiprocessing as mp

            n = workers or max(1, (os.cpu_count() or 2) - 2)
            self._pool = ProcessPoolExecutor(n, mp_context=mp.get_context("spawn"))

    def __call__(self, kernel: Kernel, shapes: list[Shape]) -> Prepared:
        if self._pool is None:
            return prepare(kernel, self.workload, self.gpu, shapes, arch=self.arch)
        kind, out = self._pool.submit(prepare_job, self._spec, kernel.ptx, kernel.entry, kernel.launch.to_json(),
                                      self.gpu, [tuple(s) for s in shapes], self.arch).result()
        if kind == "ok":
            return out
        status, reason, step, fields, extra = out
        raise Rejected(status, reason, step, fields, extra)

    def close(self) -> None:
        """Stop the worker processes (idempotent; a thread front half has none)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
