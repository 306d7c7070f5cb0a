"""The GPU pool's front half as the static red-team rounds run it (tests/test_redteam_round11.py onwards)."""

from __future__ import annotations

from evaluators.pipeline import Prepared, Rejected, prepare
from evaluators.types import Status
from population.kernel import Kernel
from targets.spec import get_gpu
from workloads.base import Workload


def front_half(kernel: Kernel, wl: Workload, check_stores: bool = True) -> Prepared | Rejected:
    """``evaluators.pipeline.prepare`` for the H200 at the workload's first search shape (RMSNorm: 32768 x 512):
    ptxas for sm_90, the ABI, the input-store check (unless ``check_stores`` is False) and the race lint.
    Returns the Prepared, or the Rejected it raised."""
    try:
        return prepare(kernel, wl, get_gpu("h200"), wl.search_shapes[:1], check_stores=check_stores)
    except Rejected as r:
        return r


def assert_rejected(kernel: Kernel, wl: Workload, status: Status, step: str, *pieces: str) -> Rejected:
    """The front half rejects ``kernel`` past the compile step with this status at this step, its reason naming
    every one of ``pieces``."""
    r = front_half(kernel, wl)
    assert isinstance(r, Rejected), "accepted by the front half"
    assert r.step != "compile", r.reason  # every red-team kernel assembles for sm_90
    assert (r.status, r.step) == (status, step), r.reason
    assert all(p in r.reason for p in pieces), r.reason
    return r


def assert_assembles_and_launches(kernel: Kernel, wl: Workload) -> None:
    """What guards a round's xfails: ptxas for sm_90 compiles ``kernel``, and without the static checks the front
    half gets through the ABI and the launch, so a kernel the checks pass is one the GPU pool would benchmark."""
    from evaluators.toolchain import compile_ptx

    compiled = compile_ptx(kernel, "sm_90")
    assert compiled.cubin[:4] == b"\x7fELF" and kernel.entry in compiled.resources
    p = front_half(kernel, wl, check_stores=False)
    assert isinstance(p, Prepared), (p.step, p.reason)


def assert_accepted(kernel: Kernel, wl: Workload) -> Prepared:
    """The front half accepts ``kernel``."""
    r = front_half(kernel, wl)
    assert not isinstance(r, Rejected), (r.status, r.step, r.reason)
    return r
