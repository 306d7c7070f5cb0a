"""The evaluation actor: one per GPU (``num_gpus=1``), or one per CPU slot with the static evaluator.

An ``EvaluationActor`` owns the project's own evaluator for its one device and calls it unchanged:

- ``kind="gpu"``: a ``evaluators.gpu.pool.GPUPool`` over device 0 of what Ray lets the actor see (Ray sets
  ``CUDA_VISIBLE_DEVICES`` to the GPU it assigned). The pool's supervised worker process loads, gates and
  benchmarks; a hung kernel has that worker's process group killed at the deadline and a fresh worker
  spawned, a crashed context likewise: the candidate gets its ``timeout`` / ``crash`` status and the actor
  lives on. The ptxas target is the actor's own GPU (``sm_<major><minor>`` read from the device), and the
  pool's baselines are timed on that GPU, so on a cluster with mixed GPU models each result is measured
  against baselines of the GPU that ran it (``extra["gpu"]``, ``extra["arch"]`` say which).
- ``kind="static"``: a ``evaluators.static.StaticEvaluator`` (CPU actors, for CI and CPU-only clusters).

``evaluate(kernel, compiled)`` takes the result of a ptxas run done by a Ray task elsewhere (``compile_task``)
and files it in this process's compile cache (``evaluators.toolchain.remember_compile``), so the evaluator's
own ``compile_ptx`` call returns it at once; without it (or when the node's ptxas release differs) the
evaluator compiles here as usual.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from evaluators.types import CompileError, EvalResult
from population.kernel import Kernel

_PROBE = ("import cupy, json; p = cupy.cuda.runtime.getDeviceProperties(0); "
          "n = p['name']; n = n.decode() if isinstance(n, bytes) else str(n); "
          "print(json.dumps({'name': n, 'cc': [int(p['major']), int(p['minor'])], "
          "'memory_bytes': int(p['totalGlobalMem'])}))")


@dataclass(frozen=True)
class KernelText:
    """A Kernel as text, the form in which it travels to tasks and actors: the printed PTX, entry, launch
    config (``LaunchConfig.to_json``), parents, operator, edit text. Text, not a pickled AST: the driver's
    AST shares nodes (and lazily filled caches) with other candidates the engine is still working on, and
    parsing it again costs what unpickling does (37 ms for the 1936-line RMSNorm template)."""

    ptx: str
    entry: str
    launch: dict[str, Any]
    parents: tuple[str, ...] = ()
    operator: str = "seed"
    edit_text: str = ""

    @classmethod
    def of(cls, kernel: Kernel) -> KernelText:
        return cls(kernel.ptx, kernel.entry, kernel.launch.to_json(), tuple(kernel.parents), kernel.operator,
                   kernel.edit_text)

    def kernel(self) -> Kernel:
        """The Kernel again (same identity); ParseError if the text does not parse."""
        from population.kernel import LaunchConfig
        from population.parser import parse_module

        return Kernel(module=parse_module(self.ptx, filename=f"<{self.entry}>"), entry=self.entry,
                      launch=LaunchConfig.from_json(self.launch), parents=self.parents, operator=self.operator,
                      edit_text=self.edit_text)


def as_kernel(k: Kernel | KernelText) -> Kernel:
    return k.kernel() if isinstance(k, KernelText) else k


@dataclass
class RemoteCompile:
    """One ptxas run done by a Ray task.

    arch: the target; ptxas_release: ``ptxas --version``'s release line of the ptxas ``select_ptxas`` chose
    there (None when it had none);
    result: the CompileResult (None when ptxas refused the module, see ``error``, or when the task could not
    compile, see ``why``); error: ptxas' refusal as (message, line, log) (CompileError fields: its AST
    statement is not sent, the receiving side finds it again); seconds: wall time of the task body, s;
    node: the host name that ran it.
    """

    arch: str
    ptxas_release: str | None
    result: Any
    seconds: float
    node: str
    error: tuple[str, int | None, str] | None = None
    why: str = ""

    def outcome(self) -> Any:
        """The CompileResult, or the CompileError ptxas raised (None when the task could not compile)."""
        if self.error is not None:
            message, line, log = self.error
            return CompileError(message=message, line=line, log=log)
        return self.result


def compile_task(kernel: Kernel | KernelText | str, arch: str) -> RemoteCompile:
    """Ray task body: ``compile_ptx(kernel, arch)`` on whichever node runs it. Never raises: a missing
    toolchain or any other failure is returned in ``why`` and the actor then compiles for itself."""
    from evaluators.toolchain import _source_text, compile_ptx, ptxas_version, select_ptxas

    t0 = time.perf_counter()
    host = socket.gethostname()
    try:
        kernel = as_kernel(kernel)
        release = ptxas_version(select_ptxas(_source_text(kernel)[0], arch)[0])
        try:
            result = compile_ptx(kernel, arch)
        except CompileError as e:
            return RemoteCompile(arch, release, None, time.perf_counter() - t0, host, error=(e.message, e.line, e.log))
    except Exception as e:  # ToolchainNotFound, no ptxas for the .version, a bad arch: the actor compiles and reports it
        return RemoteCompile(arch, None, None, time.perf_counter() - t0, host, why=f"{type(e).__name__}: {e}")
    return RemoteCompile(arch, release, result, time.perf_counter() - t0, host)


def probe_device(timeout_s: float = 120.0) -> dict[str, Any]:
    """Name, compute capability and memory of visible device 0, read by CuPy in a child process (this process
    never initialises CUDA: the pool's worker owns the GPU). RuntimeError with the child's output on failure."""
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"GPU probe failed on {socket.gethostname()} (CUDA_VISIBLE_DEVICES="
                           f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def gpu_name_for(device_name: str, cc: tuple[int, int]) -> str | None:
    """The ``targets.spec`` key of a device (``"h200"`` for "NVIDIA H200"), matched by name, else None."""
    from targets.spec import GPUS

    low = device_name.lower()
    for key, spec in GPUS.items():
        if tuple(spec.cc) == tuple(cc) and key in low.replace(" ", "").replace("-", ""):
            return key
    return None


class EvaluationActor:
    """Evaluates kernels on one device with the project's evaluator (module docstring).

    kind: ``"gpu"`` or ``"static"``; workload: the ``Workload`` (pickled by Ray); options: keyword arguments of
    GPUPool / StaticEvaluator (``devices`` is fixed to [0] for gpu); hardware: the run's ``targets.spec``
    GPUSpec or name, what the static evaluator models (gpu actors use their own device's spec when
    ``targets.spec`` knows the model); depth: evaluations this actor runs at once (its
    ``max_concurrency``; static: ptxas processes).
    Raises what the evaluator raises when it cannot start (``WorkerStartError``, ``NoGPU``): Ray then reports
    the actor dead and the caller replaces or drops it.
    """

    def __init__(self, kind: str, workload: Any, options: dict[str, Any], hardware: Any = None,
                 depth: int = 2) -> None:
        import ray

        self.kind = kind
        ctx = ray.get_runtime_context()
        self.where = {"node_id": ctx.get_node_id(), "host": socket.gethostname(), "pid": os.getpid(),
                      "actor_id": ctx.get_actor_id()}
        opts = dict(options)
        if kind == "gpu":
            from evaluators.gpu.pool import GPUPool
            from targets.spec import get_gpu

            dev = probe_device()
            cc = tuple(dev["cc"])
            name = gpu_name_for(dev["name"], cc)
            spec = get_gpu(name) if name else None
            arch = opts.pop("arch", None) or (spec.arch if spec else f"sm_{cc[0]}{cc[1]}")
            opts.pop("devices", None)
            opts.pop("gpu", None)
            if spec is None:  # a GPU model targets.spec does not describe: the run's spec with this device's arch
                spec = hardware
            self.evaluator: Any = GPUPool(workload, devices=[0], gpu=spec, arch=arch, **opts)
            self.device = {"gpu": name or dev["name"], "device": dev["name"],
                           "cc": list(cc), "arch": arch, "copy_gbps": self.evaluator.copy_gbps,
                           "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
        elif kind == "static":
            from evaluators.factory import GPU_ONLY
            from evaluators.static import StaticEvaluator

            opts = {k: v for k, v in opts.items() if k not in GPU_ONLY}
            opts.setdefault("gpu", hardware)
            opts.setdefault("processes", depth)
            self.evaluator = StaticEvaluator(workload, **opts)
            self.device = {"gpu": self.evaluator.gpu.name, "device": f"static model of {self.evaluator.gpu.name}",
                           "cc": list(self.evaluator.gpu.cc), "arch": self.evaluator.arch, "copy_gbps": None}
        else:
            raise ValueError(f"EvaluationActor kind must be 'gpu' or 'static', got {kind!r}")

    def info(self) -> dict[str, Any]:
        """Where the actor runs and what it evaluates on: node_id, host, pid, actor_id, gpu (targets.spec key
        or the device name), device, cc, arch, copy_gbps (GB/s, measured by the worker; None for static),
        kind, the GPU worker's pid (None for static), verdicts (whether elites get sanitizer verdicts),
        objective (the evaluator's ObjectiveSpec as JSON, None for static) and shapes (what it times)."""
        objective = getattr(self.evaluator, "objective", None)
        shapes = getattr(self.evaluator, "shapes", None)
        return {**self.where, **self.device, "kind": self.kind, "worker_pid": self.worker_pid(),
                "verdicts": getattr(self.evaluator, "submit_verdict", None) is not None,
                "objective": objective.to_json() if hasattr(objective, "to_json") else objective,
                "shapes": [list(x) for x in shapes] if shapes is not None else None}

    def submit_verdict(self, key: Any, kernel: Kernel | KernelText) -> None:
        """Queue a compute-sanitizer verdict on ``kernel`` under ``key`` (``GPUPool.submit_verdict``)."""
        self.evaluator.submit_verdict(key, as_kernel(kernel))

    def collect_verdicts(self, wait: bool = False, timeout: float | None = None) -> list[tuple[Any, Any]]:
        """The (key, Verdict) pairs finished since the last call (``GPUPool.collect_verdicts``)."""
        return self.evaluator.collect_verdicts(wait=wait, timeout=timeout)

    def worker_pid(self) -> int | None:
        """Pid of the GPU worker process (the leader of the process group killed at a deadline), or None."""
        sups = getattr(self.evaluator, "_sups", None)
        if not sups or sups[0]._proc is None:
            return None
        return int(sups[0]._proc.pid)

    def evaluate(self, kernel: Kernel | KernelText, compiled: RemoteCompile | None = None) -> EvalResult:
        """Evaluate ``kernel`` with this actor's evaluator (never raises for a bad kernel: the status says what
        failed). ``compiled``: a ptxas run for this actor's arch done elsewhere, used when its ptxas release
        matches this node's. ``extra`` gains ``gpu``, ``arch``, ``host``, ``node_id`` and, when a task
        compiled, ``compile_host`` and ``compile_task_seconds``."""
        kernel = as_kernel(kernel)
        note: dict[str, Any] = {}
        if compiled is not None:
            note = self._remember(kernel, compiled)
        res = self.evaluator.evaluate(kernel)
        res.extra.update(gpu=self.device["gpu"], arch=self.device["arch"], host=self.where["host"],
                         node_id=self.where["node_id"], **note)
        return res

    def _remember(self, kernel: Kernel, compiled: RemoteCompile) -> dict[str, Any]:
        from evaluators.toolchain import remember_compile

        note: dict[str, Any] = {"compile_host": compiled.node, "compile_task_seconds": compiled.seconds}
        outcome = compiled.outcome()
        if outcome is None:
            note["compile_task"] = f"not used: {compiled.why}"
        elif compiled.arch != self.device["arch"]:
            note["compile_task"] = f"not used: compiled for {compiled.arch}, this actor runs {self.device['arch']}"
        elif not remember_compile(kernel, compiled.arch, outcome, ptxas_release=compiled.ptxas_release):
            note["compile_task"] = f"not used: ptxas {compiled.ptxas_release!r} there differs from this node's"
        return note

    def close(self) -> None:
        """Stop the evaluator (the GPU worker process); the actor can then be killed."""
        self.evaluator.close()
