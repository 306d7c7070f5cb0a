"""The engine on the real RMSNorm workload, real operators, the real store, with evaluators that are cheap:
a hash-derived one (deterministic, instant, for the loop's mechanics) and one that runs the real ptxas."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

import numpy as np
import pytest
from hash_evaluator import hash_result

from archive.grid import GridArchive, default_dimensions
from archive.lessons import Lessons
from archive.store import Store
from evaluators.types import CompileError, EvalResult, Status
from evolve.algorithms.hill_climb import HillClimb
from evolve.algorithms.map_elites import MapElites
from evolve.budget import Budget
from evolve.engine import CHECKPOINT, Engine, EngineSettings
from evolve.operators.base import NoProposal
from evolve.operators.registry import build_operators
from evolve.selection import OperatorSelector
from population.edits import EditScript, Insert, Replace
from population.printer import listing
from workloads.registry import get_workload

OPS = ["launch", "template", "hints"]


class HashEvaluator:
    """Deterministic and instant: status, objective and descriptors derived from the kernel identity.
    ``jitter`` sleeps a random few ms so evaluations finish out of order on several threads."""

    def __init__(self, capacity: int = 1, jitter: bool = False) -> None:
        self.capacity, self.jitter = capacity, jitter
        self.calls = 0
        self.lock = threading.Lock()

    def evaluate(self, kernel):
        with self.lock:
            self.calls += 1
        if self.jitter:
            time.sleep(random.random() * 0.02)
        return hash_result(kernel.identity, fail_below=40)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def workload():
    return get_workload("rmsnorm")


def make_engine(workload, store, *, budget=20, evaluator=None, capacity=1, algorithm="map_elites", ops=OPS,
                extra_ops=(), seed=0):
    archive = GridArchive(default_dimensions())
    alg = MapElites(archive) if algorithm == "map_elites" else HillClimb()
    operators = (build_operators([{"name": n} for n in ops], workload) if ops else []) + list(extra_ops)
    selector = OperatorSelector([o.name for o in operators])
    return Engine(workload=workload, evaluator=evaluator or HashEvaluator(capacity), algorithm=alg,
                  archive=archive, operators=operators, selector=selector, store=store,
                  budget=Budget(max_evaluations=budget), seed=seed,
                  settings=EngineSettings(capacity=capacity), lessons=Lessons(store))


def rows_signature(store):
    """What must match between two runs: every row without wall-clock fields."""
    return [(r.id, r.identity, r.status, r.operator, r.edit_text, r.objective, r.parent_ids, r.cell)
            for r in store.candidates(with_ptx=False)]


def test_seeds_first_every_candidate_recorded(workload, tmp_path):
    store = Store(tmp_path / "s.sqlite")
    ev = HashEvaluator()
    eng = make_engine(workload, store, budget=15, evaluator=ev)
    snap = eng.run()
    rows = store.candidates(with_ptx=False)
    assert [r.operator for r in rows[:2]] == ["seed", "seed"]
    assert rows[0].identity == workload.seeds()[0].identity
    evaluated = [r for r in rows if r.status in {str(s) for s in Status}]
    assert len(evaluated) == 15 == ev.calls == snap.evaluations
    assert snap.candidates == len(rows) + eng.duplicates
    assert store.status_counts() == {k: v for k, v in snap.statuses.items()}
    # Every elite is an ok row and the archive matches the store's cells.
    for e in eng.archive.elites():
        r = store.get(e.candidate_id)
        assert r.status == "ok" and r.objective == e.objective and tuple(r.cell) == e.cell
    # Children point at their parents.
    for r in rows[2:]:
        assert r.parent_ids and all(p < r.id for p in r.parent_ids)
    assert store.checkpoint(CHECKPOINT).last_candidate_id == rows[-1].id
    # Lessons were written in the same transactions.
    assert store.query("SELECT COUNT(*) FROM lesson_events")[0][0] == len(rows)


def test_identical_kernels_are_evaluated_once(workload, tmp_path):
    store = Store(tmp_path / "s.sqlite")
    ev = HashEvaluator()
    eng = make_engine(workload, store, budget=25, evaluator=ev, ops=["template"])
    eng.run()
    idents = [r.identity for r in store.candidates(with_ptx=False) if r.status in ("ok", "wrong_result")]
    assert len(idents) == len(set(idents)) == ev.calls


def test_resume_equals_uninterrupted(workload, tmp_path):
    a = Store(tmp_path / "a.sqlite")
    full = make_engine(workload, a, budget=24)
    full.run()

    b = Store(tmp_path / "b.sqlite")
    make_engine(workload, b, budget=11).run()
    b.close()
    b = Store(tmp_path / "b.sqlite")
    resumed = make_engine(workload, b, budget=24)
    assert resumed.try_resume()
    resumed.run()
    ra, rb = rows_signature(a), rows_signature(b)
    diff = next((i for i, (x, y) in enumerate(zip(ra, rb)) if x != y), None)
    assert ra == rb, f"first differing row {diff}: {ra[diff] if diff is not None else None} != " \
                     f"{rb[diff] if diff is not None else None} (lengths {len(ra)}, {len(rb)})"
    assert resumed.archive == full.archive
    assert resumed.selector.state_dict() == full.selector.state_dict()


def test_ordered_window_is_deterministic_under_any_timing(workload, tmp_path):
    """Three evaluations in flight finishing in random order give the same run as instant evaluations."""
    steady = make_engine(workload, Store(tmp_path / "a.sqlite"), budget=14, capacity=3,
                         evaluator=HashEvaluator(3))
    steady.run()
    shuffled = make_engine(workload, Store(tmp_path / "b.sqlite"), budget=14, capacity=3,
                           evaluator=HashEvaluator(3, jitter=True))
    shuffled.run()
    assert shuffled.archive == steady.archive
    assert rows_signature(shuffled.store) == rows_signature(steady.store)


@dataclass
class PlantedBug:
    """Inserts an instruction ptxas rejects; repair replaces it with a valid one; reflect writes a lesson."""

    name: str = "planted"
    repairs: int = 0

    def propose(self, parent, ctx, rng):
        lst = listing(parent.module)
        body = [li for li in lst.lines if li.function == parent.entry and li.body is not None
                and type(li.node).__name__ == "Instruction"]
        if not body:
            raise NoProposal("no body")
        return EditScript((Insert(body[0].lineno, ("bogus.instruction.u32 %r1;",)),))

    def repair(self, child, result, ctx, rng):
        self.repairs += 1
        assert ctx.failure is not None and ctx.failure[0] is child
        lst = listing(child.module)
        bad = [li.lineno for li in lst.lines if "bogus.instruction" in li.text]
        # Not a plain delete: that would give the parent back, which the hash cache never re-evaluates.
        return EditScript((Replace(bad[0], bad[0], ("mov.u32 %rfix, 7;",)),))

    def reflect(self, child, result, ctx):
        return f"planted edit gave {result.status}"


class PtxasEvaluator:
    """Compiles with the real ptxas; ok kernels get descriptors from the resource report."""

    capacity = 1

    def evaluate(self, kernel):
        from evaluators.toolchain import compile_ptx

        try:
            res = compile_ptx(kernel, "sm_90")
        except CompileError as e:
            return EvalResult(Status.COMPILE_ERROR, reason=str(e))
        regs = res.resources[kernel.entry].registers
        return EvalResult(Status.OK, objective=1.0 + 1.0 / regs,
                          features={"registers": regs, "active_warps": 32, "traffic_ratio": 1.0})

    def close(self) -> None:
        pass


def test_repair_and_reflect(workload, tmp_path):
    store = Store(tmp_path / "s.sqlite")
    op = PlantedBug()
    eng = make_engine(workload, store, budget=6, evaluator=PtxasEvaluator(), ops=[], extra_ops=[op])
    eng.run()
    rows = store.candidates(with_ptx=False)
    errors = [r for r in rows if r.status == "compile_error"]
    assert errors and "bogus" in errors[0].reason
    assert op.repairs == len(errors)
    # The repaired child descends from the failed one and compiles again.
    repaired = [r for r in rows if r.parent_ids and r.parent_ids[0] in {e.id for e in errors}]
    assert repaired, "a repair candidate must follow a compile error"
    assert all(r.status in ("ok", "compile_error") for r in repaired)
    notes = store.query("SELECT text, source FROM lesson_notes")
    assert any("planted edit gave" in n[0] and n[1] == "planted.reflect" for n in notes)


def test_operator_failures_become_rows(workload, tmp_path):
    class Broken:
        name = "broken"

        def propose(self, parent, ctx, rng):
            raise RuntimeError("kaboom")

    class Nothing:
        name = "nothing"

        def propose(self, parent, ctx, rng):
            raise NoProposal("nothing to do here")

    store = Store(tmp_path / "s.sqlite")
    eng = make_engine(workload, store, budget=5, ops=["launch"], extra_ops=[Broken(), Nothing()])
    eng.run()
    counts = store.status_counts()
    assert counts.get("operator_error", 0) >= 1 and counts.get("no_proposal", 0) >= 1
    r = store.candidates(status="operator_error")[0]
    assert "kaboom" in r.reason and r.operator == "broken"
    assert eng.selector.counts["broken"] >= 1 and eng.selector.mean("broken") == 0.0


def test_ga_requires_crossover(workload, tmp_path):
    from evolve.algorithms.ga import GeneticAlgorithm

    ops = build_operators([{"name": "launch"}], workload)
    with pytest.raises(ValueError, match="crossover"):
        Engine(workload=workload, evaluator=HashEvaluator(), algorithm=GeneticAlgorithm(),
               archive=GridArchive(default_dimensions()), operators=ops,
               selector=OperatorSelector(["launch"]), store=Store(":memory:"), budget=Budget(5), seed=0)


def test_rng_state_is_checkpointed(workload, tmp_path):
    store = Store(tmp_path / "s.sqlite")
    eng = make_engine(workload, store, budget=8)
    eng.run()
    state = store.load_checkpoint(CHECKPOINT)
    g = np.random.default_rng()
    g.bit_generator.state = state["rng"]
    assert g.random() == eng.rng.random()


def test_unordered_mode_and_wall_clock_budget(workload, tmp_path):
    store = Store(tmp_path / "s.sqlite")
    ev = HashEvaluator(3, jitter=True)
    eng = make_engine(workload, store, capacity=3, evaluator=ev)
    eng.settings.ordered = False
    eng.budget = Budget(max_evaluations=None, max_seconds=4.0)
    t0 = time.monotonic()
    snap = eng.run()
    assert time.monotonic() - t0 < 4.0 + 30  # the last proposal and in-flight evaluations finish after the limit
    assert snap.evaluations == ev.calls >= 2
    assert store.checkpoint(CHECKPOINT).state["pending"] == []
    assert sum(store.status_counts().get(s, 0) for s in ("ok", "wrong_result")) == ev.calls


@dataclass
class CountingOperator:
    """A real operator (hints) that also learns something: how many proposals it made. Stands for operators
    with their own state (the LLM operator's role/model bandit), which must survive a resume."""

    inner: object
    name: str = "counting"
    proposals: int = 0

    def propose(self, parent, ctx, rng):
        self.proposals += 1
        return self.inner.propose(parent, ctx, rng)

    def state_dict(self):
        return {"proposals": self.proposals}

    def load_state(self, state):
        self.proposals = int(state["proposals"])


def test_operator_state_is_checkpointed_and_restored(workload, tmp_path):
    hints = build_operators([{"name": "hints"}], workload)[0]
    store = Store(tmp_path / "s.sqlite")
    first = CountingOperator(hints)
    make_engine(workload, store, budget=12, ops=[], extra_ops=[first]).run()
    assert first.proposals > 0
    saved = store.checkpoint(CHECKPOINT).state["operators"]["counting"]
    assert saved == {"proposals": first.proposals}

    second = CountingOperator(hints)
    resumed = make_engine(workload, store, budget=12, ops=[], extra_ops=[second])
    assert resumed.try_resume()
    assert second.proposals == first.proposals


class BreaksAfter(HashEvaluator):
    """Answers the first ``good`` calls, then raises on every call (``every``: only on every second one)."""

    def __init__(self, good: int, every: int = 1) -> None:
        super().__init__()
        self.good, self.every = good, every

    def evaluate(self, kernel):
        with self.lock:
            self.calls += 1
            n = self.calls
        if n > self.good and (n - self.good) % self.every == 0:
            raise RuntimeError(f"device lost on call {n}")
        return hash_result(kernel.identity, fail_below=0)


@pytest.mark.parametrize("every, rows, halted", [(1, 2 + 5, True), (2, 40, False)])
def test_an_evaluator_that_keeps_raising_halts_the_run(workload, tmp_path, every, rows, halted):
    """engine.max_evaluator_crashes: 5 evaluator exceptions in a row stop the run with a reason naming the last
    one; crashes interleaved with answers never do."""
    from evolve.runinfo import stop_reason

    with Store(tmp_path / "s.sqlite") as store:
        eng = make_engine(workload, store, budget=40, evaluator=BreaksAfter(2, every))
        eng.settings.max_evaluator_crashes = 5
        snap = eng.run()
        got = store.candidates(with_ptx=False)
        assert len(got) == rows
        if halted:
            assert [r.status for r in got[2:]] == ["crash"] * 5
            assert eng.halted.startswith("the evaluator raised on 5 evaluations in a row")
            assert "RuntimeError: device lost on call 7" in eng.halted
            assert stop_reason(eng.budget, snap, eng.halted).startswith("errors: the evaluator raised on 5")
        else:
            assert eng.halted is None and sum(r.status == "crash" for r in got) == 19
