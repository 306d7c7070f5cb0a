"""Ask/tell algorithms, driven by a synthetic objective (no kernels): selection rules, state round trips,
island separation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from archive.grid import Dimension, GridArchive
from evolve.algorithms.base import SEED, Ask, NoParent, Told
from evolve.algorithms.ga import GeneticAlgorithm
from evolve.algorithms.hill_climb import HillClimb
from evolve.algorithms.islands import Islands
from evolve.algorithms.map_elites import MapElites
from evolve.algorithms.random_search import RandomSearch

DIMS = [Dimension("x", (0.0, 1.0, 2.0, 3.0, 4.0)), Dimension("y", (0.0, 1.0, 2.0))]


def make_archive() -> GridArchive:
    return GridArchive(DIMS)


def child_of(parent: int, n: int) -> tuple[float, dict[str, float]]:
    """A deterministic synthetic child: objective and features derived from parent and counter."""
    r = np.random.default_rng(parent * 1000 + n)
    return float(r.uniform(0, 2)), {"x": float(r.uniform(0, 4)), "y": float(r.uniform(0, 2))}


def drive(alg, archive: GridArchive | None, steps: int, seed: int = 0, next_id: int = 100):
    """Seeds 1, 2, then ``steps`` ask/tell rounds; returns the asks and the final id counter."""
    rng = np.random.default_rng(seed)
    for sid, obj in ((1, 1.0), (2, 0.5)):
        feats = {"x": 0.5 * sid, "y": 0.5}
        added, cell = "invalid", None
        if archive is not None:
            r = archive.add(sid, obj, feats)
            added, cell = r.status, r.cell
        alg.tell(Told(Ask((), SEED), sid, True, obj, feats, added, cell))
    return continue_drive(alg, archive, rng, steps, 0, next_id), next_id + steps


def test_no_seed_raises_noparent():
    with pytest.raises(NoParent, match="seeds"):
        RandomSearch().ask(np.random.default_rng(0))


def test_random_search_only_uses_seeds():
    alg = RandomSearch()
    asks, _ = drive(alg, None, 50)
    parents = {a.parents[0] for a in asks}
    assert parents == {1, 2}


def test_hill_climb_follows_incumbent():
    alg = HillClimb()
    rng = np.random.default_rng(0)
    alg.tell(Told(Ask((), SEED), 1, True, 1.0))
    alg.tell(Told(Ask((), SEED), 2, False))
    assert alg.ask(rng).parents == (1,)
    alg.tell(Told(Ask((1,)), 3, True, 1.5))
    assert alg.ask(rng).parents == (3,)
    alg.tell(Told(Ask((3,)), 4, True, 1.5))  # a tie does not replace the incumbent
    alg.tell(Told(Ask((3,)), 5, False))
    assert alg.ask(rng).parents == (3,)
    assert alg.best_objective == 1.5


def test_map_elites_picks_only_elites_and_credits_curiosity():
    archive = make_archive()
    alg = MapElites(archive, selection="curiosity")
    asks, _ = drive(alg, archive, 200)
    elite_history = set()
    # Every parent after the first ask must have been an elite at some point (ids are ints >= 1).
    for a in asks:
        elite_history.add(a.parents[0])
    ids_ever_added = {1, 2} | set(range(100, 300))
    assert elite_history <= ids_ever_added
    scores = [e.curiosity for e in archive.elites()]
    assert any(s != 0.0 for s in scores)
    with pytest.raises(ValueError, match=r"algorithm\.selection"):
        MapElites(archive, selection="best")


def test_map_elites_uniform_matches_archive_sampling():
    archive = make_archive()
    archive.add(7, 1.0, {"x": 0.5, "y": 0.5})
    archive.add(8, 1.0, {"x": 3.5, "y": 1.5})
    alg = MapElites(archive)
    rng = np.random.default_rng(3)
    counts = {7: 0, 8: 0}
    for _ in range(400):
        counts[alg.ask(rng).parents[0]] += 1
    assert 150 < counts[7] < 250 and counts[7] + counts[8] == 400


def test_ga_tournament_crossover_and_replacement():
    alg = GeneticAlgorithm(population_size=4, tournament_size=2, crossover_rate=0.5)
    asks, _ = drive(alg, None, 300)
    cross = [a for a in asks if a.operator == "crossover"]
    assert 100 < len(cross) < 200
    assert all(len(a.parents) == 2 and a.parents[0] != a.parents[1] for a in cross)
    assert len(alg.population) == 4
    # (mu + 1) replacement keeps the best objectives ever told.
    objs = sorted(o for _, o in alg.population)
    told = sorted([1.0, 0.5] + [child_of(int(a.parents[0]), n)[0] for n, a in enumerate(asks)])
    assert objs == told[-4:]
    with pytest.raises(ValueError, match="crossover_rate"):
        GeneticAlgorithm(crossover_rate=1.5)


@pytest.mark.parametrize("interval", [0, 20])
def test_islands_stay_separate_except_at_migration(interval):
    alg = Islands(make_archive, n_islands=3, migration_interval=interval, migrants=1)
    asks, _ = drive(alg, None, 240)
    # Which island bred each child id (ids are assigned in ask order from 100).
    born_on = {100 + n: a.island for n, a in enumerate(asks)}
    assert [a.island for a in asks[:6]] == [0, 1, 2, 0, 1, 2]
    migrated_in = {i: {m["id"] for m in alg.migrations if m["to"] == i and m["accepted"]} for i in range(3)}
    for n, a in enumerate(asks):
        p = a.parents[0]
        # A parent is a seed, bred on the asking island, or migrated to it: never another island's own child.
        assert p in (1, 2) or born_on[p] == a.island or p in migrated_in[a.island], (n, a)
    for i in range(3):
        for cid in alg.members(i):
            assert cid in (1, 2) or born_on[cid] == i or cid in migrated_in[i]
    if interval == 0:
        assert alg.migrations == []
        for i in range(3):
            assert all(cid in (1, 2) or born_on[cid] == i for cid in alg.members(i))
    else:
        assert len(alg.migrations) == 3 * (240 // interval)
        assert any(m["accepted"] for m in alg.migrations)
    # Islands really differ: their elite sets are not all the same.
    sets = [frozenset(alg.members(i)) for i in range(3)]
    assert len(set(sets)) == 3


def continue_drive(alg, archive, rng, steps: int, start: int, next_id: int):
    """``steps`` more ask/tell rounds with the given generator, numbering children from ``next_id``."""
    asks = []
    for n in range(start, start + steps):
        ask = alg.ask(rng)
        asks.append(ask)
        obj, feats = child_of(int(ask.parents[0]), n)
        added, cell = "not_added", None
        if archive is not None:
            r = archive.add(next_id, obj, feats)
            added, cell = r.status, r.cell
        alg.tell(Told(ask, next_id, True, obj, feats, added, cell))
        next_id += 1
    return asks


@pytest.mark.parametrize("factory", ["random", "hill", "map", "ga", "islands"])
def test_state_round_trip_continues_identically(factory):
    """Checkpoint through JSON half way, restore into fresh objects, and the asks continue identically."""

    def build():
        archive = make_archive()
        alg = {
            "random": lambda: RandomSearch(),
            "hill": lambda: HillClimb(),
            "map": lambda: MapElites(archive, selection="curiosity"),
            "ga": lambda: GeneticAlgorithm(population_size=5),
            "islands": lambda: Islands(make_archive, n_islands=2, migration_interval=7),
        }[factory]()
        return alg, archive

    alg_a, arch_a = build()
    drive(alg_a, arch_a, 0)
    rng_a = np.random.default_rng(5)
    full = continue_drive(alg_a, arch_a, rng_a, 120, 0, 100)

    alg_b, arch_b = build()
    drive(alg_b, arch_b, 0)
    rng_b = np.random.default_rng(5)
    first = continue_drive(alg_b, arch_b, rng_b, 60, 0, 100)
    state = json.loads(json.dumps({"alg": alg_b.state_dict(), "arch": arch_b.state_dict(),
                                   "rng": rng_b.bit_generator.state}))
    alg_c, arch_c = build()
    alg_c.load_state(state["alg"])
    arch_c.load_state(state["arch"])
    rng_c = np.random.default_rng()
    rng_c.bit_generator.state = state["rng"]
    second = continue_drive(alg_c, arch_c, rng_c, 60, 60, 160)
    assert first + second == full
    assert alg_c.state_dict() == alg_a.state_dict()
    assert arch_c == arch_a
