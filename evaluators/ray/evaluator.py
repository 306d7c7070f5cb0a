"""RayEvaluator: the ``evaluators.types.Evaluator`` the engine calls when ``evaluator.backend=ray``.

The engine's ask/tell loop is unchanged: it calls ``evaluate(kernel)`` from ``capacity`` threads, and
``capacity`` is the number of evaluation actors times ``depth`` (candidates in flight per actor: one compiling
while another holds the GPU, as ``GPUPool`` does on one host). One call:

1. take a free slot of a live actor (blocking while all are busy);
2. put the kernel (as text, ``actor.KernelText``) in Ray's object store once and start its ptxas run as a Ray task for that actor's arch
   (``actor.compile_task`` through ``RayExecutor``: any node's free CPU);
3. call ``actor.evaluate(kernel, compile_ref)``; Ray starts the method when the compile is done, so the
   actor's other slot keeps its GPU busy meanwhile.

Faults. A kernel that hangs or crashes is handled inside the actor by ``GPUPool`` (worker process group killed,
worker respawned): one candidate, its status recorded. An actor that dies or a node that disappears raises
``RayActorError`` / ``ActorUnavailableError`` / ``ObjectLostError`` in the calls it had in flight: each of those
candidates is evaluated again on another slot (``extra["requeued"]`` counts how often), and one replacement
actor is started (Ray places it where a GPU, or a CPU for static, is free; its slots return when it is ready).
A candidate re-queued more than ``max_requeues`` times gets status ``crash``. The driver itself keeps no state
the store does not have: a killed driver resumes from the store as with any evaluator.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

from evaluators.types import EvalResult, Status
from population.kernel import Kernel

log = logging.getLogger(__name__)

KINDS = ("auto", "gpu", "static")


class EvaluatorUnavailable(RuntimeError):
    """No evaluation actor could be started (every start failed ``start_attempts`` times)."""


@dataclass
class _Actor:
    """One evaluation actor: its handle, its index (stable across replacements), generation, what it reported."""

    index: int
    generation: int
    handle: Any
    info: dict[str, Any] = field(default_factory=dict)
    dead: bool = False


class RayEvaluator:
    """Evaluates kernels on Ray actors (module docstring).

    workload: the run's Workload (must pickle); kind: ``"gpu"`` (one actor per cluster GPU, ``num_gpus=1``),
    ``"static"`` (CPU actors with the static evaluator) or ``"auto"`` (gpu when the cluster has a GPU);
    actors: how many (None: every GPU of the cluster for gpu, 2 for static); depth: candidates in flight per
    actor; address: ``ray.init`` address (None: start a local cluster with ``num_cpus``/``num_gpus``);
    compile_tasks: run ptxas as Ray tasks (else inside the actor); actor_cpus: CPUs each actor reserves (None:
    0 for gpu actors, which hold a GPU and wait on it, so every CPU is free for compile tasks; 1 for static);
    max_requeues: re-evaluations of a candidate whose actor died; start_attempts: tries to start an actor in
    one slot before giving up on it; compile_wait_s: how long a compile task may wait for a CPU before the
    actor compiles for itself (s; no deadlock when actors hold every CPU); hardware: the run's GPUSpec (or
    ``targets.spec`` name; None: the default) the static evaluator models;
    ship_toolchain / runtime_env: see ``evaluators.ray.cluster.connect``; options: GPUPool / StaticEvaluator
    keyword arguments.

    Raises ImportError without Ray, ValueError for a bad kind or count, EvaluatorUnavailable when no actor starts.
    """

    def __init__(self, workload: Any, *, kind: str = "auto", actors: int | None = None, depth: int = 2,
                 address: str | None = None, num_cpus: int | None = None, num_gpus: int | None = None,
                 compile_tasks: bool = True, actor_cpus: float | None = None, max_requeues: int = 3,
                 start_attempts: int = 3, compile_wait_s: float = 30.0, hardware: Any = None, ship_code: bool | None = None,
                 ship_toolchain: bool | None = None, runtime_env: dict[str, Any] | None = None,
                 options: dict[str, Any] | None = None) -> None:
        from evaluators.ray.cluster import connect

        if kind not in KINDS:
            raise ValueError(f"evaluator.kind must be one of {KINDS}, got {kind!r}")
        if depth < 1:
            raise ValueError(f"evaluator.ray.depth must be >= 1, got {depth}")
        if actors is not None and actors < 1:
            raise ValueError(f"evaluator.ray.actors must be >= 1 or null, got {actors}")
        resources = connect(address, num_cpus=num_cpus, num_gpus=num_gpus, ship_code=ship_code,
                            ship_toolchain=ship_toolchain, runtime_env=runtime_env)
        import ray

        from evaluators.ray.executor import RayExecutor

        self._ray = ray
        gpus = int(resources.get("GPU", 0))
        if kind == "auto":
            kind = "gpu" if gpus > 0 else "static"
        if kind == "gpu" and gpus == 0:
            from evaluators.gpu.pool import NoGPU

            raise NoGPU(f"evaluator.kind=gpu: the Ray cluster has no GPU (resources {resources})")
        self.kind, self.workload, self.depth = kind, workload, int(depth)
        self.estimate = kind == "static"
        n = actors if actors is not None else (gpus if kind == "gpu" else 2)
        if kind == "gpu" and n > gpus:
            raise ValueError(f"evaluator.ray.actors={n} GPU actors, but the Ray cluster has {gpus} GPUs")
        self.hardware, self.options = hardware, dict(options or {})
        self.max_requeues, self.start_attempts = int(max_requeues), int(start_attempts)
        from evaluators.ray.actor import EvaluationActor

        # SPREAD: actors go to different nodes while there is room (their CPU work and failure domains spread too).
        if actor_cpus is None:
            actor_cpus = 0.0 if kind == "gpu" else 1.0
        res_opts: dict[str, Any] = {"num_cpus": actor_cpus, "max_concurrency": self.depth, "max_restarts": 0,
                                    "scheduling_strategy": "SPREAD"}
        if kind == "gpu":
            res_opts["num_gpus"] = 1
        self._actor_cls = ray.remote(EvaluationActor).options(**res_opts)
        self._compiler = RayExecutor(num_cpus=1) if compile_tasks else None
        self._lock = threading.Lock()
        self._free: queue.Queue[_Actor] = queue.Queue()
        self._failures: dict[int, int] = {}
        self._closed = False
        self.replacements = 0  # successors started and ready
        self.lost = 0  # actors found dead (each gets one successor)
        self.requeued = 0  # evaluations started again because their actor was lost
        self.compile_fallbacks = 0  # compiles the actor did itself because no task ran within compile_wait_s
        self.compile_wait_s = float(compile_wait_s)
        self._actors: dict[int, _Actor] = {i: self._spawn(i, 0) for i in range(n)}
        started = []
        for a in list(self._actors.values()):
            try:
                a.info = ray.get(a.handle.info.remote())
                started.append(a)
            except Exception as e:  # let the remaining actors serve; say why this one did not start
                log.warning("evaluation actor %d did not start: %s", a.index, e)
                self._failures[a.index] = 1
                a.dead = True
        if not started:
            self.close()
            raise EvaluatorUnavailable(f"no evaluation actor started ({n} tried, kind={kind}); see the log above")
        for a in started:
            self._release_slots(a)
        first = started[0].info
        self.objective, self.shapes = first.get("objective"), first.get("shapes")
        # Sanitizer verdicts on new elites (GPUPool's), forwarded to the actors; None where the actors give none,
        # which tells the engine to confirm elites at once (as GPUPool(sanitize_elites=False) does).
        self._verdicts: dict[Any, tuple[int, int, Any]] = {}  # key -> (actor index, generation, KernelText)
        self._verdict_rr = 0
        if not all(a.info.get("verdicts") for a in started):
            self.submit_verdict = None  # type: ignore[assignment]
            self.collect_verdicts = None  # type: ignore[assignment]
        for a in self._actors.values():
            if a.dead:
                self._replace(a)
        self.capacity = n * self.depth
        log.info("Ray evaluator: %d %s actors x depth %d: %s", len(started), kind, self.depth,
                 [(a.info.get("host"), a.info.get("gpu")) for a in started])

    # ------------------------------------------------------------------------------------------- actors
    def _spawn(self, index: int, generation: int) -> _Actor:
        handle = self._actor_cls.remote(self.kind, self.workload, self.options, self.hardware, self.depth)
        return _Actor(index, generation, handle)

    def _release_slots(self, a: _Actor) -> None:
        for _ in range(self.depth):
            self._free.put(a)

    def _replace(self, old: _Actor) -> None:
        """Start the successor of ``old`` in a background thread; its slots return once it is ready."""

        def run() -> None:
            while not self._closed:
                new = self._spawn(old.index, old.generation + 1)
                try:
                    new.info = self._ray.get(new.handle.info.remote())
                except Exception as e:
                    fails = self._failures.get(old.index, 0) + 1
                    self._failures[old.index] = fails
                    log.warning("replacement of evaluation actor %d failed (%d of %d): %s", old.index, fails,
                                self.start_attempts, e)
                    if fails >= self.start_attempts:
                        with self._lock:
                            new.dead = True
                            self._actors[old.index] = new
                        self._free.put(new)  # wakes a waiting caller, which sees it dead and re-checks
                        return
                    continue
                with self._lock:
                    if self._closed:
                        break
                    self._actors[old.index] = new
                    self.replacements += 1
                log.info("evaluation actor %d replaced on %s", old.index, new.info.get("host"))
                self._release_slots(new)
                return
            # closed while starting: do not leave the actor behind
            try:
                self._ray.kill(new.handle)
            except Exception:
                pass

        threading.Thread(target=run, name=f"ray-replace-{old.index}", daemon=True).start()

    def _lost(self, a: _Actor, err: BaseException) -> None:
        with self._lock:
            if a.dead or self._closed:
                return
            a.dead = True
            self.lost += 1
        log.warning("evaluation actor %d (%s, pid %s) lost: %s; replacing it", a.index, a.info.get("host"),
                    a.info.get("pid"), str(err).splitlines()[0][:300])
        try:
            self._ray.kill(a.handle, no_restart=True)
        except Exception:
            pass
        self._replace(a)

    def _take(self) -> _Actor:
        while True:
            try:
                a = self._free.get(timeout=60.0)
            except queue.Empty:
                if self._closed:
                    raise RuntimeError("RayEvaluator is closed") from None
                log.warning("no evaluation actor free for 60 s (waiting for the cluster to place replacements)")
                continue
            if not a.dead:
                return a
            with self._lock:
                alive = [x for x in self._actors.values() if not x.dead]
                gone = all(self._failures.get(i, 0) >= self.start_attempts for i, x in self._actors.items()
                           if x.dead)
            if not alive and gone:
                self._free.put(a)  # wake the other waiters too
                raise EvaluatorUnavailable("every evaluation actor failed to start; see the log")

    @property
    def actors(self) -> list[dict[str, Any]]:
        """What each live actor reported at start (``EvaluationActor.info``), by index."""
        with self._lock:
            return [dict(a.info, index=a.index, generation=a.generation) for a in self._actors.values()
                    if not a.dead]

    def handle(self, index: int) -> Any:
        """The Ray actor handle currently serving slot ``index`` (tests and tools)."""
        with self._lock:
            return self._actors[index].handle

    # ----------------------------------------------------------------------------------------- evaluate
    def evaluate(self, kernel: Kernel) -> EvalResult:
        """Compile (a Ray task), gate and benchmark ``kernel`` on a free actor; never raises for a bad kernel.
        Re-queues the candidate when its actor dies mid-evaluation (module docstring). Raises RuntimeError when
        closed, EvaluatorUnavailable when no actor is left."""
        from ray.exceptions import ActorUnavailableError, ObjectLostError, RayActorError

        if self._closed:
            raise RuntimeError("RayEvaluator is closed")
        from evaluators.ray.actor import KernelText

        kref = self._ray.put(KernelText.of(kernel))
        requeued = 0
        lost_on: list[str] = []
        while True:
            a = self._take()
            cref = self._compiler.submit_ref(_compile, kref, a.info["arch"]) if self._compiler else None
            if cref is not None and not self._ray.wait([cref], timeout=self.compile_wait_s, fetch_local=False)[0]:
                # No CPU took the task in time (every CPU held by actors, a node lost): the actor compiles.
                self._ray.cancel(cref, force=False)
                cref = None
                with self._lock:
                    self.compile_fallbacks += 1
            try:
                res: EvalResult = self._ray.get(a.handle.evaluate.remote(kref, cref))
            except ObjectLostError as e:  # the compiled cubin was lost with its node: compile again
                self._free.put(a)
                requeued += 1
                lost_on.append(f"compile output lost ({str(e).splitlines()[0][:200]})")
                if requeued > self.max_requeues:
                    return EvalResult(status=Status.CRASH, estimate=self.estimate,
                                      reason=f"compile output lost {requeued} times: {'; '.join(lost_on)}",
                                      extra={"requeued": requeued})
                continue
            except (RayActorError, ActorUnavailableError) as e:
                self._lost(a, e)
                requeued += 1
                lost_on.append(f"actor {a.index}.{a.generation} on {a.info.get('host')}")
                with self._lock:
                    self.requeued += 1
                if requeued > self.max_requeues:
                    return EvalResult(status=Status.CRASH, estimate=self.estimate,
                                      reason=f"evaluation actor lost {requeued} times with this candidate "
                                             f"in flight ({', '.join(lost_on)}): {str(e).splitlines()[0][:300]}",
                                      extra={"requeued": requeued})
                continue
            except Exception as e:  # the evaluator raised inside a live actor: this candidate's crash
                self._free.put(a)
                return EvalResult(status=Status.CRASH, estimate=self.estimate,
                                  reason=f"evaluation actor raised {type(e).__name__}: {str(e)[:1500]}",
                                  extra={"requeued": requeued})
            self._free.put(a)
            if requeued:
                res.extra["requeued"] = requeued
                res.extra["lost_on"] = lost_on
            return res

    # ------------------------------------------------------------------------------------------ verdicts
    def submit_verdict(self, key: Any, kernel: Kernel) -> None:  # type: ignore[no-redef]
        """Queue a compute-sanitizer verdict on ``kernel`` under ``key`` on a live actor (round robin); when that
        actor is lost before the verdict is collected, it is asked again of another (``collect_verdicts``)."""
        from evaluators.ray.actor import KernelText

        text = KernelText.of(kernel)
        self._send_verdict(key, text)

    def _send_verdict(self, key: Any, text: Any) -> None:
        with self._lock:
            alive = [a for a in self._actors.values() if not a.dead]
            if not alive:
                self._verdicts[key] = (-1, -1, text)  # re-sent by collect_verdicts when an actor is back
                return
            a = alive[self._verdict_rr % len(alive)]
            self._verdict_rr += 1
            self._verdicts[key] = (a.index, a.generation, text)
        from ray.exceptions import ActorUnavailableError, RayActorError

        try:  # synchronous: a threaded actor does not keep call order, and the queueing itself is quick
            self._ray.get(a.handle.submit_verdict.remote(key, text))
        except (RayActorError, ActorUnavailableError) as e:
            self._lost(a, e)  # collect_verdicts sends it to the successor or another actor

    def collect_verdicts(self, wait: bool = False, timeout: float | None = None) -> list[tuple[Any, Any]]:  # type: ignore[no-redef]
        """(key, Verdict) pairs finished since the last call, from every actor; ``wait``: wait for every queued
        one (``timeout`` s per actor). Verdicts queued on an actor that was lost are queued again elsewhere."""
        from ray.exceptions import ActorUnavailableError, RayActorError

        with self._lock:
            actors = [a for a in self._actors.values() if not a.dead]
            orphans = [(k, t) for k, (i, g, t) in self._verdicts.items()
                       if i not in self._actors or self._actors[i].dead or self._actors[i].generation != g]
        for key, text in orphans:
            self._send_verdict(key, text)
        out: list[tuple[Any, Any]] = []
        refs = [(a, a.handle.collect_verdicts.remote(wait, timeout)) for a in actors]
        for a, ref in refs:
            try:
                got = self._ray.get(ref)
            except (RayActorError, ActorUnavailableError) as e:
                self._lost(a, e)
                continue
            out.extend(got)
        with self._lock:
            for key, _ in out:
                self._verdicts.pop(key, None)
        return out

    def close(self) -> None:
        """Stop every actor (their GPU workers first) and the compile executor; idempotent. The Ray
        connection stays (other code in this process may use it)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            actors = list(self._actors.values())
        refs = [a.handle.close.remote() for a in actors if not a.dead]
        try:
            self._ray.wait(refs, num_returns=len(refs), timeout=30)
        except Exception:
            pass
        for a in actors:
            try:
                self._ray.kill(a.handle, no_restart=True)
            except Exception:
                pass
        if self._compiler is not None:
            self._compiler.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> RayEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _compile(kernel: Kernel, arch: str) -> Any:
    from evaluators.ray.actor import compile_task

    return compile_task(kernel, arch)
