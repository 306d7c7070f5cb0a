"""Judging kernels: ptxas toolchain, occupancy, static traffic, workloads, GPU worker pool, gate, benchmark.

Public surface::

    compile_ptx(src, arch="sm_90", verify_only=False) -> CompileResult     # raises CompileError
    occupancy(threads_per_block, registers_per_thread, shared_bytes_per_block=0, cc=(9, 0)) -> Occupancy
    get_workload("rmsnorm", dtype="bf16") -> Workload
    make_evaluator("auto" | "gpu" | "static", workload) -> Evaluator       # evaluate(kernel) -> EvalResult
"""

from evaluators.factory import make_evaluator
from evaluators.toolchain import CompileResult, compile_ptx, find_nvcc, find_ptxas
from evaluators.types import (
    CompileError,
    EvalResult,
    Evaluator,
    Occupancy,
    ResourceUsage,
    ShapeResult,
    Status,
    geomean,
)
from targets.occupancy import occupancy
from targets.spec import GPUSpec, get_gpu
from workloads.registry import get_workload

__all__ = [
    "CompileError",
    "CompileResult",
    "EvalResult",
    "Evaluator",
    "GPUSpec",
    "Occupancy",
    "ResourceUsage",
    "ShapeResult",
    "Status",
    "compile_ptx",
    "find_nvcc",
    "find_ptxas",
    "geomean",
    "get_gpu",
    "get_workload",
    "make_evaluator",
    "occupancy",
]
