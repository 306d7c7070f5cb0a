"""RMSNorm test kernels built from CUDA sources under tests/gpu/kernels (gate cases, red-team kernels, broken
variants), shared by the GPU test modules and their fixtures (tests/gpu/conftest.py)."""

from __future__ import annotations

from pathlib import Path

from population.kernel import Kernel, LaunchConfig

KERNELS = Path(__file__).resolve().parent / "kernels"
# Eight rows per 256-thread CTA: one warp per row, the launch config of the gate cases and red-team kernels.
WARP_ROWS = (("rows_per_cta", 8),)


def rmsnorm_kernel(cu: Path, defines: dict[str, int] | None = None, knobs: tuple = WARP_ROWS) -> Kernel:
    """The ``rmsnorm`` entry of CUDA source ``cu`` compiled with ``defines`` (``-D`` name -> value) to PTX
    (``workloads.cuda_build.build_ptx``; needs nvcc), as a Kernel of one 256-thread CTA with ``knobs``."""
    from population.parser import parse_module
    from workloads.cuda_build import build_ptx

    ptx = build_ptx(cu, defines or {})
    return Kernel(parse_module(ptx), "rmsnorm", LaunchConfig(block=(256, 1, 1), knobs=knobs))
