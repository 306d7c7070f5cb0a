"""A search algorithm kept outside the package: epsilon-greedy over every valid kernel told so far.

With probability ``epsilon`` the parent is a valid kernel drawn uniformly (exploration), otherwise the best
one (exploitation); before any valid kernel exists, a seed. Used in docs/add-an-algorithm.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evolve.algorithms.base import SEED, Ask, Seeds, Told


class EpsilonGreedy:
    """ask/tell algorithm (``evolve.algorithms.base.Algorithm``); state is JSON-able for checkpoints."""

    name = "epsilon_greedy"

    def __init__(self, epsilon: float = 0.2) -> None:
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self.epsilon = float(epsilon)
        self.seeds = Seeds()
        self.valid: dict[Any, float] = {}  # candidate id -> objective

    def ask(self, rng: np.random.Generator) -> Ask:
        if not self.valid:
            return Ask(parents=(self.seeds.pick(rng),))
        ids = sorted(self.valid, key=str)
        if rng.random() < self.epsilon:
            return Ask(parents=(ids[int(rng.integers(len(ids)))],))
        return Ask(parents=(max(ids, key=lambda i: self.valid[i]),))

    def tell(self, told: Told) -> None:
        if told.ask.operator == SEED:
            self.seeds.tell(told)
        if told.valid and told.objective is not None and told.identity is not None:
            self.valid[told.identity] = float(told.objective)

    def state_dict(self) -> dict[str, Any]:
        return {"seeds": self.seeds.state_dict(), "valid": [[k, v] for k, v in self.valid.items()]}

    def load_state(self, state: dict[str, Any]) -> None:
        self.seeds.load_state(state["seeds"])
        self.valid = {k: float(v) for k, v in state["valid"]}
