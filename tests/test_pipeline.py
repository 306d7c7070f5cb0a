"""The shared front half (evaluators/pipeline.py): the same broken kernels get the same status and reason from
the static evaluator and from the GPU pool's path (``prepare``, which GPUPool.evaluate runs before any worker
sees the kernel; tests/gpu/test_gpu_pipeline.py feeds the same kernels to a real GPUPool)."""

from __future__ import annotations

import pytest

from evaluators.pipeline import Prepared, Rejected, prepare
from evaluators.static import StaticEvaluator
from evaluators.types import Status
from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module
from targets.spec import get_gpu
from workloads.rmsnorm import RMSNorm


def broken_kernels(wl: RMSNorm) -> dict[str, tuple[Kernel, Status, str]]:
    """name -> (kernel, expected status, step) built from the naive RMSNorm seed; shared with the GPU test."""
    seed = wl.seeds()[0]
    ptx = seed.ptx

    def k(text: str, entry: str = "rmsnorm", launch: LaunchConfig = seed.launch) -> Kernel:
        return Kernel(module=parse_module(text), entry=entry, launch=launch)

    return {
        "ptxas_error": (k(ptx.replace("ld.param.f32 \t%f9", "ld.param.f33 \t%f9")), Status.COMPILE_ERROR, "compile"),
        "missing_entry": (k(ptx, entry="rmsnorm_v2"), Status.LOAD_ERROR, "entry"),
        "abi_extra_param": (k(ptx.replace(".param .f32 rmsnorm_param_5", ".param .f32 rmsnorm_param_5,\n"
                                          "\t.param .u32 rmsnorm_param_6")), Status.LAUNCH_ERROR, "abi"),
        "stores_into_x": (k(ptx.replace("ld.param.u64 \t%rd6, [rmsnorm_param_1];",
                                        "ld.param.u64 \t%rd6, [rmsnorm_param_1];\n\tst.global.u32 [%rd8], 0;")),
                          Status.INPUT_MUTATED, "input_stores"),
        "block_over_1024": (k(ptx, launch=LaunchConfig(block=(2048, 1, 1))), Status.LAUNCH_ERROR, "launch"),
        "smem_over_sm": (k(ptx, launch=LaunchConfig(block=(256, 1, 1), dynamic_smem_bytes=240 * 1024)),
                         Status.LAUNCH_ERROR, "launch"),
    }


@pytest.fixture(scope="module")
def wl():
    return RMSNorm("bf16")


def test_static_and_gpu_front_half_agree_on_broken_kernels(wl):
    gpu = get_gpu("h200")
    static = StaticEvaluator(wl, gpu=gpu, processes=1)
    for name, (kernel, status, step) in broken_kernels(wl).items():
        with pytest.raises(Rejected) as ei:  # the GPU pool's path: rejected before any worker sees it
            prepare(kernel, wl, gpu, wl.search_shapes[:1])
        r = static.evaluate(kernel)
        assert (ei.value.status, ei.value.step) == (status, step), name
        assert r.status == status and r.estimate, name
        assert r.reason == "estimate: " + ei.value.reason, name
    # and a kernel that is fine passes, with the facts both evaluators report
    p = prepare(wl.seeds()[1], wl, gpu, wl.search_shapes)
    assert isinstance(p, Prepared) and p.param_types == ["u64", "u64", "u64", "u32", "u32", "f32"]
    assert p.occupancy.blocks_per_sm > 0 and set(p.traffic) == {tuple(s) for s in wl.search_shapes}
    r = static.evaluate(wl.seeds()[1])
    assert r.status == Status.OK and r.features == p.features and r.occupancy == p.occupancy


def test_prepare_reports_ptxas_line_and_limits(wl):
    gpu = get_gpu("h200")
    kernels = broken_kernels(wl)
    with pytest.raises(Rejected) as ei:
        prepare(kernels["ptxas_error"][0], wl, gpu, wl.search_shapes[:1])
    assert ei.value.extra["line"] is not None and "f33" in ei.value.reason
    with pytest.raises(Rejected) as ei:
        prepare(kernels["smem_over_sm"][0], wl, gpu, wl.search_shapes[:1])
    assert "245760 B dynamic shared memory" in ei.value.reason and "on h200" in ei.value.reason
    with pytest.raises(Rejected, match=r"launch rule at shape \(32768, 512\): block \(2048, 1, 1\) has 2048"):
        prepare(kernels["block_over_1024"][0], wl, gpu, wl.search_shapes[:1])
    with pytest.raises(ValueError, match="at least one shape"):
        prepare(wl.seeds()[0], wl, gpu, [])


def test_the_gpu_tests_broken_kernels_reach_the_step_they_are_made_for(wl):
    """tests/gpu/kernels/rmsnorm_broken.cu's defects as the GPU pool's front half judges them (ptxas, input-store
    check, race lint): defect 2 (a read of shared memory no store of the CTA reaches) is rejected statically by race
    lint rule 5's `.shared` form; every other defect must reach the GPU, where tests/gpu/test_gpu_pool.py expects
    its runtime status (4: a spin without nanosleep, which rule 6 would reject, so the watchdog's timeout is
    what judges it)."""
    from pathlib import Path

    from tests.gpu.rmsnorm_kernels import judge, rmsnorm_kernel

    cu = Path(__file__).parent / "gpu" / "kernels" / "rmsnorm_broken.cu"
    verdicts = {d: judge(rmsnorm_kernel(cu, {"BROKEN": d}, (("rows_per_cta", 1),)), wl) for d in range(1, 7)}
    assert verdicts[2] is not None and verdicts[2].status == Status.NONDETERMINISTIC
    assert "launch_state" in verdicts[2].reason and "stash" in verdicts[2].reason
    assert {d: v for d, v in verdicts.items() if d != 2 and v is not None} == {}
