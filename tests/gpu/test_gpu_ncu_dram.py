"""On a GPU with ncu: the naive seed's measured DRAM traffic is close to the workload's byte model."""

from __future__ import annotations

import pytest

from workloads.rmsnorm import RMSNorm

pytestmark = pytest.mark.gpu


def test_naive_seed_dram_bytes_near_model():
    from evaluators.gpu.ncu import NcuError, find_ncu, measure_dram_bytes
    from targets.spec import resolve_gpu

    try:
        find_ncu()
    except NcuError as e:
        pytest.skip(str(e))
    wl = RMSNorm("bf16")
    # 2 x 512 MiB, far beyond the 60 MiB L2: at a shape that fits (4096 x 4096, 64 MiB in all) ncu saw only 14 of
    # the 33.5 MB of y written to DRAM during the launch (H200, 2026-11-30): the rest was still dirty in L2.
    shape = (32768, 8192)
    m = measure_dram_bytes(wl.seeds()[0], wl, shape, arch=resolve_gpu(None).arch)  # the default run's GPU
    x_bytes = y_bytes = shape[0] * shape[1] * 2
    # x is read twice per row but the second pass hits L2 (16 KiB rows), so DRAM reads are about x's bytes.
    assert 0.95 * x_bytes <= m.read_bytes <= 1.5 * x_bytes, (m, x_bytes)
    # Writes may end the launch in L2, at most its 60 MiB.
    assert y_bytes - (64 << 20) <= m.write_bytes <= 1.05 * y_bytes, (m, y_bytes)
    assert 0.9 * wl.bytes_moved(shape) <= m.total_bytes and m.time_us > 0
