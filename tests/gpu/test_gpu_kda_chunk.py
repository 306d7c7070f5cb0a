"""On a GPU: the KDA chunked prefill pipeline (workloads/kda/chunk.py). Its reference stages run in CuPy around
the seeds of the evolved state pass: o and the final state match the float64 recurrent reference at the gate
shapes, the GPU gate passes the seeds and rejects broken state passes, the float64 chunked reference on the GPU
agrees with the JAX recurrence at a sampled pair of a search shape, the pool evaluates the template end to end
(gate, fault check, timed launches of the kernel alone with checked outputs, baselines), and fla's chunk_kda and
its inter-chunk kernel (on our intermediates) agree with the reference when fla is installed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evaluators.gpu.gate import within_tolerance
from evaluators.types import Status
from workloads.dtypes import to_device
from workloads.kda import KDAChunk

pytestmark = pytest.mark.gpu

KERNELS = Path(__file__).resolve().parent / "kernels"


def _launcher(wl, kernel):
    import cupy as cp

    from evaluators.gpu.args import param_types
    from evaluators.gpu.worker import make_launcher
    from evaluators.toolchain import compile_ptx
    from targets.spec import resolve_gpu

    mod = cp.cuda.Module()
    mod.load(compile_ptx(kernel, resolve_gpu(None).arch).cubin)
    run = make_launcher(wl, cp, mod.get_function(kernel.entry), param_types(kernel), kernel.launch.to_json())
    run.module = mod  # keep the module alive with the launcher
    return run


def _broken(defect: int):
    from population.kernel import Kernel, LaunchConfig
    from population.parser import parse_module
    from workloads.cuda_build import build_ptx

    ptx = build_ptx(KERNELS / "kda_chunk_broken.cu", {"BROKEN": defect})
    return Kernel(parse_module(ptx), "kda_chunk_state", LaunchConfig(block=(128, 1, 1), knobs=(("bv", 128),)))


@pytest.mark.parametrize("which", ["naive", "template"])
def test_pipeline_with_each_seed_matches_the_reference(which):
    import cupy as cp

    from workloads.dtypes import storage_dtype

    wl = KDAChunk()
    run = _launcher(wl, wl.seeds()[0 if which == "naive" else 1])
    atol, rtol = wl.tolerance
    for shape in [(1, 1), (1, 65), (3, 1, 63, 17), (2, 5, 1, 70, 2), (1, 2048)]:
        for i, dist in enumerate(wl.distributions):
            host = wl.make_inputs(shape, 40 + i, dist)
            ref = wl.reference(host)
            inputs = to_device(host, cp)
            o = cp.full(wl.outputs(shape)[0].shape, 0x7FA5, dtype=storage_dtype("bf16", cp))
            run(inputs, {"o": o}, shape)
            assert within_tolerance(o.get(), ref["o"], "bf16", atol, rtol), (which, shape, dist, "o")
            assert within_tolerance(inputs["state"].get(), ref["state"], "fp32", atol, rtol), (which, shape, dist)


def test_gpu_gate_passes_the_seeds_and_rejects_broken_state_passes():
    import cupy as cp

    from evaluators.gpu.gate import run_gate

    wl = KDAChunk()
    shapes = [(1, 17), (1, 65), (3, 1, 63, 17), (1, 2048)]
    for k in wl.seeds():
        r = run_gate(wl, _launcher(wl, k), 7, shapes, cp)
        assert r.status == Status.OK, r.reason
    for defect, word in ((1, ""), (2, "state"), (3, "")):
        r = run_gate(wl, _launcher(wl, _broken(defect)), 7, shapes, cp)
        assert r.status == Status.WRONG_RESULT and word in r.reason, (defect, r.reason)


def test_chunked_float64_reference_on_the_gpu_matches_the_recurrence_at_a_search_shape():
    """reference_rows at a search shape (the checked timed launches' reference) uses the float64 chunked form
    on the GPU; at a sampled (sequence, head) pair it agrees with the JAX recurrence."""
    import cupy as cp

    wl = KDAChunk()
    shape = wl.search_shapes[1]  # (96, varlen)
    inputs = wl.make_inputs(shape, 3, "normal", cp)
    host = {k: cp.asnumpy(v) for k, v in inputs.items()}
    n, hh = wl.sample_pairs(host, 2)[0]
    cu = host["cu_seqlens"].astype(np.int64)
    rows = np.arange(int(cu[n]), int(cu[n + 1]))
    got = cp.asnumpy(wl.reference_rows(inputs, cp.asarray(rows), cp)["o"])[:, hh]
    o, _ = wl.reference_pairs(host, [(n, hh)])
    np.testing.assert_allclose(got, o[rows, hh], rtol=1e-8, atol=1e-10)


def test_pool_evaluates_the_template_end_to_end():
    """Gate (with the inout state and the intermediates poisoned per launch), fault check, timed launches of the
    state pass alone with checked pipeline outputs, the naive and fla_fwd_h baselines at one search shape."""
    from evaluators.gpu.pool import GPUPool

    wl = KDAChunk()
    with GPUPool(wl, devices=[0], shapes=[wl.search_shapes[0]], repeats=5, timeout_s=300, seed=5) as pool:
        r = pool.evaluate(wl.seeds()[1])
        assert r.status == Status.OK, r.reason
        assert r.extra["worker_restarts"] == 0, r.extra
        s = r.shapes[0]
        assert s.time_us > 0 and "naive" in s.baseline_us, s
        if "fla_fwd_h" in s.baseline_us:
            assert r.objective == pytest.approx(s.baseline_us["fla_fwd_h"] / s.time_us, rel=1e-6)


def test_fla_chunk_kda_and_its_state_pass_agree_with_the_reference():
    pytest.importorskip("fla.ops.kda")
    import cupy as cp
    import torch

    from workloads.dtypes import storage_dtype, to_float64
    from workloads.kda.baselines import fla_chunk_baselines

    wl = KDAChunk()
    shape = (3, 1, 63, 130)
    host = wl.make_inputs(shape, 9)
    ref = wl.reference(host)

    def rms(a, b):
        return float(np.sqrt(np.mean((a - b) ** 2)) / np.sqrt(np.mean(b ** 2)))

    notes: dict[str, str] = {}
    fns = fla_chunk_baselines(to_device(host, cp), shape, ("fla_chunk",), notes)
    assert "fla_chunk" in fns, notes
    o, state = fns["fla_chunk"]()
    assert rms(o.float().squeeze(0).cpu().numpy().astype(np.float64), ref["o"]) < 5e-3
    assert rms(state.cpu().numpy(), ref["state"]) < 5e-3
    # fla's inter-chunk kernel on the intra stage's intermediates, then our output stage
    fns = wl.baselines(to_device(host, cp), shape, ("fla_fwd_h",), notes)
    assert "fla_fwd_h" in fns, notes
    h, v_new, final = fns["fla_fwd_h"]()
    plan, outs = fns["fla_fwd_h"].plan, fns["fla_fwd_h"].outputs
    plan.buffers["h"][...] = cp.from_dlpack(h.squeeze(0).contiguous())
    plan.buffers["v_new"][...] = cp.from_dlpack(v_new.squeeze(0).contiguous())
    plan.run_after()
    assert torch.cuda.is_available() and outs["o"].dtype == storage_dtype("bf16", cp)
    assert rms(to_float64(outs["o"].get(), "bf16"), ref["o"]) < 5e-3
    assert rms(final.cpu().numpy(), ref["state"]) < 5e-3
