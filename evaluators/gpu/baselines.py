"""Library baselines timed in the same worker process as the candidates.

For RMSNorm: ``torch`` (eager ``torch.nn.functional.rms_norm``), ``torch_compile`` (the same function through
``torch.compile``, static shapes), ``liger`` (``liger_kernel.ops.rms_norm.LigerRMSNormFunction``) and
``quack`` (``quack.rmsnorm``) when importable; a missing one is skipped with a note saying why.
The baselines read the very device buffers the candidate reads (shared through DLPack, no copy); the weight is
handed to them in x's dtype because ``rms_norm`` takes one dtype (the weight is 4*N bytes either way, noise
against 2*M*N elements).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workloads.base import Shape, Workload

Baseline = Callable[[], Any]

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass
class BaselineSet:
    """Baseline callables per shape, built on first use; ``notes`` says which were skipped and why, keyed by
    ``"<baseline> <M>x<N>"`` (a baseline can fail at one shape and run at the others)."""

    workload: Workload
    names: tuple[str, ...] = ("torch", "torch_compile", "liger", "quack")
    notes: dict[str, str] = field(default_factory=dict)
    _compiled: Any = None

    def _torch_views(self, inputs: dict[str, Any]) -> tuple[Any, Any]:
        import torch

        x = torch.from_dlpack(inputs["x"])
        if self.workload.dtype == "bf16":
            x = x.view(torch.bfloat16)  # CuPy holds bf16 as uint16 bits
        w = torch.from_dlpack(inputs["w"]).to(getattr(torch, TORCH_DTYPES[self.workload.dtype]))
        return x, w

    def build(self, inputs: dict[str, Any], shape: Shape) -> dict[str, Baseline]:
        """name -> zero-argument callable launching that baseline on ``inputs`` (device arrays) at ``shape``.
        Baselines that cannot be built are left out and explained in ``notes``."""
        if self.workload.name != "rmsnorm":
            self.notes["all"] = f"no library baselines for workload {self.workload.name!r}"
            return {}
        try:
            import torch
            import torch.nn.functional as F
        except ImportError as e:
            self.notes["torch"] = f"torch not importable: {e}"
            return {}
        x, w = self._torch_views(inputs)
        n, eps = shape[-1], self.workload.eps
        at = "x".join(str(v) for v in shape)
        out: dict[str, Baseline] = {}
        if "torch" in self.names:
            out["torch"] = lambda: F.rms_norm(x, (n,), w, eps)
        if "torch_compile" in self.names:
            try:
                if self._compiled is None:
                    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
                    self._compiled = torch.compile(lambda a, b, e: F.rms_norm(a, (a.shape[-1],), b, e),
                                                   dynamic=False)
                fn = self._compiled
                fn(x, w, eps)  # compile now, outside any timed region
                out["torch_compile"] = lambda: fn(x, w, eps)
            except Exception as e:  # inductor/triton missing or failing: say so, keep the rest
                self.notes[f"torch_compile {at}"] = f"torch.compile failed: {type(e).__name__}: {str(e)[:200]}"
        if "liger" in self.names:
            try:
                from liger_kernel.ops.rms_norm import LigerRMSNormFunction

                LigerRMSNormFunction.apply(x, w, eps)
                out["liger"] = lambda: LigerRMSNormFunction.apply(x, w, eps)
            except Exception as e:
                self.notes[f"liger {at}"] = f"skipped: {type(e).__name__}: {str(e)[:200]}"
        if "quack" in self.names:
            try:
                from quack import rmsnorm as quack_rmsnorm

                quack_rmsnorm(x, w, eps=eps)
                out["quack"] = lambda: quack_rmsnorm(x, w, eps=eps)
            except Exception as e:
                self.notes[f"quack {at}"] = f"skipped: {type(e).__name__}: {str(e)[:200]}"
        return out
