"""On a GPU: the KDA seeds through the GPU evaluator (gate with the inout state, fault check, timing). The
fault check keeps the state buffer writable (tests/test_kda_fault_check.py): with it mapped read-only every KDA
kernel faulted at its final state store and cost a worker restart (H200, 2026-12-01)."""

from __future__ import annotations

import pytest

from evaluators.types import Status
from workloads.kda import KDARecurrent

pytestmark = pytest.mark.gpu


def test_kda_seeds_pass_the_gate_and_the_fault_check_without_a_restart():
    from evaluators.gpu.pool import GPUPool

    wl = KDARecurrent()
    with GPUPool(wl, devices=[0], shapes=[(64, *(1,) * 32)], baselines="none", naive_baseline=False, repeats=3,
                 timeout_s=120, seed=11) as pool:
        for k in wl.seeds():
            r = pool.evaluate(k)
            assert r.status == Status.OK, r.reason
            assert r.extra["worker_restarts"] == 0, r.extra
            assert "fault_check" not in r.extra["baseline_notes"], r.extra["baseline_notes"]  # it ran
