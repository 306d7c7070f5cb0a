"""``evaluator.backend=ray``: the RayEvaluator a composed ``evaluator`` / ``hardware`` config asks for."""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf


def ray_evaluator(evaluator_cfg: Any, hardware_cfg: Any, workload: Any) -> Any:
    """Build ``evaluators.ray.RayEvaluator`` from ``cfg.evaluator`` (kind, options, ray.*) and ``cfg.hardware``
    (the static evaluator's GPU model and ptxas target; GPU actors use their own device's). A compile-only
    hardware makes ``auto`` static. Raises what RayEvaluator raises (ImportError without Ray, ConnectionError
    for an unreachable address, NoGPU for kind=gpu on a cluster without GPUs)."""
    from evaluators.ray.evaluator import RayEvaluator

    r = evaluator_cfg.ray
    kind = str(evaluator_cfg.kind)
    if kind == "auto" and bool(hardware_cfg.compile_only):
        kind = "static"
    options = dict(OmegaConf.to_container(evaluator_cfg.options, resolve=True))
    if kind == "static":
        options.setdefault("arch", str(hardware_cfg.arch))
    runtime_env = OmegaConf.to_container(r.runtime_env, resolve=True) if r.runtime_env else None
    return RayEvaluator(workload, kind=kind, actors=r.actors, depth=int(r.depth), address=r.address,
                        num_cpus=r.num_cpus, num_gpus=r.num_gpus, compile_tasks=bool(r.compile_tasks),
                        actor_cpus=float(r.actor_cpus), max_requeues=int(r.max_requeues),
                        hardware=str(hardware_cfg.name), ship_toolchain=r.ship_toolchain,
                        runtime_env=runtime_env, options=options)
