"""Random search: every candidate is one random edit of a seed (the baseline every QD paper compares against)."""

from __future__ import annotations

from typing import Any

import numpy as np

from evolve.algorithms.base import SEED, Ask, Seeds, Told


class RandomSearch:
    """Parents are drawn uniformly from the seeds (valid seeds preferred); nothing is learned from results."""

    name = "random"

    def __init__(self) -> None:
        self.seeds = Seeds()

    def ask(self, rng: np.random.Generator) -> Ask:
        return Ask(parents=(self.seeds.pick(rng),))

    def tell(self, told: Told) -> None:
        if told.ask.operator == SEED:
            self.seeds.tell(told)

    def state_dict(self) -> dict[str, Any]:
        return {"seeds": self.seeds.state_dict()}

    def load_state(self, state: dict[str, Any]) -> None:
        self.seeds.load_state(state["seeds"])
