"""The engine: the ask/tell loop that proposes, applies, evaluates and records every candidate.

One step for one candidate (DESIGN.md "Data flow of one candidate")::

    algorithm.ask(rng)            -> parent ids (+ a forced operator, an island)
    selector.select(rng)          -> operator (UCB1 bandit, evolve.selection)
    operator.propose(parent, ctx) -> EditScript      (NoProposal -> a "no_proposal" row, next operator)
    apply_script(parent, script)  -> child Kernel    (EditApplyError -> an "apply_error" row)
    hash cache                    -> identical kernels are evaluated once (the store's identity index)
    evaluator.evaluate(child)     -> EvalResult, on ``capacity`` threads
    tell                          -> store row, archive insert, algorithm.tell, bandit reward, lessons,
                                     op.reflect (a lesson line), op.repair (one retry per failed child)
                                     and a checkpoint, all in one SQLite transaction

Workload seeds are evaluated first, in order, as candidates with operator ``"seed"``.

Determinism and resume. With ``ordered=True`` (the default) results are told in the order the candidates were
asked, whatever order the evaluations finish in: the window of in-flight candidates is refilled only after the
oldest is told, so every ask sees the same state for any thread timing. The checkpoint holds the algorithm,
archive, bandit, budget counters, the numpy Generator's ``bit_generator.state`` and the proposed-but-untold
candidates (their PTX), and commits in the same transaction as the rows it covers. A run killed at any
instant resumes from the last commit, re-evaluates the untold candidates and, with a deterministic evaluator,
ends with the same archive as an uninterrupted run. ``ordered=False`` tells results as they complete
(better GPU utilisation with uneven evaluation times, not reproducible).

Multi-task search (``tasks``, an ``evolve.tasks.TaskSet``): every candidate is evaluated on one task's shapes
(``evaluator.evaluate(kernel, shapes=...)``) and carries the feature ``"task"``, a dimension of the archive.
Seeds are evaluated on every task. A child's task is the parent's, or a neighbour's (``TaskSet.choose``); a child
that becomes the best of task ``t`` is then tried unchanged on the neighbouring tasks (rows whose
``timings["transfer_from_task"]`` names ``t``; each an evaluation, counted in the budget). The hash cache keys on
(identity, task): a kernel that failed (compile, gate) is not tried again on any task.

Statuses of rows that never reached the evaluator: ``no_proposal`` (the operator had nothing to propose),
``apply_error`` (the script did not apply), ``operator_error`` (the operator raised something else). A kernel
whose identity was already evaluated, or is in flight, is not re-evaluated and gets no row (``duplicates``
counts them).
"""

from __future__ import annotations

import hashlib
import logging
import time
import traceback
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from archive.lessons import script_kind
from archive.store import UNVERIFIED, CandidateRow, Store
from evaluators.types import EvalResult, Status
from evolve.algorithms.base import SEED, Ask, CandidateId, NoParent, Told
from evolve.budget import Budget
from evolve.operators.base import NoProposal, OperatorContext
from evolve.selection import OperatorSelector, operator_reward
from evolve.tasks import TASK_FEATURE, TaskSet, best_per_task, task_stats
from population.kernel import Kernel, LaunchConfig

log = logging.getLogger(__name__)

CHECKPOINT = "engine"
TRANSFER = "transfer"
# Statuses after which an operator's repair role gets a chance (compile or gate failures, DESIGN.md words).
EVAL_STATUSES = frozenset(str(s) for s in Status)
REPAIRABLE = frozenset({Status.COMPILE_ERROR, Status.LOAD_ERROR, Status.LAUNCH_ERROR, Status.WRONG_RESULT,
                        Status.NONDETERMINISTIC, Status.TOO_FAST_TO_BE_TRUE})


# The reason prefix of a crash row made from an evaluator exception (_timed_evaluate; counted by the engine).
EVALUATOR_RAISED = "evaluator raised"


@dataclass
class EngineSettings:
    """capacity: concurrent evaluations (threads); ordered: tell in ask order (see module docstring);
    inspirations: elites from other cells put in ``OperatorContext.inspirations``; lessons: lines of the lessons
    memory given to operators; checkpoint_every: tells per checkpoint transaction; max_repairs: repair
    attempts per failed child; reward_validity / reward_improvement: bandit reward weights
    (``evolve.selection.operator_reward``); log_every: evaluations between metric snapshots; ahead: proposals
    made beyond ``capacity`` whose template instantiations (nvcc) run on the engine's compile executor while
    earlier candidates are evaluated (0: every child is built in the engine's thread when proposed; needs a
    ``compile_executor``); max_evaluator_crashes: halt after this many evaluations in a row on which the
    evaluator itself raised (``crash`` rows whose reason starts "evaluator raised"; 0: never); verdict_wait_s:
    seconds the end of a run waits for elite verdicts still out (compute-sanitizer): those left stay pending in
    the checkpoint and are asked again on resume."""

    capacity: int = 1
    ordered: bool = True
    inspirations: int = 2
    lessons: int = 8
    checkpoint_every: int = 1
    max_repairs: int = 1
    reward_validity: float = 0.2
    reward_improvement: float = 0.8
    log_every: int = 10
    ahead: int = 0
    max_evaluator_crashes: int = 20
    verdict_wait_s: float = 900.0


@dataclass
class _Staged:
    """A proposal whose child is not built yet: the edit script waits for its template instantiation (nvcc,
    submitted to the compile executor when proposed) and is applied when the item moves into the evaluation
    window, in proposal order."""

    ask: Ask
    operator: str
    parent_id: CandidateId
    script_text: str
    task: int | None
    timings: dict[str, float] = field(default_factory=dict)
    prep: Future | None = None

    def to_json(self) -> dict[str, Any]:
        return {"ask": self.ask.to_json(), "operator": self.operator, "parent_id": self.parent_id,
                "script": self.script_text, "task": self.task, "timings": self.timings}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> _Staged:
        return cls(ask=Ask.from_json(d["ask"]), operator=d["operator"], parent_id=d["parent_id"],
                   script_text=d["script"], task=d.get("task"), timings=dict(d.get("timings", {})))


@dataclass
class _Item:
    """A candidate proposed and waiting for (or holding) its evaluation."""

    ask: Ask
    operator: str
    kernel: Kernel
    edit_kind: str = "NONE"
    repairs_left: int = 0
    repair_of: CandidateId | None = None
    timings: dict[str, float] = field(default_factory=dict)
    task: int | None = None
    future: Future | None = None

    def key(self) -> str:
        """The hash-cache key: the kernel identity, plus ``@task`` in a multi-task run."""
        return self.kernel.identity if self.task is None else f"{self.kernel.identity}@{self.task}"

    def to_json(self) -> dict[str, Any]:
        k = self.kernel
        return {"ask": self.ask.to_json(), "operator": self.operator, "edit_kind": self.edit_kind,
                "repairs_left": self.repairs_left, "repair_of": self.repair_of, "timings": self.timings,
                "task": self.task,
                "kernel": {"ptx": k.ptx, "entry": k.entry, "launch": k.launch.to_json(),
                           "parents": list(k.parents), "operator": k.operator, "edit_text": k.edit_text}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> _Item:
        from population.parser import parse_module

        kd = d["kernel"]
        kernel = Kernel(module=parse_module(kd["ptx"], filename="<checkpoint>"), entry=kd["entry"],
                        launch=LaunchConfig.from_json(kd["launch"]), parents=tuple(kd["parents"]),
                        operator=kd["operator"], edit_text=kd["edit_text"])
        return cls(ask=Ask.from_json(d["ask"]), operator=d["operator"], kernel=kernel,
                   edit_kind=d["edit_kind"], repairs_left=int(d["repairs_left"]),
                   repair_of=d["repair_of"], timings=dict(d["timings"]), task=d.get("task"))


@dataclass
class Snapshot:
    """Run metrics at one moment, logged against ``evaluations``.

    evaluations: evaluator calls so far; candidates: recorded proposals; valid_rate: ok / evaluated rows;
    best: best objective in the archive (None before any valid kernel); qd_score / coverage / n_elites: archive
    stats; evals_per_s: evaluations per wall second of this session's search (the end-of-run wait for
    sanitizer verdicts left out); seconds: wall seconds of search;
    statuses: rows per status; duplicates: hash-cache hits; operator_rewards: mean bandit reward per operator;
    tasks: per task name, ``evolve.tasks.task_stats`` (qd_score, coverage, best, n_elites), empty without tasks;
    host_seconds: seconds the engine's thread spent per phase this session (propose: ask + operator; apply: edit
    + instantiation when not staged; wait_instantiation: waiting for a staged one; tell: store, archive,
    lessons, checkpoint; wait_evaluation: blocked on the oldest evaluation; refill: the whole refill step;
    verdict_wait: the end-of-run wait for owed sanitizer verdicts).
    disabled: operators switched off (name -> reason).
    verdicts: elite verdicts (compute-sanitizer) applied this session per status (``ok``, ``sanitizer``: rejected,
    ``skipped``: the tool gave none, so the elite stands unverified) and ``pending``: archive elites whose verdict
    is still owed; empty for an evaluator without verdicts.
    """

    evaluations: int
    candidates: int
    valid_rate: float
    best: float | None
    qd_score: float
    coverage: float
    n_elites: int
    evals_per_s: float
    seconds: float
    statuses: dict[str, int]
    duplicates: int
    operator_rewards: dict[str, float]
    tasks: dict[str, dict[str, float]] = field(default_factory=dict)
    host_seconds: dict[str, float] = field(default_factory=dict)
    disabled: dict[str, str] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)

    def flat(self) -> dict[str, float]:
        """Scalars for a tracker: nested dicts become ``failures/<status>`` and ``operator_reward/<name>``."""
        out: dict[str, float] = {
            "evaluations": self.evaluations, "candidates": self.candidates, "valid_rate": self.valid_rate,
            "qd_score": self.qd_score, "coverage": self.coverage, "n_elites": self.n_elites,
            "evals_per_s": self.evals_per_s, "seconds": self.seconds, "duplicates": self.duplicates}
        if self.best is not None:
            out["best_objective"] = self.best
        for s, n in self.statuses.items():
            if s != Status.OK:
                out[f"failures/{s}"] = n
        for op, r in self.operator_rewards.items():
            out[f"operator_reward/{op}"] = r
        for k, v in self.host_seconds.items():
            out[f"host/{k}_s"] = v
        for name, st in self.tasks.items():
            for k, v in st.items():
                if v == v:  # NaN (no elite yet) is left out
                    out[f"task/{name}/{k}"] = v
        for op in self.disabled:
            out[f"switched_off/{op}"] = 1
        for s, n in self.verdicts.items():
            out[f"verdicts/{s}"] = n
        return out


class Engine:
    """Drives one run (module docstring). The caller builds the parts and owns closing the evaluator/store.

    workload: ``workloads`` Workload (seeds(), instantiate()); evaluator: ``evaluators.types.Evaluator``;
    algorithm: an ``evolve.algorithms`` ask/tell algorithm; archive: ``archive.grid.GridArchive`` (the run's
    archive: QD metrics, export; MAP-Elites selects from it); operators: objects with ``name`` and ``propose``
    (optionally ``repair`` and ``reflect``); selector: the bandit over ``operators`` by name; store: the run's
    ``archive.store.Store``; budget: limits; seed: the numpy Generator seed; lessons: an ``archive.lessons``
    Lessons memory or None; on_snapshot: called with each Snapshot (tracker, progress line, metrics file);
    tasks: an ``evolve.tasks.TaskSet`` for a multi-task run (the archive must then have the ``"task"``
    dimension), None for one objective over the evaluator's shapes; compile_executor: a
    ``concurrent.futures.Executor`` (``evaluators.compile_executor``) for the template instantiations of
    proposals staged ahead (``EngineSettings.ahead``).

    Raises ValueError when an algorithm needs an operator that is not configured (the GA needs ``crossover``).
    """

    def __init__(self, *, workload: Any, evaluator: Any, algorithm: Any, archive: Any, operators: list[Any],
                 selector: OperatorSelector, store: Store, budget: Budget, seed: int,
                 settings: EngineSettings | None = None, lessons: Any = None,
                 on_snapshot: Callable[[Snapshot], None] | None = None, tasks: TaskSet | None = None,
                 compile_executor: Any = None) -> None:
        self.workload, self.evaluator, self.algorithm, self.archive = workload, evaluator, algorithm, archive
        self.operators = {op.name: op for op in operators}
        self.selector, self.store, self.budget = selector, store, budget
        self.settings = settings or EngineSettings()
        self.lessons, self.on_snapshot = lessons, on_snapshot
        self.rng = np.random.default_rng(seed)
        self.tasks = tasks
        if tasks is not None and TASK_FEATURE not in [d.name for d in getattr(archive, "dims", [])]:
            raise ValueError(f"a multi-task run needs an archive with the {TASK_FEATURE!r} dimension "
                             "(evolve.tasks.TaskSet.dimension())")
        self.transfers: deque[tuple[CandidateId, int, int | None]] = deque()
        self.compile_executor = compile_executor
        self.staged: deque[_Staged] = deque()
        self.host_seconds: Counter[str] = Counter()
        for name in getattr(algorithm, "required_operators", ()):
            if name not in self.operators:
                raise ValueError(f"algorithm {algorithm.name!r} needs operator {name!r}; add it to "
                                 f"mutator.operators (configured: {sorted(self.operators)})")
        self.pending: deque[_Item] = deque()
        self.in_flight: set[str] = set()
        self.seeds_queued = False
        self.statuses: Counter[str] = Counter()
        self.duplicates = 0
        self.tells_since_checkpoint = 0
        self.last_logged = -1
        self._kernels: OrderedDict[CandidateId, Kernel] = OrderedDict()
        self._results: OrderedDict[CandidateId, EvalResult] = OrderedDict()
        self._session_start = time.monotonic()
        self._search_end: float | None = None  # set when the search stops: the verdict wait is not search time
        self._session_evals0 = 0
        self.resumed = False
        self._committed = False
        self.halted: str | None = None  # why the run stopped before its budget (operators off, evaluator broken)
        self.evaluator_crashes = 0  # evaluations in a row on which the evaluator raised
        # pending elites displaced before their verdict's batch started: the verdict was withdrawn and is asked
        # again only if a failed verdict brings the candidate back (lazy verdicts; not checkpointed: on resume
        # the pending candidates that are not elites are the withdrawn ones)
        self.withdrawn: set[Any] = set()
        self.verdicts_withdrawn = 0
        self.verdicts: Counter[str] = Counter()  # elite verdicts applied this session, per verdict status

    # ---------------------------------------------------------------------------------------- lookups
    def kernel(self, cid: CandidateId) -> Kernel:
        """The kernel of candidate row ``cid`` (cached; parsed from the store otherwise)."""
        k = self._kernels.get(cid)
        if k is None:
            k = self.store.get(int(cid)).kernel()
            self._remember(cid, k, None)
        return k

    def result(self, cid: CandidateId) -> EvalResult:
        """The EvalResult of candidate row ``cid`` (cached; rebuilt from the store otherwise)."""
        r = self._results.get(cid)
        if r is None:
            r = self.store.get(int(cid)).to_eval_result()
            self._results[cid] = r
        return r

    def _remember(self, cid: CandidateId, kernel: Kernel | None, result: EvalResult | None) -> None:
        if kernel is not None:
            self._kernels[cid] = kernel
            self._kernels.move_to_end(cid)
            while len(self._kernels) > 512:
                self._kernels.popitem(last=False)
        if result is not None:
            self._results[cid] = result
            self._results.move_to_end(cid)
            while len(self._results) > 4096:
                self._results.popitem(last=False)

    # ------------------------------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue: JSON-able."""
        return {
            "algorithm": self.algorithm.state_dict(),
            "archive": self.archive.state_dict(),
            "selector": self.selector.state_dict(),
            "budget": self.budget.state_dict(),
            "rng": self.rng.bit_generator.state,
            "pending": [it.to_json() for it in self.pending],
            "seeds_queued": self.seeds_queued,
            "statuses": dict(self.statuses),
            "duplicates": self.duplicates,
            "last_logged": self.last_logged,
            "transfers": [list(t) for t in self.transfers],
            "staged": [st.to_json() for st in self.staged],
            # operators that learn (e.g. the LLM operator's role/model bandit) checkpoint with the rest
            "operators": {n: op.state_dict() for n, op in self.operators.items() if hasattr(op, "state_dict")},
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned. KeyError when a part is missing; ValueError from
        ``GridArchive.load_state`` when the checkpoint's descriptors or qd_offset differ from this run's."""
        self.algorithm.load_state(state["algorithm"])
        self.archive.load_state(state["archive"])
        self.selector.load_state(state["selector"])
        self.budget.load_state(state["budget"])
        self.rng.bit_generator.state = state["rng"]
        self.pending = deque(_Item.from_json(d) for d in state["pending"])
        self.seeds_queued = bool(state["seeds_queued"])
        self.statuses = Counter(state["statuses"])
        self.duplicates = int(state["duplicates"])
        self.last_logged = int(state["last_logged"])
        self.transfers = deque((t[0], int(t[1]), t[2]) for t in state.get("transfers", []))
        self.staged = deque(_Staged.from_json(d) for d in state.get("staged", []))
        for name, op_state in state.get("operators", {}).items():
            if name in self.operators and hasattr(self.operators[name], "load_state"):
                self.operators[name].load_state(op_state)

    def try_resume(self) -> bool:
        """Load the store's engine checkpoint if there is one; rows written after it (none when every write
        went through the engine) are dropped so the replay re-creates them. Returns whether it resumed."""
        cp = self.store.checkpoint(CHECKPOINT)
        if cp is None:
            return False
        dropped = self.store.truncate_after(cp.last_candidate_id)
        if dropped:
            log.warning("resume: dropped %d rows written after the last checkpoint", dropped)
        self.load_state(cp.state)
        submit = getattr(self.evaluator, "submit_verdict", None)
        for cid in self.archive.pending if submit is not None and hasattr(self.archive, "pending") else []:
            if self.archive.elite_of(cid) is None:  # displaced while pending: asked only if it comes back
                self.withdrawn.add(cid)
            else:
                submit(cid, self.kernel(cid))  # verdicts lost with the killed run are asked again
        self.resumed = True
        self._session_evals0 = self.budget.evaluations
        log.info("resumed from checkpoint: %d evaluations, %d candidates, %d untold", self.budget.evaluations,
                 self.budget.candidates, len(self.pending))
        return True

    # --------------------------------------------------------------------------------------- proposing
    def _context(self, ask: Ask, parent_id: CandidateId) -> OperatorContext:
        try:
            parent_result = self.result(parent_id)
        except Exception:  # a seed row without metrics, or a store without the row yet
            parent_result = None
        inspirations: list[tuple[Kernel, Any]] = []
        if len(ask.parents) > 1:
            inspirations = [(self.kernel(p), self.result(p)) for p in ask.parents[1:]]
        elif self.settings.inspirations and len(self.archive) > 1:
            others = [e for e in self.archive.elites() if e.candidate_id != parent_id]
            if others:
                idx = self.rng.choice(len(others), size=min(self.settings.inspirations, len(others)),
                                      replace=False)
                inspirations = [(self.kernel(others[int(i)].candidate_id), self.result(others[int(i)].candidate_id))
                                for i in sorted(idx)]
        lessons: list[str] = []
        if self.lessons is not None and self.settings.lessons and hasattr(self.lessons, "top_lines"):
            lessons = list(self.lessons.top_lines(self.settings.lessons))
        return OperatorContext(workload=self.workload, parent_result=parent_result, inspirations=inspirations,
                               lessons=lessons)

    def _failure_row(self, parent: Kernel, operator: str, status: str, reason: str, edit_text: str = "",
                     island: int | None = None, lesson: bool = True) -> None:
        digest = hashlib.sha256(f"{parent.identity}\0{operator}\0{edit_text}\0{reason}".encode()).hexdigest()
        row = CandidateRow(identity=f"{status}:{digest[:48]}", status=status, reason=reason[:2000],
                           parents=[parent.identity], operator=operator, edit_text=edit_text, entry=parent.entry,
                           island=island)
        # Written at once (joining the tell's transaction when inside one), so a failing operator shows in the
        # store while it fails; rows after the last checkpoint are dropped and re-created on resume.
        with self.store.transaction() as tx:
            tx.add_candidate(row)
        self.statuses[status] += 1
        self.budget.candidates += 1
        if not lesson:  # an infrastructure failure (e.g. the LLM endpoint) says nothing about the edit
            return
        # The lessons memory knows no "operator_error"; it counts as a proposal that got nowhere.
        lesson_status = "no_proposal" if status == "operator_error" else status
        self._lesson(operator, script_kind(edit_text) if edit_text else "NONE", lesson_status, False, reason)

    def _all_switched_off(self) -> bool:
        """True (and ``halted`` set, once) when every selectable operator has switched itself off."""
        off = self.disabled_operators()
        if not off or [a for a in self.selector.active if a not in off]:
            return False
        if not self.halted:
            self.halted = "every operator is switched off: " + "; ".join(f"{n}: {why}" for n, why in off.items())
            log.warning("stopping: %s", self.halted)
        return True

    def disabled_operators(self) -> dict[str, str]:
        """Operators that switched themselves off (``op.disabled``: the reason), e.g. the LLM operator after
        its failure budget; the bandit no longer selects them."""
        return {n: str(op.disabled) for n, op in self.operators.items() if getattr(op, "disabled", None)}

    def _lesson(self, operator: str, edit_kind: str, status: str, improved: bool, reason: str,
                candidate_id: int | None = None) -> None:
        if self.lessons is not None:
            self.lessons.record(operator, edit_kind, status, improved, reason, candidate_id=candidate_id)

    def _apply(self, parent: Kernel, script: Any, operator: str) -> Kernel:
        from population.edits import apply_script

        return apply_script(parent, script, operator=operator,
                            instantiate=getattr(self.workload, "instantiate", None))

    def _propose(self, staged: bool = False) -> _Item | _Staged | None:
        """One ask: returns an item to evaluate, or None when every tried operator failed (rows recorded).
        staged: return the script as a ``_Staged`` proposal (built later by ``_build``) instead of applying it."""
        t_ask = time.perf_counter()
        ask = self.algorithm.ask(self.rng)
        parent = self.kernel(ask.parents[0])
        ctx = self._context(ask, ask.parents[0])
        task = None
        if self.tasks is not None:
            task = self.tasks.choose(self._task_of(ask.parents[0]), self.rng)
            ctx.task = self.tasks[task]
        tried: set[str] = set(self.disabled_operators())
        while True:
            if ask.operator is not None:
                if ask.operator in tried:
                    return None
                name = ask.operator
            else:
                try:
                    name = self.selector.select(self.rng, exclude=tried | self._untried_waiting())
                except ValueError:
                    try:
                        name = self.selector.select(self.rng, exclude=tried)
                    except ValueError:
                        return None
            tried.add(name)
            op = self.operators[name]
            t0 = time.perf_counter()
            try:
                script = op.propose(parent, ctx, self.rng)
            except NoProposal as e:  # a subclass may carry its own status and say it is no lesson
                self._failure_row(parent, name, str(getattr(e, "status", "no_proposal")), str(e) or "no proposal",
                                  island=ask.island, lesson=bool(getattr(e, "lesson", True)))
                self._reward(name, 0.0)
                continue
            except Exception as e:
                log.warning("operator %s raised while proposing: %s", name, e)
                self._failure_row(parent, name, "operator_error", _short_exc(e), island=ask.island)
                self._reward(name, 0.0)
                continue
            t1 = time.perf_counter()
            self.host_seconds["propose"] += t1 - t_ask
            text = script.to_text() if hasattr(script, "to_text") else str(script)
            if staged:
                st = _Staged(ask=ask, operator=name, parent_id=ask.parents[0], script_text=text, task=task,
                             timings={"propose": t1 - t0})
                self._prepare(st, script)
                return st
            return self._child_item(ask, name, parent, script, text, task, {"propose": t1 - t0})

    def _untried_waiting(self) -> set[str]:
        """Arms the bandit has no reward for yet but whose proposal is already staged or evaluating, while
        proposals are staged ahead of the rewards (UCB1's "try every arm once" would otherwise pick the first
        untried arm again and again). Empty without staged proposals, so runs without ``ahead`` choose as before."""
        if not self.staged:  # only with proposals staged ahead (engine.ahead): other runs keep their choices
            return set()
        counts = getattr(self.selector, "counts", {})
        waiting = {st.operator for st in self.staged} | {it.operator for it in self.pending}
        return {a for a in waiting if counts.get(a, 1) == 0}

    def _prepare(self, st: _Staged, script: Any) -> None:
        """Submit the template instantiation a staged script needs (its KNOBS edits) to the compile executor."""
        from population.edits import SetKnobs

        knobs = [dict(e.knobs) for e in getattr(script, "edits", ()) if isinstance(e, SetKnobs)]
        spec = getattr(self.workload, "spec", None)
        if knobs and self.compile_executor is not None and spec is not None:
            from evaluators.compile_executor import instantiate_template

            st.prep = self.compile_executor.submit(instantiate_template, spec(), knobs[-1])

    def _build(self, st: _Staged) -> _Item | None:
        """Apply a staged proposal (waiting for its instantiation), then the hash cache; None when it failed to
        apply (an ``apply_error`` row) or is a duplicate."""
        t0 = time.perf_counter()
        if st.prep is not None:
            try:
                st.timings["instantiate"] = float(st.prep.result())
            except Exception:  # the apply below raises the same error in this thread, with its message
                pass
        self.host_seconds["wait_instantiation"] += time.perf_counter() - t0
        return self._child_item(st.ask, st.operator, self.kernel(st.parent_id), None, st.script_text, st.task,
                                st.timings)

    def _child_item(self, ask: Ask, operator: str, parent: Kernel, script: Any, text: str, task: int | None,
                    timings: dict[str, float]) -> _Item | None:
        """Apply ``script`` (parsed from ``text`` when None) to ``parent`` and pass the child through the hash
        cache; None when it failed to apply (an ``apply_error`` row, reward 0) or is a duplicate. timings: the
        proposal's so far; ``"apply"`` is added."""
        t1 = time.perf_counter()
        try:
            script = _parse_script(text) if script is None else script
            child = self._apply(parent, script, operator)
        except Exception as e:
            self._failure_row(parent, operator, "apply_error", _short_exc(e), edit_text=text, island=ask.island)
            self._reward(operator, 0.0)
            return None
        if len(ask.parents) > 1:
            child = replace(child, parents=tuple(self.kernel(p).identity for p in ask.parents))
        t2 = time.perf_counter()
        self.host_seconds["apply"] += t2 - t1
        item = _Item(ask=ask, operator=operator, kernel=child, edit_kind=script_kind(script),
                     repairs_left=self.settings.max_repairs, timings={**timings, "apply": t2 - t1}, task=task)
        return self._admit(item)

    def _task_best(self, task: int | None) -> float | None:
        """The best objective among the archive's elites of ``task`` (None: no elite, or no task)."""
        if task is None or self.tasks is None:
            return None
        best = best_per_task(self.archive, self.tasks).get(task)
        return None if best is None else best.objective

    def _task_of(self, cid: CandidateId) -> int | None:
        """The task a candidate row was evaluated on (its ``"task"`` feature), None when it has none."""
        try:
            t = self.result(cid).features.get(TASK_FEATURE)
        except Exception:
            return None
        return None if t is None else int(t)

    def _transfer_item(self) -> _Item | None:
        """The next queued transfer (an elite tried unchanged on a neighbouring task), admitted or None."""
        cid, task, island = self.transfers.popleft()
        src = self._task_of(cid)
        item = _Item(ask=Ask((cid,), TRANSFER, island), operator=TRANSFER, kernel=self.kernel(cid),
                     edit_kind="TRANSFER", repairs_left=0, task=task,
                     timings={} if src is None else {"transfer_from_task": float(src)})
        return self._admit(item)

    def _admit(self, item: _Item) -> _Item | None:
        """Hash cache: an identity in flight or already evaluated is not evaluated again (per task in a
        multi-task run; a kernel that failed is not tried again on any task)."""
        ident = item.kernel.identity
        if item.key() in self.in_flight:
            return self._duplicate(item)
        if item.task is None:
            # Only id and status: find_identity would also load and decode the earlier row's PTX and metrics.
            prev = self.store.query("SELECT status FROM candidates WHERE identity=? ORDER BY id LIMIT 1", (ident,))
            if prev and prev[0][0] in EVAL_STATUSES:
                return self._duplicate(item)
        else:
            prev = self.store.query("SELECT status, json_extract(features, '$.task') FROM candidates "
                                    "WHERE identity=?", (ident,))
            for status, task in prev:
                if status in EVAL_STATUSES and (status != Status.OK or (task is not None and int(task) == item.task)):
                    return self._duplicate(item)
        self.budget.candidates += 1
        return item

    def _duplicate(self, item: _Item) -> None:
        self.duplicates += 1
        self.budget.candidates += 1
        if item.operator not in (SEED, TRANSFER):
            self._reward(item.operator, 0.0)
            hook = getattr(self.operators.get(item.operator), "duplicate", None)
            if hook is not None:  # e.g. the LLM operator counts answers that repeat an evaluated kernel
                hook(item.kernel)
        return None

    def _reward(self, name: str, reward: float) -> None:
        if name in self.selector.counts:
            self.selector.update(name, reward)

    def _submit(self, item: _Item, pool: Any) -> None:
        self.in_flight.add(item.key())
        self.budget.evaluations += 1
        item.future = pool.submit(_timed_evaluate, self.evaluator, item.kernel, self._shapes(item))
        self.pending.append(item)

    def _shapes(self, item: _Item) -> tuple[tuple[int, ...], ...] | None:
        """The shapes ``item`` is evaluated on: its task's, or None (the evaluator's own) without tasks."""
        return None if item.task is None or self.tasks is None else self.tasks[item.task].shapes

    def _seed_items(self) -> list[_Item]:
        seeds = list(self.workload.seeds())
        if not seeds:
            raise ValueError(f"workload {getattr(self.workload, 'name', '?')!r} has no seeds")
        if self.tasks is None:
            return [_Item(ask=Ask((), SEED), operator=SEED, kernel=k) for k in seeds]
        return [_Item(ask=Ask((), SEED), operator=SEED, kernel=k, task=t.index) for k in seeds for t in self.tasks]

    # ------------------------------------------------------------------------------------------ telling
    def _tell(self, item: _Item, result: EvalResult, pool: Any) -> None:
        self.in_flight.discard(item.key())
        timings = {**item.timings, "evaluate": result.eval_seconds}
        if item.task is not None:
            result.features = {**result.features, TASK_FEATURE: float(item.task)}
        with self.store.transaction() as tx:
            row = CandidateRow.from_eval(item.kernel, result, timings=timings, island=item.ask.island)
            cid = tx.add_candidate(row)
            self._remember(cid, item.kernel, result)
            status = str(result.status)
            self.statuses[status] += 1
            self._count_evaluator_crash(result)
            valid = result.status == Status.OK and result.objective is not None
            added, cell = "invalid", None
            if valid:
                task_best = self._task_best(item.task)
                submit = getattr(self.evaluator, "submit_verdict", None)
                res = self.archive.add(cid, float(result.objective), result.features, pending=submit is not None)
                added, cell = res.status, res.cell
                if res.added:  # joins this transaction
                    self.store.update_candidate(cid, cell=[int(c) for c in cell])
                    if submit is not None:  # a sanitizer verdict before the elite counts (pending till then)
                        submit(cid, item.kernel)
                        if (res.displaced is not None and self.archive.is_pending(res.displaced)
                                and self._withdraw_verdict(res.displaced)):
                            self.withdrawn.add(res.displaced)
                    # A new best of its task is "good on one task": try it on the neighbouring tasks.
                    if (item.task is not None and self.tasks is not None
                            and (task_best is None or float(result.objective) > task_best)):
                        self.transfers.extend((cid, t, item.ask.island) for t in self.tasks.transfer_targets(item.task))
            self._apply_verdicts()
            told = Told(item.ask, cid, valid, result.objective if valid else None, dict(result.features), added,
                        cell)
            self.algorithm.tell(told)
            improved = told.improved
            if item.operator not in (SEED, TRANSFER):
                self._reward(item.operator, operator_reward(valid, improved,
                                                            validity=self.settings.reward_validity,
                                                            improvement=self.settings.reward_improvement))
            kind = "SEED" if item.operator == SEED else item.edit_kind
            if item.operator != TRANSFER:
                self._lesson(item.operator, kind, status, improved, result.reason, candidate_id=cid)
            op = self.operators.get(item.operator)
            self._reflect(op, item, result, cid)
            if (op is not None and not valid and result.status in REPAIRABLE and item.repairs_left > 0
                    and hasattr(op, "repair") and not self.budget.exhausted(in_flight=0)):
                self._repair(op, item, result, cid, pool)
            self.tells_since_checkpoint += 1
            self._maybe_snapshot()
            if self.tells_since_checkpoint >= self.settings.checkpoint_every:
                self._checkpoint(tx)
        self._after_commit()

    def _count_evaluator_crash(self, result: EvalResult) -> None:
        """Count evaluations in a row on which the evaluator raised (``_timed_evaluate``); at
        ``settings.max_evaluator_crashes`` set ``halted``, so the run stops with that reason instead of spending
        its budget on crash rows (a resumed run starts counting afresh)."""
        if result.status == Status.CRASH and (result.reason or "").startswith(EVALUATOR_RAISED):
            self.evaluator_crashes += 1
        else:
            self.evaluator_crashes = 0
        limit = self.settings.max_evaluator_crashes
        if limit and self.evaluator_crashes >= limit and not self.halted:
            self.halted = (f"the evaluator raised on {self.evaluator_crashes} evaluations in a row "
                           f"(engine.max_evaluator_crashes={limit}), the last: {result.reason[:400]}")
            log.error("stopping: %s", self.halted)

    def _apply_verdicts(self, wait: bool = False, timeout: float | None = None) -> int:
        """Apply the evaluator's finished elite verdicts (compute-sanitizer): a failed one takes the elite out of
        the archive, brings back the elite it displaced (asking its verdict again when it had been withdrawn) and
        turns its row's status into the verdict's; the others are confirmed, and the pending candidates they had
        displaced are owed no verdict any more. Returns how many verdicts it asked again. Call inside a store
        transaction."""
        collect = getattr(self.evaluator, "collect_verdicts", None)
        if collect is None:
            return 0
        asked = 0
        for cid, v in collect(wait=wait, timeout=timeout):
            self.withdrawn.discard(cid)  # a withdrawal that came too late: its verdict counts as any other
            self.verdicts[str(v.status)] += 1
            if v.status == Status.SKIPPED:
                # No verdict (the tool could not run): the elite stays, marked so that nothing reads it as checked.
                self.store.update_candidate(int(cid), reason=f"{UNVERIFIED}: sanitizer verdict skipped: {v.reason}")
                if self.verdicts[str(v.status)] <= 3:
                    log.warning("candidate %s has no sanitizer verdict (it stays an elite, unverified): %s",
                                cid, v.reason)
            if v.status == Status.SANITIZER:
                back = self.archive.reject(cid)
                self.store.update_candidate(int(cid), status=str(v.status), reason=v.reason, cell=None)
                self.statuses[str(Status.OK)] -= 1
                self.statuses[str(v.status)] += 1
                log.info("candidate %s rejected by compute-sanitizer: %s", cid, v.reason)
                if back is not None and back.candidate_id in self.withdrawn:  # an elite again: its verdict is owed
                    self.withdrawn.discard(back.candidate_id)
                    self.evaluator.submit_verdict(back.candidate_id, self.kernel(back.candidate_id))
                    asked += 1
            else:
                for gone in self.archive.confirm(cid):  # displaced for good: no verdict is owed them
                    if gone in self.withdrawn:
                        self.withdrawn.discard(gone)
                    else:
                        self._withdraw_verdict(gone)
        return asked

    def _withdraw_verdict(self, cid: Any) -> bool:
        """Withdraw the queued verdict of ``cid`` when the evaluator can (``withdraw_verdict``; else, or once its
        batch has started, it still comes and is applied as usual). True when withdrawn."""
        withdraw = getattr(self.evaluator, "withdraw_verdict", None)
        done = bool(withdraw is not None and withdraw(cid))
        self.verdicts_withdrawn += done
        return done

    def _after_commit(self) -> None:
        if self._committed and self.lessons is not None:
            self.lessons.sync_knowledge()
        self._committed = False

    def _checkpoint(self, tx: Any) -> None:
        if self.lessons is not None:
            self.lessons.flush(tx)
        tx.save_checkpoint(CHECKPOINT, self.state_dict())
        self.tells_since_checkpoint = 0
        self._committed = True

    def _reflect(self, op: Any, item: _Item, result: EvalResult, cid: CandidateId) -> None:
        if op is None or not hasattr(op, "reflect"):
            return
        try:
            line = op.reflect(item.kernel, result, self._context(item.ask, cid))
        except Exception as e:
            log.warning("operator %s raised while reflecting: %s", item.operator, e)
            return
        if line and self.lessons is not None and hasattr(self.lessons, "note"):
            self.lessons.note(str(line), source=f"{item.operator}.reflect", operator=item.operator,
                              edit_kind=item.edit_kind, candidate_id=cid, model=getattr(op, "last_model", None))

    def _repair(self, op: Any, item: _Item, result: EvalResult, cid: CandidateId, pool: Any) -> None:
        ctx = self._context(item.ask, cid)
        ctx.failure = (item.kernel, result)
        t0 = time.perf_counter()
        try:
            script = op.repair(item.kernel, result, ctx, self.rng)
        except NoProposal as e:
            self._failure_row(item.kernel, item.operator, str(getattr(e, "status", "no_proposal")), f"repair: {e}",
                              island=item.ask.island, lesson=bool(getattr(e, "lesson", True)))
            return
        except Exception as e:
            log.warning("operator %s raised while repairing: %s", item.operator, e)
            self._failure_row(item.kernel, item.operator, "operator_error", f"repair: {_short_exc(e)}",
                              island=item.ask.island)
            return
        if script is None:
            return
        t1 = time.perf_counter()
        text = script.to_text() if hasattr(script, "to_text") else str(script)
        try:
            child = self._apply(item.kernel, script, item.operator)
        except Exception as e:
            self._failure_row(item.kernel, item.operator, "apply_error", f"repair: {_short_exc(e)}",
                              edit_text=text, island=item.ask.island)
            return
        fixed = _Item(ask=item.ask, operator=item.operator, kernel=child, edit_kind=script_kind(script),
                      repairs_left=item.repairs_left - 1, repair_of=cid, task=item.task,
                      timings={"propose": t1 - t0, "apply": time.perf_counter() - t1})
        if self._admit(fixed) is not None:
            self._submit(fixed, pool)

    # ------------------------------------------------------------------------------------------ metrics
    def snapshot(self) -> Snapshot:
        """Current metrics (see Snapshot)."""
        st = self.archive.stats()
        evaluated = self.evaluated
        ok = self.statuses.get(str(Status.OK), 0)
        secs = max((self._search_end or time.monotonic()) - self._session_start, 1e-9)
        return Snapshot(
            evaluations=evaluated,
            candidates=self.budget.candidates, valid_rate=ok / evaluated if evaluated else 0.0, best=st.best,
            qd_score=st.qd_score, coverage=st.coverage, n_elites=st.n_elites,
            evals_per_s=(self.budget.evaluations - self._session_evals0) / secs, seconds=self.budget.seconds,
            statuses=dict(self.statuses), duplicates=self.duplicates,
            operator_rewards={a: self.selector.mean(a) for a in self.selector.arms},
            tasks=task_stats(self.archive, self.tasks) if self.tasks is not None else {},
            host_seconds={k: round(v, 3) for k, v in self.host_seconds.items()},
            disabled=self.disabled_operators(),
            verdicts=({**self.verdicts, "pending": sum(self.archive.elite_of(c) is not None
                                                        for c in self.archive.pending)}
                      if getattr(self.evaluator, "submit_verdict", None) is not None else {}))

    @property
    def evaluated(self) -> int:
        """Evaluations told so far (rows with an evaluator status)."""
        return sum(n for s, n in self.statuses.items() if s in EVAL_STATUSES)

    def _maybe_snapshot(self) -> None:
        if self.on_snapshot is None:
            return
        done = self.evaluated
        # At the first evaluation, then at every multiple of log_every (tells come one evaluation at a time), so
        # the snapshot logged "at 10 evaluations" holds evaluation 10's state.
        if self.last_logged < 0 or (done != self.last_logged and done % self.settings.log_every == 0):
            self.last_logged = done
            self.on_snapshot(self.snapshot())

    # --------------------------------------------------------------------------------------------- run
    def run(self) -> Snapshot:
        """Run until the budget is spent and every submitted candidate is told; returns the final Snapshot.

        NoParent (from the algorithm) when no seed could be told. Evaluator exceptions become ``crash`` rows.
        """
        capacity = max(1, int(self.settings.capacity))
        # One evaluation at a time gains nothing from a thread and would pay a thread hand-off per candidate.
        executor = _InlineExecutor() if capacity == 1 else ThreadPoolExecutor(max_workers=capacity,
                                                                              thread_name_prefix="evaluate")
        with executor as pool:
            # Items restored from a checkpoint were proposed but never told: evaluate them again, in order.
            restored, self.pending = list(self.pending), deque()
            for it in restored:
                self.in_flight.add(it.key())
                it.future = pool.submit(_timed_evaluate, self.evaluator, it.kernel, self._shapes(it))
                self.pending.append(it)
            if not self.seeds_queued:
                self.seeds_queued = True
                for it in self._seed_items():
                    self.budget.candidates += 1
                    self._submit(it, pool)
            ahead = max(0, int(self.settings.ahead)) if self.compile_executor is not None else 0
            for st in self.staged:  # restored from a checkpoint: instantiate again
                if st.prep is None:
                    self._prepare(st, _parse_script(st.script_text))
            while True:
                t_refill = time.perf_counter()
                if ahead:
                    while (len(self.pending) + len(self.staged) < capacity + ahead and not self.budget.exhausted()
                           and not self.halted):
                        try:
                            st = self._propose(staged=True)
                        except NoParent:
                            if not self.pending and not self.staged:
                                raise
                            break
                        if st is not None:
                            self.staged.append(st)  # type: ignore[arg-type]
                        elif self._all_switched_off():
                            break
                while len(self.pending) < capacity and not self.budget.exhausted() and not self.halted:
                    if self.transfers:
                        item = self._transfer_item()
                        if item is not None:
                            self._submit(item, pool)
                        continue
                    if self.staged:
                        item = self._build(self.staged.popleft())
                        if item is not None:
                            self._submit(item, pool)
                        continue
                    if ahead:
                        break  # the next proposals are staged on the next pass
                    try:
                        item = self._propose()
                    except NoParent:
                        if not self.pending:
                            raise
                        break
                    if item is not None:
                        self._submit(item, pool)  # type: ignore[arg-type]
                    elif self._all_switched_off():
                        break
                self.host_seconds["refill"] += time.perf_counter() - t_refill
                if not self.pending:
                    if ahead and self.staged and not self.budget.exhausted():
                        continue
                    if self.tells_since_checkpoint:
                        with self.store.transaction() as tx:
                            self._checkpoint(tx)
                        self._after_commit()
                    if self.budget.exhausted() or self.halted:
                        break
                    continue
                if self.settings.ordered:
                    item = self.pending.popleft()
                else:
                    done, _ = wait([it.future for it in self.pending], return_when=FIRST_COMPLETED)
                    item = next(it for it in self.pending if it.future in done)
                    self.pending.remove(item)
                t_wait = time.perf_counter()
                result = item.future.result()
                t_tell = time.perf_counter()
                self.host_seconds["wait_evaluation"] += t_tell - t_wait
                self._tell(item, result, pool)
                self.host_seconds["tell"] += time.perf_counter() - t_tell
        self._search_end = time.monotonic()
        if getattr(self.evaluator, "submit_verdict", None) is not None:
            with self.store.transaction() as tx:  # every elite's verdict is in before the run reports
                deadline = time.monotonic() + float(self.settings.verdict_wait_s)
                # a failed verdict can bring back a withdrawn elite, whose verdict is then asked: wait for it too
                while (self._apply_verdicts(wait=True, timeout=max(0.0, deadline - time.monotonic()))
                       and time.monotonic() < deadline):
                    pass
                self.host_seconds["verdict_wait"] += time.monotonic() - self._search_end
                self._checkpoint(tx)
            if self.verdicts_withdrawn:
                log.info("%d elite verdicts withdrawn: displaced before their sanitizer batch started",
                         self.verdicts_withdrawn)
            self._after_commit()
        final = self.snapshot()
        if self.on_snapshot is not None:
            self.last_logged = -1
            self.on_snapshot(final)
        return final


class _InlineExecutor:
    """``concurrent.futures`` executor that runs each call at once in the calling thread (capacity 1)."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args))
        except BaseException as e:
            fut.set_exception(e)
        return fut

    def __enter__(self) -> _InlineExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _timed_evaluate(evaluator: Any, kernel: Kernel, shapes: Any = None) -> EvalResult:
    """Evaluate on a worker thread (on ``shapes`` when given: a task's); an exception becomes a ``crash``
    result rather than ending the run."""
    t0 = time.perf_counter()
    try:
        res = evaluator.evaluate(kernel) if shapes is None else evaluator.evaluate(kernel, shapes=list(shapes))
    except Exception as e:
        res = EvalResult(status=Status.CRASH, reason=f"{EVALUATOR_RAISED} {_short_exc(e)}")
        log.debug("evaluator raised:\n%s", traceback.format_exc())
    if not res.eval_seconds:
        res.eval_seconds = time.perf_counter() - t0
    return res


def _parse_script(text: str) -> Any:
    from population.edit_script import parse_edit_script

    return parse_edit_script(text)


def _short_exc(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:2000]
