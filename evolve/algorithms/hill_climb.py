"""Hill climbing: always mutate the best valid kernel found so far (first-improvement, greedy)."""

from __future__ import annotations

from typing import Any

import numpy as np

from evolve.algorithms.base import SEED, Ask, CandidateId, Seeds, Told


class HillClimb:
    """The parent is the incumbent: the valid kernel with the highest objective told so far (the earliest one on
    ties); before any valid kernel exists, a seed. A child replaces the incumbent only when strictly better."""

    name = "hill_climb"

    def __init__(self) -> None:
        self.seeds = Seeds()
        self.best: CandidateId | None = None
        self.best_objective: float | None = None

    def ask(self, rng: np.random.Generator) -> Ask:
        if self.best is None:
            return Ask(parents=(self.seeds.pick(rng),))
        return Ask(parents=(self.best,))

    def tell(self, told: Told) -> None:
        if told.ask.operator == SEED:
            self.seeds.tell(told)
        if told.valid and told.objective is not None and told.identity is not None:
            if self.best_objective is None or told.objective > self.best_objective:
                self.best, self.best_objective = told.identity, float(told.objective)

    def state_dict(self) -> dict[str, Any]:
        return {"seeds": self.seeds.state_dict(), "best": self.best, "best_objective": self.best_objective}

    def load_state(self, state: dict[str, Any]) -> None:
        self.seeds.load_state(state["seeds"])
        self.best, self.best_objective = state["best"], state["best_objective"]
