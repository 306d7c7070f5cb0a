"""The occupancy calculator against the driver's ``cuOccupancyMaxActiveBlocksPerMultiprocessor``.

Kernels of chosen register pressure, static shared memory and barrier count are generated as PTX, compiled
with ptxas, loaded as cubins with CuPy and queried for a spread of block sizes and dynamic shared memory.
tests/test_occupancy_ptxas.py checks on the CPU that the generated spread really spans the register range (so
the GPU comparison means something); the test here needs an NVIDIA GPU and CuPy and is skipped otherwise.
"""

from __future__ import annotations

import pytest

from evaluators.toolchain import compile_ptx
from targets.occupancy import occupancy


def pressure_ptx(live: int, smem_bytes: int = 0, barrier_id: int = 0, name: str = "pressure") -> str:
    """An sm_90 entry ``name(.u64 in, .u64 out)`` that keeps ``live`` loaded floats live at once.

    The volatile loads keep their order and the fma chain consumes them last-loaded-first, so every value is
    live when the chain starts: ptxas needs about ``live`` + a handful registers. ``smem_bytes`` > 0 adds a
    static ``.shared`` buffer that is written and read back; ``barrier_id`` sets the ``bar.sync`` id
    (ptxas then reports ``barrier_id + 1`` barriers).
    """
    lines = [
        ".version 9.0", ".target sm_90", ".address_size 64", "",
        f".visible .entry {name}(", "\t.param .u64 p_in,", "\t.param .u64 p_out", ")", "{",
        "\t.reg .b32 \t%r<4>;", "\t.reg .b64 \t%rd<8>;", f"\t.reg .f32 \t%f<{live + 2}>;",
    ]
    if smem_bytes:
        lines.append(f"\t.shared .align 16 .b8 sbuf[{smem_bytes}];")
    lines += [
        "\tld.param.u64 \t%rd1, [p_in];", "\tld.param.u64 \t%rd2, [p_out];",
        "\tcvta.to.global.u64 \t%rd3, %rd1;", "\tcvta.to.global.u64 \t%rd4, %rd2;",
        "\tmov.u32 \t%r1, %tid.x;", "\tmul.wide.u32 \t%rd5, %r1, 4;",
        "\tadd.s64 \t%rd6, %rd3, %rd5;", "\tadd.s64 \t%rd7, %rd4, %rd5;",
    ]
    lines += [f"\tld.volatile.global.f32 \t%f{i}, [%rd6+{4096 * i}];" for i in range(live)]
    lines.append(f"\tmov.f32 \t%f{live}, %f{live - 1};")
    lines += [f"\tfma.rn.f32 \t%f{live}, %f{live}, %f{live}, %f{i};" for i in range(live - 2, -1, -1)]
    if smem_bytes:
        lines.append(f"\tst.shared.f32 \t[sbuf], %f{live};")
    lines.append(f"\tbar.sync \t{barrier_id};")
    if smem_bytes:
        lines += [f"\tld.shared.f32 \t%f{live + 1}, [sbuf+{smem_bytes - 4}];",
                  f"\tadd.f32 \t%f{live}, %f{live}, %f{live + 1};"]
    lines += [f"\tst.global.f32 \t[%rd7], %f{live};", "\tret;", "}", ""]
    return "\n".join(lines)


# (live values, static smem bytes, bar.sync id)
SPREAD = [(4, 0, 0), (24, 0, 0), (26, 0, 0), (27, 0, 0), (28, 0, 0), (58, 0, 0), (59, 0, 0), (40, 0, 0), (56, 4096, 0), (60, 0, 3), (90, 0, 0),
          (120, 16384, 1), (160, 0, 0), (200, 40000, 0), (240, 0, 15), (10, 48 * 1024, 7)]
BLOCKS = [32, 64, 96, 128, 192, 256, 384, 512, 640, 768, 1024]
DYNAMIC = [0, 1000, 8 * 1024, 40 * 1024, 100 * 1024]


@pytest.mark.gpu
def test_matches_driver_occupancy():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no GPU visible")
    except cupy.cuda.runtime.CUDARuntimeError:
        pytest.skip("no GPU visible")
    drv = cupy.cuda.driver
    dev = cupy.cuda.Device()
    cc_text = str(dev.compute_capability)  # "90" on an H200
    cc = (int(cc_text[:-1]), int(cc_text[-1]))
    mismatches, checked = [], 0
    for live, smem, bar in SPREAD:
        res = compile_ptx(pressure_ptx(live, smem, bar))
        ru = res.resources["pressure"]
        mod = cupy.cuda.Module()
        mod.load(res.cubin)
        fn = mod.get_function("pressure")
        for dyn in DYNAMIC:
            if smem + dyn > 227 * 1024:
                continue
            # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8 in cuda.h
            drv.funcSetAttribute(fn.ptr, getattr(drv, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 8), dyn)
            for block in BLOCKS:
                ours = occupancy(block, ru.registers, ru.shared_static_bytes, dynamic_shared_bytes=dyn,
                                 barriers=ru.barriers, cc=cc).blocks_per_sm
                theirs = drv.occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, block, dyn)
                checked += 1
                if ours != theirs:
                    mismatches.append((live, ru.registers, smem, ru.barriers, dyn, block, ours, theirs))
    assert checked > 300
    assert not mismatches, f"{len(mismatches)}/{checked} disagree (live, regs, smem, bars, dyn, block, ours, driver): {mismatches[:20]}"
