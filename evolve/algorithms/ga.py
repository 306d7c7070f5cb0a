"""A steady-state genetic algorithm: tournament selection, crossover of launch/template knobs, mutation.

Each ask is either a crossover (probability ``crossover_rate``, two distinct parents each chosen by a
tournament, produced by the ``crossover`` operator of ``evolve.operators.crossover``) or a mutation of one
tournament winner (operator left to the engine's selection). A valid child joins the population; when the
population exceeds ``population_size`` the worst member leaves ((mu + 1) replacement, Whitley's GENITOR, 1989).
Tournament: ``tournament_size`` members drawn uniformly with replacement, the highest objective wins.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evolve.algorithms.base import SEED, Ask, CandidateId, Seeds, Told

CROSSOVER = "crossover"


class GeneticAlgorithm:
    """population_size >= 2, tournament_size >= 1, crossover_rate in [0, 1] (ValueError otherwise)."""

    name = "ga"
    required_operators = (CROSSOVER,)

    def __init__(self, population_size: int = 16, tournament_size: int = 3, crossover_rate: float = 0.3) -> None:
        if population_size < 2:
            raise ValueError(f"algorithm.population_size must be >= 2, got {population_size}")
        if tournament_size < 1:
            raise ValueError(f"algorithm.tournament_size must be >= 1, got {tournament_size}")
        if not 0.0 <= crossover_rate <= 1.0:
            raise ValueError(f"algorithm.crossover_rate must be in [0, 1], got {crossover_rate}")
        self.population_size = population_size
        self.tournament_size = tournament_size
        self.crossover_rate = crossover_rate
        self.seeds = Seeds()
        self.population: list[tuple[CandidateId, float]] = []  # (identity, objective), insertion order

    def _tournament(self, rng: np.random.Generator, exclude: CandidateId | None = None) -> CandidateId:
        pool = [m for m in self.population if m[0] != exclude] or self.population
        picks = rng.integers(len(pool), size=self.tournament_size)
        # Highest objective wins; among equals the earliest member (stable, deterministic).
        return max((pool[int(i)] for i in picks), key=lambda m: m[1])[0]

    def ask(self, rng: np.random.Generator) -> Ask:
        if not self.population:
            return Ask(parents=(self.seeds.pick(rng),))
        if len(self.population) >= 2 and rng.random() < self.crossover_rate:
            a = self._tournament(rng)
            b = self._tournament(rng, exclude=a)
            return Ask(parents=(a, b), operator=CROSSOVER)
        return Ask(parents=(self._tournament(rng),))

    def tell(self, told: Told) -> None:
        if told.ask.operator == SEED:
            self.seeds.tell(told)
        if not told.valid or told.objective is None or told.identity is None:
            return
        if any(m[0] == told.identity for m in self.population):
            return
        self.population.append((told.identity, float(told.objective)))
        if len(self.population) > self.population_size:
            worst = min(range(len(self.population)), key=lambda i: (self.population[i][1], -i))
            self.population.pop(worst)

    def state_dict(self) -> dict[str, Any]:
        return {"seeds": self.seeds.state_dict(), "population": [list(m) for m in self.population]}

    def load_state(self, state: dict[str, Any]) -> None:
        self.seeds.load_state(state["seeds"])
        self.population = [(i, float(o)) for i, o in state["population"]]
