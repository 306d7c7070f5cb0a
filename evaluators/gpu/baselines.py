"""Library baselines timed in the same worker process as the candidates.

Which libraries, and how they are called, is the workload's business (``Workload.baselines``; RMSNorm's are in
``workloads/rmsnorm_baselines.py``); this module builds them per shape on the benchmark inputs and keeps the
notes on the ones that were skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workloads.base import Shape, Workload

Baseline = Callable[[], Any]


@dataclass
class BaselineSet:
    """Baseline callables per shape, built on first use; ``notes`` says which were skipped and why, keyed
    ``"<baseline>@<M>x<N>"``.

    names: the baselines asked for (the workload builds those it knows and notes the rest)."""

    workload: Workload
    names: tuple[str, ...] = ("torch", "torch_compile", "liger", "quack")
    notes: dict[str, str] = field(default_factory=dict)

    def build(self, inputs: dict[str, Any], shape: Shape) -> dict[str, Baseline]:
        """name -> zero-argument callable launching that baseline on ``inputs`` (device arrays) at ``shape``.
        Baselines that cannot be built are left out and explained in ``notes``."""
        fresh: dict[str, str] = {}
        fns = dict(self.workload.baselines(inputs, tuple(shape), tuple(self.names), fresh))
        at = "x".join(str(v) for v in shape)
        for k, v in fresh.items():  # keyed by baseline and shape: one can fail at one shape and run at the others
            self.notes[k if "@" in k else f"{k}@{at}"] = v
        return fns
