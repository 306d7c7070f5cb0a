"""GPU test fixtures: one pool per test module kind, skipped where CuPy sees no GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.gpu.devices import gpu_count
from population.kernel import Kernel, LaunchConfig
from workloads.cuda_build import build_ptx

KERNELS = Path(__file__).resolve().parent / "kernels"


def pytest_collection_modifyitems(config, items):
    if gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="no GPU visible to CuPy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def broken_kernel(defect: int) -> Kernel:
    """The rmsnorm_broken.cu variant BROKEN=defect as a Kernel (one 256-thread CTA per row)."""
    from population.parser import parse_module

    ptx = build_ptx(KERNELS / "rmsnorm_broken.cu", {"BROKEN": defect})
    return Kernel(parse_module(ptx), "rmsnorm", LaunchConfig(block=(256, 1, 1), knobs=(("rows_per_cta", 1),)))


@pytest.fixture
def broken():
    return broken_kernel
