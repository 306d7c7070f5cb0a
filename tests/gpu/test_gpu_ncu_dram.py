"""On a GPU with ncu: the naive seed's measured DRAM traffic is close to the workload's byte model."""

from __future__ import annotations

import pytest

from evaluators.workloads.rmsnorm import RMSNorm

pytestmark = pytest.mark.gpu


def test_naive_seed_dram_bytes_near_model():
    from evaluators.gpu.ncu import NcuError, find_ncu, measure_dram_bytes

    try:
        find_ncu()
    except NcuError as e:
        pytest.skip(str(e))
    wl = RMSNorm("bf16")
    shape = (4096, 4096)
    m = measure_dram_bytes(wl.seeds()[0], wl, shape)
    model = wl.bytes_moved(shape)
    # x is read twice per row but the second pass hits L2 (8 KiB rows), so DRAM sees about the model's bytes.
    assert 0.9 * model <= m.total_bytes <= 1.6 * model, (m, model)
    assert m.time_us > 0
