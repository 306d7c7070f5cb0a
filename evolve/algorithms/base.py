"""The ask/tell contract between the engine and a search algorithm.

An algorithm never evaluates anything (the pattern of pyribs' schedulers and evosax's strategies): the engine
calls ``ask(rng)`` for the parent(s) of the next candidate, proposes and evaluates the child itself, then calls
``tell(told)`` with what came of it. Seeds arrive first as ``tell`` calls whose ask has no parents and operator
``"seed"``. Kernels are referred to by candidate id (the store's row id, an int, or any JSON scalar the engine
uses; ``CandidateId``); the engine resolves them to kernels.
Every algorithm's state is JSON-able (``state_dict`` / ``load_state``) so it checkpoints with the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

SEED = "seed"

CandidateId = int | str


@dataclass(frozen=True)
class Ask:
    """What the algorithm wants evaluated next.

    parents: candidate ids (``CandidateId``, store row ids) of the parent kernels, primary first (two for a
        crossover).
    operator: the operator that must produce the child (e.g. ``"crossover"``), or None to let the engine's
        operator selection decide; ``"seed"`` marks a seed being told.
    island: the island (sub-population) the child belongs to, for the island model; None otherwise.
    """

    parents: tuple[CandidateId, ...]
    operator: str | None = None
    island: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"parents": list(self.parents), "operator": self.operator, "island": self.island}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Ask:
        return cls(parents=tuple(d["parents"]), operator=d.get("operator"), island=d.get("island"))


@dataclass(frozen=True)
class Told:
    """What came of one ask.

    identity: the child's candidate id, or None when no child kernel exists (no proposal, edit failed to apply).
    valid: the child passed compile and gate (status ok). objective: higher is better; None unless valid.
    features: behaviour measures by name. added: ``"new" | "improved" | "not_added"`` from the engine's archive,
    ``"invalid"`` for an invalid child. cell: the archive cell index, or None.
    """

    ask: Ask
    identity: CandidateId | None
    valid: bool
    objective: float | None = None
    features: dict[str, float] = field(default_factory=dict)
    added: str = "invalid"
    cell: tuple[int, ...] | None = None

    @property
    def improved(self) -> bool:
        """True when the child entered the engine's archive (``added`` is ``"new"`` or ``"improved"``)."""
        return self.added in ("new", "improved")


class Algorithm(Protocol):
    """A search algorithm in ask/tell form. ``name`` is what configs, the store and W&B tags use."""

    name: str

    def ask(self, rng: np.random.Generator) -> Ask: ...

    def tell(self, told: Told) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...


class NoParent(RuntimeError):
    """The algorithm has nothing to select from (no seed was told)."""


@dataclass
class Seeds:
    """The seed identities every algorithm falls back to, in the order they were told, and their validity."""

    ids: list[CandidateId] = field(default_factory=list)
    valid: dict[CandidateId, float] = field(default_factory=dict)

    def tell(self, told: Told) -> None:
        if told.identity is None or told.identity in self.ids:
            return
        self.ids.append(told.identity)
        if told.valid and told.objective is not None:
            self.valid[told.identity] = float(told.objective)

    def pick(self, rng: np.random.Generator) -> CandidateId:
        """A seed drawn uniformly, preferring valid seeds; NoParent when none was told."""
        pool = [s for s in self.ids if s in self.valid] or self.ids
        if not pool:
            raise NoParent("no seed kernel has been told to the algorithm; evaluate workload.seeds() first")
        return pool[int(rng.integers(len(pool)))]

    def state_dict(self) -> dict[str, Any]:
        return {"ids": list(self.ids), "valid": [[k, v] for k, v in self.valid.items()]}

    def load_state(self, state: dict[str, Any]) -> None:
        self.ids = list(state["ids"])
        self.valid = {k: float(v) for k, v in state["valid"]}
