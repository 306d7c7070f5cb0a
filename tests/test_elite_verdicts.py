"""Elites pending a sanitizer verdict: the archive keeps what they displaced, a failed verdict brings it back,
the engine applies verdicts, records them in the store and waits for the last ones before it reports."""

from __future__ import annotations

import pytest
from hash_evaluator import hash_result

from archive.grid import GridArchive, default_dimensions
from archive.store import Store
from evaluators.gpu.sanitizer import Verdict, parse_sanitizer
from evaluators.types import Status

F = {"registers": 40, "active_warps": 16, "traffic_ratio": 1.2}


def test_rejected_pending_elite_brings_back_the_one_it_displaced():
    a = GridArchive(default_dimensions())
    a.add(1, 1.0, F)
    a.add(2, 1.5, F, pending=True)
    assert a.pending == [2] and a.elite_of(2) is not None and a.elite_of(1) is None
    back = a.reject(2)
    assert back is not None and back.candidate_id == 1 and a.elite_of(1).objective == 1.0
    assert a.pending == [] and 2 not in a
    # an empty cell filled by a rejected candidate becomes empty again
    b = GridArchive(default_dimensions())
    b.add(7, 1.0, F, pending=True)
    assert b.reject(7) is None and len(b) == 0


def test_confirm_and_chains_of_pending_elites_and_state_roundtrip():
    a = GridArchive(default_dimensions())
    a.add(1, 1.0, F)
    a.add(2, 1.5, F, pending=True)
    a.add(3, 2.0, F, pending=True)  # displaces the pending 2
    again = GridArchive.from_state(a.state_dict())
    assert again == a and again.pending == [2, 3]
    a.reject(2)  # 3 now stands in for 1 if it fails too
    assert a.elite_of(3) is not None and a.pending == [3]
    a.reject(3)
    assert a.elite_of(1) is not None and len(a) == 1
    again.confirm(3)
    again.reject(2)
    assert again.elite_of(3) is not None and again.pending == []
    plain = GridArchive(default_dimensions())
    plain.add(1, 1.0, F)
    assert "pending" not in plain.state_dict()  # states without pending verdicts are unchanged


def test_parse_sanitizer_sums_every_error_summary():
    text = ("========= ERROR SUMMARY: 18 errors\n{\"ok\": true}\n========= ERROR SUMMARY: 20 errors\n")
    p = parse_sanitizer(text)
    assert p["errors"] == 38 and len(p["summary_lines"]) == 2
    assert parse_sanitizer("no summary")["errors"] is None


class VerdictEvaluator:
    """``hash_evaluator.hash_result`` plus verdicts: every second kernel submitted fails."""

    capacity = 1

    def __init__(self):
        self.queue: list[tuple[int, object]] = []
        self.submitted: list[int] = []

    def evaluate(self, kernel):
        return hash_result(kernel.identity)

    def submit_verdict(self, key, kernel):
        self.submitted.append(key)
        self.queue.append((key, kernel))

    def collect_verdicts(self, wait=False, timeout=None):
        out = [(k, Verdict(Status.SANITIZER, "compute-sanitizer racecheck: 12 error(s)") if k % 2 == 0
                else Verdict(Status.OK)) for k, _ in self.queue]
        self.queue.clear()
        return out

    def close(self):
        pass


def test_engine_applies_verdicts_and_records_rejections(tmp_path):
    from tests.test_engine import make_engine
    from workloads.registry import get_workload

    store = Store(tmp_path / "s.sqlite")
    ev = VerdictEvaluator()
    eng = make_engine(get_workload("rmsnorm"), store, budget=12, evaluator=ev)
    eng.run()
    assert ev.submitted, "no elite was submitted for a verdict"
    rows = {r.id: r for r in store.candidates(with_ptx=False)}
    rejected = [k for k in ev.submitted if k % 2 == 0]
    for k in rejected:
        assert rows[k].status == "sanitizer" and "racecheck" in rows[k].reason and rows[k].cell is None
        assert k not in eng.archive
    assert eng.archive.pending == []
    assert all(e.candidate_id % 2 == 1 for e in eng.archive.elites())
    best = store.best()
    assert best is None or best.status == "ok"


class SkippingEvaluator(VerdictEvaluator):
    """Every verdict SKIPPED, as on the H200 when the replay refused KDA's shapes."""

    def collect_verdicts(self, wait=False, timeout=None):
        out = [(k, Verdict(Status.SKIPPED, "compute-sanitizer memcheck gave no verdict")) for k, _ in self.queue]
        self.queue.clear()
        return out


def test_a_skipped_verdict_leaves_the_elite_standing_but_marked_unverified(tmp_path):
    from tests.test_engine import make_engine
    from workloads.registry import get_workload

    store = Store(tmp_path / "s.sqlite")
    ev = SkippingEvaluator()
    eng = make_engine(get_workload("rmsnorm"), store, budget=12, evaluator=ev)
    final = eng.run()
    rows = {r.id: r for r in store.candidates(with_ptx=False)}
    assert ev.submitted and all(rows[k].reason.startswith("unverified: sanitizer verdict skipped") and
                                rows[k].status == "ok" for k in ev.submitted)
    assert final.verdicts == {"skipped": len(ev.submitted), "pending": 0}
    assert final.flat()["verdicts/skipped"] == len(ev.submitted)
    checked = make_engine(get_workload("rmsnorm"), Store(tmp_path / "t.sqlite"), budget=12,
                          evaluator=VerdictEvaluator()).run()
    assert checked.verdicts["ok"] + checked.verdicts["sanitizer"] >= 1 and "skipped" not in checked.verdicts


def test_sanitize_without_the_tool_gives_no_verdict():
    from evaluators.gpu.sanitizer import find_sanitizer, sanitize
    from workloads.rmsnorm import RMSNorm

    if find_sanitizer() is not None:
        pytest.skip("compute-sanitizer is installed here: tests/gpu covers the real verdicts")
    wl = RMSNorm()
    v = sanitize(wl.seeds()[:1], wl, arch="sm_90", tools=("memcheck",))
    assert len(v) == 1 and v[0].status == Status.SKIPPED and "not found" in v[0].reason


# ------------------------------------------------------------------------------------------- lazy verdicts
def test_add_names_the_incumbent_it_displaced_and_confirm_drops_dead_chains():
    a = GridArchive(default_dimensions())
    assert a.add(1, 1.0, F).displaced is None
    assert a.add(2, 1.5, F, pending=True).displaced == 1
    assert a.add(3, 2.0, F, pending=True).displaced == 2
    assert a.add(4, 1.0, F).displaced is None  # not added
    assert a.is_pending(2) and a.is_pending(3) and not a.is_pending(1)
    # 3 passes: 2 can never come back (only 3's failure could bring it), so it is owed no verdict
    assert a.confirm(3) == [2] and a.pending == [] and a.elite_of(3) is not None
    b = GridArchive(default_dimensions())
    b.add(1, 1.0, F, pending=True)
    b.add(2, 1.5, F, pending=True)
    b.add(3, 2.0, F, pending=True)
    assert b.confirm(3) == [2, 1] and b.pending == []
    c = GridArchive(default_dimensions())
    c.add(1, 1.0, F, pending=True)
    assert c.confirm(1) == [] and c.confirm(1) == []  # no chain; a second confirm is a no-op


def test_a_verdict_queue_drops_a_withdrawn_key_unless_its_batch_started():
    import threading

    from evaluators.gpu.sanitizer import VerdictQueue

    started, release, runs = threading.Event(), threading.Event(), []

    def run(kernels):
        runs.append(list(kernels))
        started.set()
        release.wait(10)
        return [Verdict(Status.OK) for _ in kernels]

    q = VerdictQueue(run, max_batch=1)
    q.submit("a", "ka")
    assert started.wait(10)  # "a" is being computed
    q.submit("b", "kb")
    q.submit("c", "kc")
    assert q.withdraw("c") is True and q.withdraw("c") is False
    assert q.withdraw("a") is False  # its batch started: its verdict still comes
    release.set()
    done = q.collect(wait=True, timeout=10)
    q.close()
    assert [k for k, _ in done] == ["a", "b"] and runs == [["ka"], ["kb"]]


class LazyVerdictEvaluator(VerdictEvaluator):
    """Verdicts that arrive only when the engine waits for them (the end of the run), withdrawable till then:
    every elite displaced during the run is withdrawn, so only the last elites (and any a failed verdict brings
    back) are sanitized. Even keys fail."""

    def __init__(self):
        super().__init__()
        self.withdrawn: list[int] = []
        self.computed: list[int] = []

    def withdraw_verdict(self, key):
        n = len(self.queue)
        self.queue = [(k, v) for k, v in self.queue if k != key]
        if len(self.queue) != n:
            self.withdrawn.append(key)
        return len(self.queue) != n

    def collect_verdicts(self, wait=False, timeout=None):
        if not wait:
            return []
        self.computed += [k for k, _ in self.queue]
        return super().collect_verdicts(wait, timeout)


def test_the_engine_withdraws_verdicts_of_displaced_elites_and_asks_again_for_any_that_come_back(tmp_path):
    from archive.grid import Dimension
    from evolve.algorithms.map_elites import MapElites
    from tests.test_engine import make_engine
    from workloads.registry import get_workload

    store = Store(tmp_path / "s.sqlite")
    ev = LazyVerdictEvaluator()
    eng = make_engine(get_workload("rmsnorm"), store, budget=40, evaluator=ev)
    # two cells per axis, so elites are displaced often (the default grid's 576 cells rarely see one in 40)
    coarse = GridArchive([Dimension(d.name, (d.edges[0], d.edges[len(d.edges) // 2], d.edges[-1]))
                          for d in default_dimensions()])
    eng.archive, eng.algorithm = coarse, MapElites(coarse)
    eng.run()
    assert ev.withdrawn, "no elite was displaced while pending: the test shows nothing"
    assert len(ev.computed) < len(ev.submitted)  # the saving
    assert eng.verdicts_withdrawn == len(ev.withdrawn)
    # every final elite had its own verdict, and passed it (odd keys); nothing is left pending
    assert eng.archive.pending == [] and eng.withdrawn == set()
    elites = [e.candidate_id for e in eng.archive.elites()]
    assert elites and all(k in ev.computed and k % 2 == 1 for k in elites)
    rows = {r.id: r for r in store.candidates(with_ptx=False)}
    assert all(rows[k].status == "sanitizer" for k in ev.computed if k % 2 == 0)
    # a withdrawn candidate that a failed verdict brought back was asked again
    again = [k for k in ev.withdrawn if ev.submitted.count(k) > 1]
    assert all(k in ev.computed for k in again)


class SilentVerdictEvaluator(VerdictEvaluator):
    """A sanitizer that never answers: the waits time out."""

    def collect_verdicts(self, wait=False, timeout=None):
        self.waited = getattr(self, "waited", []) + ([timeout] if wait else [])
        return []


def test_the_end_of_run_wait_is_bounded_and_leaves_the_rest_pending(tmp_path):
    from tests.test_engine import make_engine
    from workloads.registry import get_workload

    store = Store(tmp_path / "s.sqlite")
    ev = SilentVerdictEvaluator()
    eng = make_engine(get_workload("rmsnorm"), store, budget=6, evaluator=ev)
    eng.settings.verdict_wait_s = 2.5
    eng.run()
    assert len(ev.waited) == 1 and 0 < ev.waited[0] <= 2.5  # one bounded wait, then the run reports
    assert eng.archive.pending and set(eng.archive.pending) <= set(ev.submitted)
    again = GridArchive.from_state(store.checkpoint("engine").state["archive"])
    assert again.pending == eng.archive.pending  # asked again on resume


class RandomLagVerdictEvaluator(LazyVerdictEvaluator):
    """Verdicts that come back in a random subset at each collect (all of them when the engine waits); a key
    divisible by 3 fails."""

    def __init__(self, seed):
        super().__init__()
        import random

        self.rng = random.Random(seed)
        self.verdict_of: dict[int, Status] = {}

    def collect_verdicts(self, wait=False, timeout=None):
        take = self.queue if wait else [q for q in self.queue if self.rng.random() < 0.3]
        self.queue = [q for q in self.queue if q not in take]
        out = []
        for k, _ in take:
            self.computed.append(k)
            v = Verdict(Status.SANITIZER, "compute-sanitizer racecheck: 1 error(s)") if k % 3 == 0 else Verdict(Status.OK)
            self.verdict_of[k] = v.status
            out.append((k, v))
        return out


# Six seeds whose trajectories displace elites while their verdicts wait (seed 5 displaced none once the
# template's knob space grew to twelve knobs, 2026-12-03; the assertion below keeps each seed honest).
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 6])
def test_with_lagging_verdicts_every_final_elite_passed_its_own(tmp_path, seed):
    """However verdicts lag behind the elites (withdrawn, brought back, asked again), the run ends with every elite
    confirmed by its own passed verdict and every failed one out of the archive."""
    from archive.grid import Dimension
    from evolve.algorithms.map_elites import MapElites
    from tests.test_engine import make_engine
    from workloads.registry import get_workload

    store = Store(tmp_path / "s.sqlite")
    ev = RandomLagVerdictEvaluator(seed)
    eng = make_engine(get_workload("rmsnorm"), store, budget=30, evaluator=ev, seed=seed)
    coarse = GridArchive([Dimension(d.name, (d.edges[0], d.edges[len(d.edges) // 2], d.edges[-1]))
                          for d in default_dimensions()])
    eng.archive, eng.algorithm = coarse, MapElites(coarse)
    eng.run()
    assert ev.withdrawn  # elites were displaced while their verdicts waited
    assert eng.archive.pending == []
    for e in eng.archive.elites():
        assert ev.verdict_of.get(e.candidate_id) == Status.OK, (e.candidate_id, ev.verdict_of.get(e.candidate_id))
    rows = {r.id: r for r in store.candidates(with_ptx=False)}
    assert all(rows[k].status == "sanitizer" for k, s in ev.verdict_of.items() if s == Status.SANITIZER)


class SlowVerdictEvaluator(VerdictEvaluator):
    """The end-of-run wait takes 1000 s of the engine's clock (the clock is advanced, nothing sleeps)."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock

    def collect_verdicts(self, wait=False, timeout=None):
        if wait:
            self.clock.offset += 1000.0
        return super().collect_verdicts(wait, timeout)


def test_the_rate_leaves_out_the_end_of_run_wait_for_verdicts(tmp_path, monkeypatch):
    """eval/s is the search's rate: a loop comparison with and without verdicts must not charge the owed
    verdicts' drain (at full speed after the search) to the search."""
    import time as real_time

    import evolve.engine as engine_mod
    from tests.test_engine import make_engine
    from workloads.registry import get_workload

    class Clock:
        offset = 0.0

        def monotonic(self):
            return real_time.monotonic() + self.offset

        def __getattr__(self, name):
            return getattr(real_time, name)

    clock = Clock()
    monkeypatch.setattr(engine_mod, "time", clock)
    ev = SlowVerdictEvaluator(clock)
    eng = make_engine(get_workload("rmsnorm"), Store(tmp_path / "s.sqlite"), budget=6, evaluator=ev)
    final = eng.run()
    assert final.evaluations == 6
    assert final.host_seconds["verdict_wait"] >= 1000.0
    assert final.evals_per_s > 6 / 1000.0 * 10  # over the search's seconds, not the 1000 s wait
