"""The island model: several MAP-Elites sub-populations evolving apart, exchanging elites only at migration.

Islands are asked round-robin (ask k goes to island ``k mod n``); an island's parent is always one of its own
elites (or a seed before it has any), and its children enter only its own archive. Every
``migration_interval`` non-seed tells, each island i sends its ``migrants`` best elites to island
``(i + 1) mod n`` (a ring, as in Whitley, Rana and Heckendorn, "The Island Model Genetic Algorithm", 1998). Those
are the only moves between islands; ``migrations`` logs each one, so a test can check that every elite of an
island was bred there, is a seed, or arrived by a logged migration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from evolve.algorithms.base import SEED, Ask, CandidateId, Seeds, Told
from evolve.algorithms.map_elites import SELECTIONS


class Islands:
    """n_islands >= 2; migration_interval >= 0 non-seed tells (0 = never migrate); migrants >= 0;
    selection: ``"uniform"`` or ``"curiosity"`` within an island. ValueError on values out of range.

    make_archive: returns a fresh, empty ``archive.grid.GridArchive`` (same descriptors as the engine's);
    each island owns one and checkpoints it in ``state_dict``.
    """

    name = "islands"

    def __init__(self, make_archive: Callable[[], Any], n_islands: int = 4, migration_interval: int = 50,
                 migrants: int = 1, selection: str = "uniform") -> None:
        if n_islands < 2:
            raise ValueError(f"algorithm.n_islands must be >= 2, got {n_islands}")
        if migration_interval < 0:
            raise ValueError(f"algorithm.migration_interval must be >= 0, got {migration_interval}")
        if migrants < 0:
            raise ValueError(f"algorithm.migrants must be >= 0, got {migrants}")
        if selection not in SELECTIONS:
            raise ValueError(f"algorithm.selection: {selection!r} is not one of {list(SELECTIONS)}")
        self.n_islands, self.migration_interval, self.migrants = n_islands, migration_interval, migrants
        self.selection = selection
        self.archives = [make_archive() for _ in range(n_islands)]
        self.seeds = Seeds()
        self.bred: list[list[CandidateId]] = [[] for _ in range(n_islands)]  # added by a tell to island i
        self.migrations: list[dict[str, Any]] = []
        self.next_island = 0
        self.tells = 0

    def ask(self, rng: np.random.Generator) -> Ask:
        i = self.next_island
        self.next_island = (i + 1) % self.n_islands
        if len(self.archives[i]) == 0:
            return Ask(parents=(self.seeds.pick(rng),), island=i)
        return Ask(parents=(self.archives[i].sample(rng, 1, weighting=self.selection)[0].candidate_id,), island=i)

    def members(self, island: int) -> list[CandidateId]:
        """Candidate ids of island ``island``'s elites, in cell order."""
        return [e.candidate_id for e in self.archives[island].elites()]

    def tell(self, told: Told) -> None:
        if told.ask.operator == SEED:
            self.seeds.tell(told)
        added = False
        if told.valid and told.identity is not None and told.objective is not None:
            # Seeds start on every island; a bred child only on the island that asked for it.
            targets = range(self.n_islands) if told.ask.island is None else [told.ask.island]
            for i in targets:
                if self.archives[i].add(told.identity, float(told.objective), told.features).added:
                    self.bred[i].append(told.identity)
                    added = True
        if told.ask.operator == SEED:
            return
        if told.ask.island is not None:
            for p in told.ask.parents[:1]:
                self.archives[told.ask.island].credit(p, added)
        self.tells += 1
        if self.migration_interval and self.migrants and self.tells % self.migration_interval == 0:
            self.migrate()

    def migrate(self) -> None:
        """Send each island's best ``migrants`` elites to the next island in the ring (all emigrants are chosen
        before any arrives, so an elite moves one hop per migration)."""
        outgoing = []
        for a in self.archives:
            ranked = sorted(a.elites(), key=lambda e: (-e.objective, e.added))
            outgoing.append(ranked[: self.migrants])
        for i, elites in enumerate(outgoing):
            j = (i + 1) % self.n_islands
            for e in elites:
                accepted = self.archives[j].add(e.candidate_id, e.objective, e.features).added
                self.migrations.append({"tell": self.tells, "from": i, "to": j, "id": e.candidate_id,
                                        "accepted": accepted})

    def state_dict(self) -> dict[str, Any]:
        return {
            "archives": [a.state_dict() for a in self.archives],
            "seeds": self.seeds.state_dict(),
            "bred": [list(b) for b in self.bred],
            "migrations": list(self.migrations),
            "next_island": self.next_island,
            "tells": self.tells,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        for a, s in zip(self.archives, state["archives"]):
            a.load_state(s)
        self.seeds.load_state(state["seeds"])
        self.bred = [list(b) for b in state["bred"]]
        self.migrations = list(state["migrations"])
        self.next_island = int(state["next_island"])
        self.tells = int(state["tells"])
