"""On a GPU: the GPU pool and the static evaluator give the same status and reason to the same broken kernels
(the shared front half, evaluators/pipeline.py), and a good kernel passes both."""

from __future__ import annotations

import pytest

from evaluators.static import StaticEvaluator
from evaluators.types import Status
from tests.test_pipeline import broken_kernels
from workloads.rmsnorm import RMSNorm

pytestmark = pytest.mark.gpu


def test_pool_and_static_agree_on_broken_kernels():
    from evaluators.gpu.pool import GPUPool

    wl = RMSNorm("bf16")
    static = StaticEvaluator(wl, processes=1)
    # the pool times the first search shape, where the static evaluator's first check is too (same reasons)
    with GPUPool(wl, devices=[0], shapes=[wl.search_shapes[0]], baselines="none", naive_baseline=False,
                 baseline_names=()) as pool:
        for name, (kernel, status, _) in broken_kernels(wl).items():
            g, s = pool.evaluate(kernel), static.evaluate(kernel)
            assert g.status == s.status == status, (name, g.reason, s.reason)
            assert s.reason == "estimate: " + g.reason, name
        assert pool.evaluate(wl.seeds()[1]).status == Status.OK
