"""The GPU pool's front half as the static red-team rounds run it (tests/test_redteam_round11.py onwards)."""

from __future__ import annotations

from evaluators.pipeline import Prepared, Rejected, prepare
from population.kernel import Kernel
from targets.spec import get_gpu
from workloads.base import Workload


def front_half(kernel: Kernel, wl: Workload) -> Prepared | Rejected:
    """``evaluators.pipeline.prepare`` for the H200 at the workload's first search shape (RMSNorm: 32768 x 512):
    ptxas for sm_90, the ABI, the input-store check and the race lint. Returns the Prepared, or the Rejected it
    raised."""
    try:
        return prepare(kernel, wl, get_gpu("h200"), wl.search_shapes[:1])
    except Rejected as r:
        return r
