"""The genome: a PTX module plus the launch configuration it is meant to run with.

A Kernel's identity is the SHA-256 of its canonical PTX (trivia and debug directives dropped, see
``population.printer.print_module(canonical=True)``) and its launch configuration, so two operators that reach
the same program are evaluated once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from population.ast import Module


@dataclass(frozen=True)
class LaunchConfig:
    """How a kernel is launched, independent of the problem shape.

    block: threads per CTA as (x, y, z).
    dynamic_smem_bytes: dynamic shared memory per CTA, bytes.
    knobs: workload-defined launch/template parameters (e.g. ``rows_per_cta``, ``vec``) as sorted
        (name, int) pairs; the workload's launch rule turns (shape, LaunchConfig) into a grid.
    """

    block: tuple[int, int, int] = (256, 1, 1)
    dynamic_smem_bytes: int = 0
    knobs: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if len(self.block) != 3 or any(int(b) < 1 for b in self.block):
            raise ValueError(f"LaunchConfig.block must be three positive ints, got {self.block!r}")
        if self.dynamic_smem_bytes < 0:
            raise ValueError(f"LaunchConfig.dynamic_smem_bytes must be >= 0, got {self.dynamic_smem_bytes}")
        object.__setattr__(self, "block", tuple(int(b) for b in self.block))
        object.__setattr__(self, "knobs", tuple(sorted((str(k), int(v)) for k, v in dict(self.knobs).items())))

    @property
    def threads(self) -> int:
        """Threads per CTA."""
        return self.block[0] * self.block[1] * self.block[2]

    def knob(self, name: str, default: int | None = None) -> int:
        """The value of knob ``name``; KeyError when absent and no default is given."""
        d = dict(self.knobs)
        if name in d:
            return d[name]
        if default is None:
            raise KeyError(f"launch config has no knob {name!r}; knobs: {sorted(d)}")
        return default

    def with_knobs(self, **updates: int) -> LaunchConfig:
        """A copy with the given knobs set."""
        return replace(self, knobs=tuple({**dict(self.knobs), **updates}.items()))

    def to_json(self) -> dict[str, Any]:
        """``{"block": [x, y, z], "dynamic_smem_bytes": B, "knobs": {name: value}}`` (JSON-safe)."""
        return {"block": list(self.block), "dynamic_smem_bytes": self.dynamic_smem_bytes, "knobs": dict(self.knobs)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LaunchConfig:
        """Inverse of :meth:`to_json`; KeyError without ``"block"``, ValueError as the constructor."""
        return cls(block=tuple(d["block"]), dynamic_smem_bytes=int(d.get("dynamic_smem_bytes", 0)),
                   knobs=tuple(dict(d.get("knobs", {})).items()))


@dataclass
class Kernel:
    """One candidate: a PTX module, the entry to launch, its launch config and where it came from.

    parents: identities of the parent kernels (empty for seeds).
    operator: name of the operator that produced it (``"seed"`` for seeds).
    edit_text: the edit script, as text, that turned the first parent into this kernel (the lineage diff).
    """

    module: Module
    entry: str
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    parents: tuple[str, ...] = ()
    operator: str = "seed"
    edit_text: str = ""

    @cached_property
    def ptx(self) -> str:
        """The module printed as PTX text (trivia kept)."""
        from population.printer import print_module

        return print_module(self.module)

    @cached_property
    def canonical_ptx(self) -> str:
        """The module printed without trivia or debug directives: what identity hashes."""
        from population.printer import print_module

        return print_module(self.module, canonical=True)

    @cached_property
    def identity(self) -> str:
        """Hex SHA-256 of canonical PTX + entry + launch config (64 chars)."""
        h = hashlib.sha256()
        h.update(self.canonical_ptx.encode())
        h.update(b"\0" + self.entry.encode() + b"\0")
        h.update(json.dumps(self.launch.to_json(), sort_keys=True).encode())
        return h.hexdigest()

    @property
    def short_id(self) -> str:
        """The first 12 hex characters of :attr:`identity` (for logs and file names)."""
        return self.identity[:12]
