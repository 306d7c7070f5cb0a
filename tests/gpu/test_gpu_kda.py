"""On a GPU: the KDA seeds compute the recurrence (o and the final state, the inout buffer) within the workload
tolerance of the float64 JAX reference, launched directly (independent of the gate's inout handling), and fla's
fused_recurrent_kda agrees with the same reference when it is installed."""

from __future__ import annotations

import numpy as np
import pytest

from evaluators.gpu.gate import within_tolerance
from workloads.dtypes import to_device
from workloads.kda import KDARecurrent

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1), (3, 1, 63, 17), (2, 2048)]


@pytest.mark.parametrize("which", ["naive", "template"])
def test_kda_seed_matches_the_reference(which):
    import cupy as cp

    from evaluators.gpu.args import build_args, param_types
    from evaluators.toolchain import compile_ptx
    from targets.spec import resolve_gpu
    from workloads.dtypes import storage_dtype

    wl = KDARecurrent()
    kernel = wl.seeds()[0 if which == "naive" else 1]
    mod = cp.cuda.Module()
    mod.load(compile_ptx(kernel, resolve_gpu(None).arch).cubin)
    fn = mod.get_function(kernel.entry)
    atol, rtol = wl.tolerance
    for shape in SHAPES:
        for i, dist in enumerate(wl.distributions):
            host = wl.make_inputs(shape, 40 + i, dist)
            ref = wl.reference(host)
            inputs = to_device(host, cp)
            o = cp.full(wl.outputs(shape)[0].shape, 0x7FA5, dtype=storage_dtype("bf16", cp))
            grid, block, smem = wl.launch_dims(shape, kernel.launch)
            fn(grid, block, build_args(wl.abi, param_types(kernel), {**inputs, "o": o}, wl.scalars(shape),
                                       wl.entry), shared_mem=smem)
            cp.cuda.get_current_stream().synchronize()
            assert within_tolerance(o.get(), ref["o"], "bf16", atol, rtol), (which, shape, dist, "o")
            assert within_tolerance(inputs["state"].get(), ref["state"], "fp32", atol, rtol), (which, shape, dist)


def test_fla_baseline_matches_the_reference():
    pytest.importorskip("fla.ops.kda")
    import cupy as cp
    import torch

    wl = KDARecurrent()
    shape = (3, 1, 63, 17)
    host = wl.make_inputs(shape, 9)
    ref = wl.reference(host)
    notes: dict[str, str] = {}
    fns = wl.baselines(to_device(host, cp), shape, ("fla",), notes)
    assert "fla" in fns, notes
    o, state = fns["fla"]()
    o = o.float().squeeze(0).cpu().numpy().astype(np.float64)
    rms = np.sqrt(np.mean((o - ref["o"]) ** 2)) / np.sqrt(np.mean(ref["o"] ** 2))
    srms = np.sqrt(np.mean((state.cpu().numpy() - ref["state"]) ** 2)) / np.sqrt(np.mean(ref["state"] ** 2))
    assert rms < 5e-3 and srms < 5e-3, (rms, srms)
    assert torch.cuda.is_available()
