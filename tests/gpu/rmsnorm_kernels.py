"""RMSNorm test kernels built from CUDA sources under tests/gpu/kernels (gate cases, red-team kernels, broken
variants), shared by the GPU test modules and their fixtures (tests/gpu/conftest.py) and by the CPU red-team
tests (tests/test_redteam_round4.py, tests/test_redteam_round5.py): the red-team kernel builder, the pipeline's
front-half verdict, the sanitizer verdict through a pool, and the recorded H200 kernels loaded once per process."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from population.kernel import Kernel, LaunchConfig

if TYPE_CHECKING:
    from evaluators.pipeline import Rejected
    from evaluators.recorded import Recording
    from evaluators.types import Status
    from workloads.rmsnorm import RMSNorm

KERNELS = Path(__file__).resolve().parent / "kernels"
# Eight rows per 256-thread CTA: one warp per row, the launch config of the gate cases and red-team kernels.
WARP_ROWS = (("rows_per_cta", 8),)
REDTEAM = KERNELS / "redteam"
# One row at a time, four rows per 256-thread CTA: rt_sanitizer_dodge's launch (and the other barrier dodgers').
DODGE = (("rows_per_cta", 1), ("row_iters", 4))
ROOT = KERNELS.parent.parent.parent  # the repository


def rmsnorm_kernel(cu: Path, defines: dict[str, int] | None = None, knobs: tuple = WARP_ROWS) -> Kernel:
    """The ``rmsnorm`` entry of CUDA source ``cu`` compiled with ``defines`` (``-D`` name -> value) to PTX
    (``workloads.cuda_build.build_ptx``; needs nvcc), as a Kernel of one 256-thread CTA with ``knobs``."""
    from population.parser import parse_module
    from workloads.cuda_build import build_ptx

    ptx = build_ptx(cu, defines or {})
    return Kernel(parse_module(ptx), "rmsnorm", LaunchConfig(block=(256, 1, 1), knobs=knobs))


def redteam(name: str, knobs: tuple = DODGE) -> Kernel:
    """The red-team kernel ``tests/gpu/kernels/redteam/<name>.cu`` (no defines) with ``knobs``
    (``rmsnorm_kernel``; needs nvcc)."""
    return rmsnorm_kernel(REDTEAM / f"{name}.cu", None, knobs)


def judge(kernel: Kernel, wl: RMSNorm) -> Rejected | None:
    """What the GPU pool's front half says (``evaluators.pipeline.prepare`` for an H200 at ``wl``'s first search
    shape, ptxas included): the rejection, or None when the kernel would reach the GPU."""
    from evaluators.pipeline import Rejected, prepare
    from targets.spec import get_gpu

    try:
        prepare(kernel, wl, get_gpu("h200"), wl.search_shapes[:1])
    except Rejected as r:
        return r
    return None


def sanitized(pool, kernel: Kernel) -> tuple[Status, Status | None]:
    """(the pool's status, the sanitizer verdict's status when the kernel was ok, else None). Skips the test
    when the kernel was ok and compute-sanitizer is not installed."""
    import pytest

    from evaluators.gpu.sanitizer import find_sanitizer
    from evaluators.types import Status

    r = pool.evaluate(kernel)
    if r.status != Status.OK:
        return r.status, None
    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer not installed")
    return r.status, pool.sanitize([kernel])[0].status


@functools.cache
def recorded_h200() -> Recording:
    """The recorded H200 runs (every ``experiments/data/*.sqlite.xz``, gate v1, v5 and v10 runs) as
    ``evaluators.recorded.load_recording`` reads them, read once per process and shared by the tests that scan
    them (read only: callers must not change it)."""
    from evaluators.recorded import load_recording

    return load_recording(sorted((ROOT / "experiments" / "data").glob("*.sqlite.xz")))


def recorded_version(m: Any) -> int:
    """The gate rules version a recorded row was measured under (rows of gate v1 carry none: 1)."""
    return int((m.row.metrics.get("extra") or {}).get("gate_version") or 1)


def recorded_before(version: int) -> dict[str, tuple[int, Any]]:
    """The kernels of ``recorded_h200`` first measured under gate rules older than ``version``, by identity, each
    as (the oldest version it was recorded under, its ``Measured``). A scan asking whether recorded kernels pass
    version N's new static rules needs only these: a kernel recorded ok only under version N or later passed those
    rules then (the pool's front half runs them before any GPU time), and scanning it again only costs suite time.

    A kernel found by several runs keeps the row of the first store read, so its own row's version can be a later
    run's: the oldest version is taken over every run that recorded it (each run's rows share one version)."""
    rec = recorded_h200()
    run_version: dict[str, int] = {}
    for m in rec.kernels.values():
        run_version.setdefault(m.runs[0], recorded_version(m))
    out = {}
    for ident, m in rec.kernels.items():
        v = min(run_version.get(r, recorded_version(m)) for r in m.runs)
        if v < version:
            out[ident] = (v, m)
    return out
