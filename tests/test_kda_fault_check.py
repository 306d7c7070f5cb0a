"""The fault check (evaluators/gpu/vmm.py) and inout buffers, on the CPU: every KDA kernel stores its final
state through ``state`` (an inout buffer), so a read-only mapping of it faults at that store whatever the
kernel's correctness (the first KDA search on the H200 lost its seeds that way, CUDA_ERROR_ILLEGAL_ADDRESS in
the fault check, 2026-12-01). The fault check maps read-only exactly the buffers no kernel may write."""

from __future__ import annotations

import pytest

from evaluators.gpu.vmm import read_only_buffers
from evaluators.input_stores import destination_space, provenance, writes_memory
from workloads.kda import KDARecurrent
from workloads.rmsnorm import RMSNorm


def stored_buffers(kernel, workload) -> set[str]:
    """ABI names of the buffers the entry writes to global memory (provenance roots ``p<i>``)."""
    pv = provenance(kernel)
    names = [p.name for p in workload.abi]
    out = set()
    for ins in pv.instructions:
        if writes_memory(ins) and destination_space(ins) in ("global", "generic"):
            out |= {names[int(r[1:])] for r in pv.address_roots(ins) if r.startswith("p")}
    return out


@pytest.fixture(scope="module")
def kda():
    return KDARecurrent()


def test_kda_seeds_store_their_final_state_into_the_inout_buffer(kda):
    for k in [*kda.seeds(), kda.instantiate({"cols": 8, "warps": 2})]:
        assert stored_buffers(k, kda) == {"state", "o"}


def test_fault_check_protects_the_inputs_and_leaves_inout_buffers_writable(kda):
    names = list(kda.make_inputs((1, 1), 0))
    assert read_only_buffers(kda, names) == kda.buffer_names("input") and "state" in names
    for k in kda.seeds():
        assert not stored_buffers(k, kda) & set(read_only_buffers(kda, names))
    rms = RMSNorm("bf16")
    assert read_only_buffers(rms, list(rms.make_inputs((1, 192), 0))) == ["x", "w"]
    assert stored_buffers(rms.seeds()[0], rms) == {"y"}
