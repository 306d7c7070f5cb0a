"""RMSNorm's library baselines, built on the device buffers the candidate reads.

``torch`` (eager ``torch.nn.functional.rms_norm``), ``torch_compile`` (the same function through
``torch.compile``, static shapes), ``liger`` (``liger_kernel.ops.rms_norm.LigerRMSNormFunction``) and
``quack`` (``quack.rmsnorm``, QuACK's default heuristic config) and ``quack_tuned``
(``quack.rmsnorm.rmsnorm_fwd_tuned``: QuACK's exhaustive autotuner, run on the first call per shape, seconds to
minutes; asked for by name only, ``RMSNorm.baseline_names`` leaves it out of the search) when importable; a
missing one is skipped with a note saying why (``quack_tuned@MxN`` when it fails at one shape).
The baselines read the very device buffers the candidate reads (shared through DLPack, no copy).

Weight dtype (``baseline_weight``). ``"workload"`` (the default): every library gets the fp32 weight the
candidate reads, as QuACK's own benchmark calls them (``benchmarks/benchmark_rmsnorm.py``: bf16 x, fp32 w,
torch.compile of the float32 formula): like for like. ``"x"``: the weight cast to x's dtype first (a 2-byte
weight), which every run recorded before 2026-12-08 used. That is not the same problem: a kernel that re-reads w
for every row moves 2 bytes of w per element of x through L2 instead of 4, so at long rows, where a cluster's
CTAs cannot keep w in L1, the libraries did less work than the candidate. Eager ``rms_norm`` with a weight of
another dtype takes torch's composite (unfused) path and returns x's dtype; under ``torch.compile`` the same
call is fused into one kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# How the libraries get the weight (module docstring).
BASELINE_WEIGHTS = ("workload", "x")

_compiled: dict[str, Any] = {}  # one torch.compile'd function per process (recompiles per static shape)


def check_baseline_weight(weight: str) -> str:
    """``weight`` when it is one of ``BASELINE_WEIGHTS``; ValueError naming the allowed values otherwise."""
    if weight not in BASELINE_WEIGHTS:
        raise ValueError(f"baseline_weight={weight!r}: must be one of {', '.join(BASELINE_WEIGHTS)} ('workload': "
                         "the libraries read the fp32 weight the kernel reads; 'x': cast to x's dtype first)")
    return weight


def _torch_views(inputs: Mapping[str, Any], dtype: str, weight: str = "workload") -> tuple[Any, Any]:
    import torch

    x = torch.from_dlpack(inputs["x"])
    if dtype == "bf16":
        x = x.view(torch.bfloat16)  # CuPy holds bf16 as uint16 bits
    w = torch.from_dlpack(inputs["w"])  # fp32, the buffer the candidate reads
    if check_baseline_weight(weight) == "x":
        w = w.to(getattr(torch, TORCH_DTYPES[dtype]))
    return x, w


def rmsnorm_baselines(inputs: Mapping[str, Any], shape: tuple[int, ...], dtype: str, eps: float,
                      names: tuple[str, ...], notes: dict[str, str],
                      weight: str = "workload") -> dict[str, Callable[[], Any]]:
    """name -> zero-argument callable launching that baseline on ``inputs`` (CuPy arrays x (M, N) in
    ``dtype``, w (N,) fp32) at ``shape``, the weight handed over as ``weight`` says (``BASELINE_WEIGHTS``;
    ValueError for another value); baselines that cannot be built are left out and explained in ``notes``."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        notes["torch"] = f"torch not importable: {e}"
        return {}
    x, w = _torch_views(inputs, dtype, weight)
    n = shape[-1]
    out: dict[str, Callable[[], Any]] = {}
    if "torch" in names:
        out["torch"] = lambda: F.rms_norm(x, (n,), w, eps)
    if "torch_compile" in names:
        try:
            if "rms_norm" not in _compiled:
                torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
                _compiled["rms_norm"] = torch.compile(lambda a, b, e: F.rms_norm(a, (a.shape[-1],), b, e),
                                                      dynamic=False)
            fn = _compiled["rms_norm"]
            fn(x, w, eps)  # compile now, outside any timed region
            out["torch_compile"] = lambda: fn(x, w, eps)
        except Exception as e:  # inductor/triton missing or failing: say so, keep the rest
            notes["torch_compile"] = f"torch.compile failed: {type(e).__name__}: {str(e)[:200]}"
    if "liger" in names:
        try:
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction

            LigerRMSNormFunction.apply(x, w, eps)
            out["liger"] = lambda: LigerRMSNormFunction.apply(x, w, eps)
        except Exception as e:
            notes["liger"] = f"skipped: {type(e).__name__}: {str(e)[:200]}"
    if "quack" in names:
        try:
            from quack import rmsnorm as quack_rmsnorm

            quack_rmsnorm(x, w, eps=eps)
            out["quack"] = lambda: quack_rmsnorm(x, w, eps=eps)
        except Exception as e:
            notes["quack"] = f"skipped: {type(e).__name__}: {str(e)[:200]}"
    if "quack_tuned" in names:
        try:
            from quack.rmsnorm import rmsnorm_fwd_tuned

            y = torch.empty_like(x)
            rmsnorm_fwd_tuned(x, w, y, eps=eps)  # autotunes now (seconds to minutes), outside any timed region
            torch.cuda.synchronize()
            out["quack_tuned"] = lambda: rmsnorm_fwd_tuned(x, w, y, eps=eps)
        except Exception as e:  # e.g. every config refused by the driver at this shape (seen at N >= 65536)
            notes[f"quack_tuned@{'x'.join(map(str, shape))}"] = f"skipped: {type(e).__name__}: {str(e)[:200]}"
    return out
