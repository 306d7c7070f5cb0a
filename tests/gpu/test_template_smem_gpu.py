"""The RMSNorm template's shared-memory staging path (``smem_stages``) and push-model cluster reduction
(``cluster_push``) on a GPU: every long-row candidate (workloads.rmsnorm.LONG_ROW_CANDIDATES) and a few corners
through the whole gate (poisoned outputs, float64 reference on every gate shape: odd N for the scalar
fallback, 8192 x 65544, 3 x 262144; bitwise repeatability), then timed at awkward long rows (N no multiple of a
cluster's span, a prime N on the scalar path, a row three times the staged capacity on the re-read path, M no
multiple of anything) with every benchmarked output compared against float64."""

from __future__ import annotations

import pytest

from evaluators.types import Status
from workloads.rmsnorm import LONG_ROW_CANDIDATES

pytestmark = pytest.mark.gpu
POOL_SEED = 2027  # the pool fixture's gate seed (tests/gpu/conftest.py)

CANDIDATES = [k for sets in LONG_ROW_CANDIDATES.values() for k in sets] + [
    {"threads": 256, "rows_per_cta": 2, "cluster": 2, "smem_stages": 2, "row_iters": 3, "cluster_push": 1,
     "max_chunks": 4},
    {"threads": 128, "rows_per_cta": 8, "cluster": 2, "cluster_push": 1, "max_chunks": 2, "row_iters": 2},
]
# (M, N): a cluster span that does not divide N, an odd prime N (misaligned rows: the scalar fallback), a row
# longer than any staged capacity (the re-read path), the exact long rows with M no multiple of the row loop
AWKWARD = [(37, 65544), (5, 100003), (3, 3 * 262144), (131, 65536), (19, 131072), (9, 262144)]


@pytest.mark.parametrize("knobs", CANDIDATES, ids=lambda kn: "-".join(f"{k}{v}" for k, v in kn.items()))
def test_smem_sets_pass_the_gate_at_awkward_long_rows(pool, workload, knobs):
    kern = workload.instantiate(knobs)
    r = pool.evaluate(kern, shapes=AWKWARD, baselines="none", check_output="all")
    assert r.status == Status.OK, r.reason
    assert r.extra["gate_checks"] >= len(workload.gate_shapes)
    assert [s.shape for s in r.shapes] == AWKWARD
