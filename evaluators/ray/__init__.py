"""Scale-out over a Ray cluster: evaluation actors (one per GPU, or CPU actors with the static evaluator),
ptxas as Ray tasks over the cluster's CPUs, and a ``concurrent.futures.Executor`` on Ray tasks.

Public surface (Ray is imported lazily; ``pip install 'ptxforge[ray]'``)::

    connect(address=None) -> cluster resources           # ray.init: join `address` or start a local cluster
    RayEvaluator(workload, kind="auto", actors=None, depth=2, address=None, ...)   # evaluators.types.Evaluator
    RayExecutor(num_cpus=1)                               # Executor: submit(fn, *args) -> Future, as Ray tasks
    EvaluationActor                                       # the actor class (GPUPool or StaticEvaluator inside)

See docs/ray.md for running one search over N hosts x M GPUs and sweeps over a cluster.
"""

from evaluators.ray.actor import EvaluationActor, RemoteCompile, compile_task
from evaluators.ray.cluster import connect, project_runtime_env
from evaluators.ray.evaluator import EvaluatorUnavailable, RayEvaluator
from evaluators.ray.executor import RayExecutor

__all__ = ["EvaluationActor", "EvaluatorUnavailable", "RayEvaluator", "RayExecutor", "RemoteCompile",
           "compile_task", "connect", "project_runtime_env"]
