"""The kernel spread of the GPU occupancy comparison (tests/gpu/test_occupancy_gpu.py), checked with ptxas on
the CPU: registers from about 12 to 246, static shared memory and barrier counts as generated."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from evaluators.toolchain import compile_ptx
from targets.occupancy import occupancy

_spec = importlib.util.spec_from_file_location(
    "occupancy_gpu_kernels", Path(__file__).resolve().parent / "gpu" / "test_occupancy_gpu.py")
gpu_test = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_test)


def test_spread_spans_register_and_barrier_range():
    regs, bars = set(), set()
    for live, smem, bar in gpu_test.SPREAD:
        ru = compile_ptx(gpu_test.pressure_ptx(live, smem, bar)).resources["pressure"]
        regs.add(ru.registers)
        bars.add(ru.barriers)
        assert ru.shared_static_bytes == smem
        assert ru.barriers == bar + 1
        assert ru.spill_stores_bytes == 0
    assert min(regs) <= 16 and max(regs) >= 240
    assert len(regs) >= 12
    # Both sides of the 32- and 64-register steps (ptxas 13.0 reports even counts on sm_90: 32 then 34).
    assert {32, 34, 64, 66} <= regs
    assert {1, 2, 4, 8, 16} <= bars


def test_spread_exercises_every_limiter():
    limiters = set()
    for live, smem, bar in gpu_test.SPREAD:
        ru = compile_ptx(gpu_test.pressure_ptx(live, smem, bar)).resources["pressure"]
        for dyn in gpu_test.DYNAMIC:
            if smem + dyn > 227 * 1024:
                continue
            for block in gpu_test.BLOCKS:
                limiters.add(occupancy(block, ru.registers, smem, dynamic_shared_bytes=dyn,
                                       barriers=ru.barriers).limiter)
    assert {"warps", "registers", "shared_memory", "blocks", "barriers", "cannot_launch"} <= limiters
