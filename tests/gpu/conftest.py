"""GPU test fixtures: one pool per test module kind, skipped where CuPy sees no GPU."""

from __future__ import annotations

import pytest

from evaluators.gpu.devices import gpu_count
from population.kernel import Kernel
from tests.gpu.rmsnorm_kernels import KERNELS, rmsnorm_kernel
from workloads.rmsnorm import RMSNorm


def pytest_collection_modifyitems(config, items):
    if gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="no GPU visible to CuPy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def broken_kernel(defect: int) -> Kernel:
    """The rmsnorm_broken.cu variant BROKEN=defect as a Kernel (one 256-thread CTA per row)."""
    return rmsnorm_kernel(KERNELS / "rmsnorm_broken.cu", {"BROKEN": defect}, (("rows_per_cta", 1),))


@pytest.fixture
def broken():
    return broken_kernel


@pytest.fixture(scope="module")
def workload():
    """RMSNorm in bf16, the workload of the ``pool`` fixture."""
    return RMSNorm("bf16")


@pytest.fixture(scope="module")
def pool(request, workload):
    """A GPUPool with the settings of ``experiment=rmsnorm_h200`` (GPUPool defaults: search shapes, cached
    baselines, check_output "one"; torch baseline only) seeded with the test module's ``POOL_SEED``."""
    from evaluators.gpu.pool import GPUPool

    p = GPUPool(workload, devices=[0], baseline_names=("torch",), seed=request.module.POOL_SEED)
    yield p
    p.close()
