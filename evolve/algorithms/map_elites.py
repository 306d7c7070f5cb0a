"""MAP-Elites parent selection (Mouret and Clune, "Illuminating search spaces by mapping elites", 2015).

The archive is the engine's ``archive.grid.GridArchive`` (the engine inserts every valid child and checkpoints
the archive); this algorithm only chooses parents from it:

- ``uniform``: every elite equally likely (the original algorithm).
- ``curiosity``: Cully and Demiris' curiosity score ("Quality and Diversity Optimization: A Unifying Modular
  Framework", IEEE TEC 2018, §IV-B), kept by the archive: ``tell`` credits the parent +1 when its child entered
  the archive and -0.5 otherwise; ``GridArchive.sample(weighting="curiosity")`` draws by the shifted score.

Before the archive holds any elite, parents are seeds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evolve.algorithms.base import SEED, Ask, Seeds, Told

SELECTIONS = ("uniform", "curiosity")


class MapElites:
    """archive: the engine's GridArchive (shared, not copied). selection: ``"uniform"`` or ``"curiosity"``
    (ValueError otherwise)."""

    name = "map_elites"

    def __init__(self, archive: Any, selection: str = "uniform") -> None:
        if selection not in SELECTIONS:
            raise ValueError(f"algorithm.selection: {selection!r} is not one of {list(SELECTIONS)}")
        self.archive = archive
        self.selection = selection
        self.seeds = Seeds()

    def ask(self, rng: np.random.Generator) -> Ask:
        if len(self.archive) == 0:
            return Ask(parents=(self.seeds.pick(rng),))
        return Ask(parents=(self.archive.sample(rng, 1, weighting=self.selection)[0].candidate_id,))

    def tell(self, told: Told) -> None:
        if told.ask.operator == SEED:
            self.seeds.tell(told)
            return
        for p in told.ask.parents[:1]:
            self.archive.credit(p, told.improved)

    def state_dict(self) -> dict[str, Any]:
        return {"seeds": self.seeds.state_dict()}

    def load_state(self, state: dict[str, Any]) -> None:
        self.seeds.load_state(state["seeds"])
