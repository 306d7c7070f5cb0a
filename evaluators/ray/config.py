"""``evaluator.backend=ray``: the RayEvaluator a composed run config asks for."""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf


def ray_evaluator(cfg: Any, workload: Any, gpu: Any, tasks: Any = None) -> Any:
    """Build ``evaluators.ray.RayEvaluator`` from ``cfg.evaluator`` (kind, options, ray.*), the run's GPUSpec
    ``gpu`` (what the static evaluator models; GPU actors use their own device's), ``cfg.objective`` and, in a
    multi-task run, every task's shapes (as ``evolve.app.make_evaluator_from`` gives the local GPU pool).
    A compile-only GPU makes ``auto`` static. Raises what RayEvaluator raises (ImportError without Ray,
    ConnectionError for an unreachable address, NoGPU for kind=gpu on a cluster without GPUs)."""
    from evaluators.ray.evaluator import RayEvaluator

    ev = cfg.evaluator
    r = ev.ray
    kind = str(ev.kind)
    if kind == "auto" and not getattr(gpu, "runnable", True):
        kind = "static"
    options = dict(OmegaConf.to_container(ev.options, resolve=True))
    if kind != "static":
        if "objective" in cfg:
            options.setdefault("objective", OmegaConf.to_container(cfg.objective, resolve=True))
        if tasks is not None:
            options.setdefault("shapes", [list(s) for t in tasks.tasks for s in t.shapes])
    runtime_env = OmegaConf.to_container(r.runtime_env, resolve=True) if r.runtime_env else None
    return RayEvaluator(workload, kind=kind, actors=r.actors, depth=int(r.depth), address=r.address,
                        num_cpus=r.num_cpus, num_gpus=r.num_gpus, compile_tasks=bool(r.compile_tasks),
                        actor_cpus=None if r.actor_cpus is None else float(r.actor_cpus), max_requeues=int(r.max_requeues), hardware=gpu,
                        ship_toolchain=r.ship_toolchain, runtime_env=runtime_env, options=options)
