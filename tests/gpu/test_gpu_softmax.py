"""On a GPU: the softmax example workload (docs/add-a-workload.md) runs on the GPU evaluator: its seeds pass
the gate, are timed against torch.softmax, and a kernel that skips the row max is rejected; the workers rebuild
the workload from its spec."""

from __future__ import annotations

import pytest

from evaluators.types import Status
from population.kernel import Kernel
from population.parser import parse_module
from workloads.softmax import SOURCE, Softmax

pytestmark = pytest.mark.gpu


def test_softmax_seeds_on_the_gpu_evaluator():
    from evaluators.gpu.pool import GPUPool
    from workloads.cuda_build import build_ptx

    wl = Softmax(rows=4096)
    with GPUPool(wl, devices=[0], shapes=[(4096, 1024), (4096, 8192)], repeats=10, seed=3) as pool:
        for k in wl.seeds():
            r = pool.evaluate(k)
            assert r.status == Status.OK, r.reason
            assert set(r.extra["objective"]["reference"].values()) == {"torch"} and r.objective > 0
            assert all("torch" in s.speedups and 0 < s.frac_copy <= 1.05 for s in r.shapes)
        # the same source without the max subtraction: exp overflows on the gate's "shifted" rows
        text = SOURCE.read_text().replace("__expf(xr[i] - m)", "__expf(xr[i])")
        path = SOURCE.with_name("softmax_nomax_test.cu")
        try:
            path.write_text(text)
            bad = Kernel(module=parse_module(build_ptx(path, {"THREADS": 256})), entry="softmax",
                         launch=wl.seeds()[1].launch)
        finally:
            path.unlink()
        r = pool.evaluate(bad)
        assert r.status == Status.WRONG_RESULT and "shifted" in r.reason, r.reason
