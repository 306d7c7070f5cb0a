"""The lessons memory: what the search has learned about which edits help or fail, for prompts and reports.

Per (operator, edit kind) it counts proposals by how far they got (``StageCounts``: proposed, applied,
compiled, passed the gate, improved the archive), keeps the commonest failure reasons (normalised: line
numbers, register names and numbers stripped, see ``normalise_reason``), recent ptxas and gate failure
messages, and free-text lessons (a critic role's one-liners) with their source.

How far a status got (``STAGE_OF_STATUS``): ``no_proposal``/``operator_error``/``parse_error``/``apply_error``
-> proposed only;
``compile_error``/``skipped`` -> applied; ``load_error``, ``launch_error``, ``timeout``, ``crash``,
``wrong_result``, ``nondeterministic``, ``too_fast_to_be_true`` -> compiled; ``ok`` -> passed the gate, and
``improved=True`` (the child entered the archive) -> improved.

Persistence: events are buffered by ``record``/``note`` and written by ``flush(tx)`` into the run store's
``lesson_events``/``lesson_notes`` tables, ideally in the same transaction as the candidate rows and checkpoint
(``Store.record_batch(rows, checkpoint, lessons=lessons)`` does this, then calls ``sync_knowledge()``). A
resumed run rebuilds its counts from the store. With a ``KnowledgeStore`` the deltas are also merged into the
cross-run file after the run store committed, and the knowledge of earlier runs (same workload family and GPU)
is the prior that ``summary``/``top_lines`` add to this run's counts.

LLM-written text is data: every note and reason is passed through ``sanitize_text`` (control characters and
PTX comment markers ``//``, ``/*``, ``*/`` removed, whitespace collapsed, length capped) before it is stored,
so nothing a model wrote reaches the next prompt as PTX comments or escape sequences.
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from archive.knowledge import STAGES, KnowledgeStore, Note, StageCounts, knowledge_gpu_key

STAGE_OF_STATUS: dict[str, int] = {
    "no_proposal": 0, "operator_error": 0, "parse_error": 0, "apply_error": 0,
    "compile_error": 1, "skipped": 1,
    "load_error": 2, "launch_error": 2, "timeout": 2, "crash": 2, "wrong_result": 2, "nondeterministic": 2,
    "too_fast_to_be_true": 2,
    "ok": 3,
}
"""Index into ``STAGES`` of the last stage a candidate with this status passed (0 = only proposed)."""

GATE_FAILURES = frozenset(s for s, i in STAGE_OF_STATUS.items() if i == 2)
MAX_NOTE_CHARS = 200
MAX_REASON_CHARS = 160
MIN_SAMPLES = 3  # fewer proposals than this say nothing about an edit kind


def sanitize_text(text: str, max_chars: int = MAX_NOTE_CHARS) -> str:
    """Make model- or tool-written text safe to put into a prompt: control and format characters and PTX
    comment markers (``//``, ``/*``, ``*/``) removed, whitespace collapsed to single spaces, cut to
    ``max_chars`` characters (ending in ``...`` when cut)."""
    s = "".join(" " if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch for ch in str(text))
    while True:
        t = s.replace("//", " ").replace("/*", " ").replace("*/", " ")
        if t == s:
            break
        s = t
    s = " ".join(s.split())
    if len(s) > max_chars:
        s = s[: max_chars - 3].rstrip() + "..."
    return s


_FIRST_ERROR = re.compile(r"(?i)\b(error|fatal)\b")
_LOCATION = re.compile(r"\S*\.(?:ptx|cu|cubin)\b(?:[:,]\s*(?:line\s*)?\d+)*(?::\d+)*")
_LINE_WORD = re.compile(r"(?i)\b(line|lines|column|col)\s*\d+(?:\s*-\s*\d+)?")
_REGISTER = re.compile(r"%[A-Za-z_][A-Za-z_]*\d+\b")
_HEX = re.compile(r"\b0[xX][0-9a-fA-F]+\b")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\b")


def normalise_reason(text: str) -> str:
    """A failure message reduced to its kind, so that equal causes count together.

    Takes the first line that mentions ``error``/``fatal`` (else the first non-empty line), then replaces
    file locations with ``<file>``, ``line 42`` with ``line N``, registers (``%rd12``) with ``%reg``, hex and
    decimal numbers with ``N`` (``sm_90`` and ``.v4`` keep their digits), and sanitises (``sanitize_text``).
    """
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    if not lines:
        return ""
    first = next((ln for ln in lines if _FIRST_ERROR.search(ln)), lines[0])
    s = _LOCATION.sub("<file>", first)
    s = _LINE_WORD.sub(lambda m: f"{m.group(1).lower()} N", s)
    s = _REGISTER.sub("%reg", s)
    s = _HEX.sub("N", s)
    s = _NUMBER.sub("N", s)
    return sanitize_text(s, MAX_REASON_CHARS)


def script_kind(script: Any) -> str:
    """The edit kind of a script for the lessons memory: its sorted distinct keywords joined by ``+``
    (``"MODIFIER"``, ``"DELETE+INSERT"``). Accepts a ``population.edits.EditScript`` or its text; text that
    does not parse gives ``"UNPARSED"``, an empty script ``"NONE"``."""
    if isinstance(script, str):
        from population.edits import EditSyntaxError, parse_edit_script

        try:
            script = parse_edit_script(script)
        except (EditSyntaxError, ValueError):
            return "UNPARSED"
    kinds = sorted(set(script.kinds))
    return "+".join(kinds) if kinds else "NONE"


@dataclass
class KindSummary:
    """Counts for one (operator, edit kind): this run's plus the prior from the knowledge store, and the
    commonest failure reasons as (status, reason, count)."""

    operator: str
    edit_kind: str
    counts: StageCounts
    prior: StageCounts = field(default_factory=StageCounts)
    failures: list[tuple[str, str, int]] = field(default_factory=list)

    @property
    def total(self) -> StageCounts:
        """This run's counts plus the prior."""
        return self.counts + self.prior


class Lessons:
    """The lessons memory of one run (see the module docstring).

    store: the run ``archive.store.Store`` (None keeps everything in memory); its earlier events are loaded.
    knowledge: a shared ``KnowledgeStore`` or None; family / gpu: its key (e.g. ``"rmsnorm"``, ``"h200"``);
    run: a run name stored with notes; recent: how many recent failure messages to keep; evaluator / estimate:
    the run's evaluator kind and whether its objectives are estimates (the provenance every note carries; an
    estimating run's knowledge is kept under ``knowledge_gpu_key(gpu, True)``).
    Not thread-safe: record, note and flush from one thread (the engine's), as the engine does.
    """

    def __init__(self, store: Any = None, knowledge: KnowledgeStore | None = None, *, family: str = "",
                 gpu: str = "", run: str = "", recent: int = 20, evaluator: str | None = None,
                 estimate: bool | None = None) -> None:
        if knowledge is not None and not family:
            raise ValueError("Lessons: a knowledge store needs the workload family (family=...)")
        self.store = store
        self.knowledge = knowledge
        self.evaluator, self.estimate = evaluator, estimate
        gpu = knowledge_gpu_key(gpu, bool(estimate)) if gpu else gpu
        self.family, self.gpu, self.run = family, gpu, run
        self.counts: dict[tuple[str, str], StageCounts] = {}
        self.failures: Counter[tuple[str, str, str, str]] = Counter()
        self._failures_by_kind: dict[tuple[str, str], Counter[tuple[str, str]]] = {}
        self._version = 0  # bumped on every change; top_lines is cached per version (called per proposal)
        self._top_cache: tuple[int, int, list[str]] | None = None
        self.recent: deque[tuple[str, str, str, str]] = deque(maxlen=recent)  # (operator, kind, status, reason)
        self.notes: list[Note] = []
        self._pending_events: list[tuple[Any, ...]] = []
        self._pending_notes: list[tuple[Note, int | None]] = []
        self._k_counts: dict[tuple[str, str], StageCounts] = {}
        self._k_failures: Counter[tuple[str, str, str, str]] = Counter()
        self._k_notes: list[Note] = []
        self.prior: dict[tuple[str, str], StageCounts] = {}
        self.prior_failures: list[Any] = []
        self.prior_notes: list[Note] = []
        if store is not None:
            self._load_store()
        if knowledge is not None:
            self.prior = knowledge.counts(family, gpu)
            self.prior_failures = knowledge.failures(family, gpu, limit=recent, recent=True)
            self.prior_notes = knowledge.notes(family, gpu, limit=recent)

    # ------------------------------------------------------------------------------------------- recording
    def record(self, operator: str, edit_kind: str, status: str, improved: bool = False, reason: str = "",
               candidate_id: int | None = None) -> None:
        """Count one proposal outcome. ``status``: an ``evaluators.types.Status`` value or a pre-evaluation
        status (``STAGE_OF_STATUS`` keys); ``improved``: the child entered the archive (only with ``ok``);
        ``reason``: the failure message (normalised here). ValueError for an unknown status or improved
        without ok."""
        status = str(status)
        if status not in STAGE_OF_STATUS:
            raise ValueError(f"Lessons.record: unknown status {status!r}; known: {sorted(STAGE_OF_STATUS)}")
        if improved and status != "ok":
            raise ValueError(f"Lessons.record: improved=True with status {status!r}")
        norm = normalise_reason(reason) if status != "ok" else ""
        self._count(operator, edit_kind, status, bool(improved), norm)
        self._k_add(operator, edit_kind, status, bool(improved), norm)
        self._pending_events.append((operator, edit_kind, status, int(bool(improved)), norm, candidate_id,
                                     time.time()))

    def note(self, text: str, source: str, operator: str | None = None, edit_kind: str | None = None,
             candidate_id: int | None = None, model: str | None = None) -> str:
        """Keep a free-text lesson (e.g. the critic's one-liner) from ``source``, written by ``model`` (None for
        a rule); returns the sanitised text actually stored ("" texts are dropped). The note carries this
        run's provenance (run, evaluator, estimate)."""
        clean = sanitize_text(text)
        if not clean:
            return ""
        n = Note(clean, sanitize_text(source, 60), operator, edit_kind, time.time(), self.run, model,
                 self.evaluator, self.estimate)
        self.notes.append(n)
        self._version += 1
        self._k_notes.append(n)
        self._pending_notes.append((n, candidate_id))
        return clean

    def _count(self, operator: str, kind: str, status: str, improved: bool, reason: str) -> None:
        c = self.counts.setdefault((operator, kind), StageCounts())
        _bump(c, STAGE_OF_STATUS[status], improved)
        self._version += 1
        if status != "ok":
            self.failures[(operator, kind, status, reason)] += 1
            self._failures_by_kind.setdefault((operator, kind), Counter())[(status, reason)] += 1
            if status == "compile_error" or status in GATE_FAILURES:
                self.recent.append((operator, kind, status, reason))

    def _k_add(self, operator: str, kind: str, status: str, improved: bool, reason: str) -> None:
        if self.knowledge is None:
            return
        _bump(self._k_counts.setdefault((operator, kind), StageCounts()), STAGE_OF_STATUS[status], improved)
        if status != "ok":
            self._k_failures[(operator, kind, status, reason)] += 1

    # ----------------------------------------------------------------------------------------- persistence
    def flush(self, tx: Any = None) -> int:
        """Write buffered events and notes to the run store, inside ``tx`` (an ``archive.store.Transaction``)
        when given, else in a transaction of their own; returns the number of events written. Without a store
        the buffer is just cleared. Call ``sync_knowledge()`` after the transaction commits."""
        events, notes = self._pending_events, self._pending_notes
        self._pending_events, self._pending_notes = [], []
        if self.store is None:
            if tx is None:
                self.sync_knowledge()
            return 0
        if tx is None:
            with self.store.transaction() as own:
                self._write(own, events, notes)
            self.sync_knowledge()
        else:
            self._write(tx, events, notes)
        return len(events)

    @staticmethod
    def _write(tx: Any, events: list[tuple[Any, ...]], notes: list[tuple[Note, int | None]]) -> None:
        for ev in events:
            tx.execute("INSERT INTO lesson_events (operator, edit_kind, status, improved, reason, candidate_id,"
                       " created) VALUES (?,?,?,?,?,?,?)", ev)
        for n, cid in notes:
            tx.execute("INSERT INTO lesson_notes (text, source, operator, edit_kind, candidate_id, created)"
                       " VALUES (?,?,?,?,?,?)", (n.text, n.source, n.operator, n.edit_kind, cid, n.created))

    def sync_knowledge(self) -> None:
        """Merge the deltas since the last sync into the knowledge store (no-op without one)."""
        if self.knowledge is None or not (self._k_counts or self._k_failures or self._k_notes):
            return
        self.knowledge.merge(self.family, self.gpu, self._k_counts, self._k_failures, self._k_notes, self.run,
                             evaluator=self.evaluator, estimate=self.estimate)
        self._k_counts, self._k_failures, self._k_notes = {}, Counter(), []

    def _load_store(self) -> None:
        for r in self.store.query("SELECT operator, edit_kind, status, improved, reason FROM lesson_events"
                                  " ORDER BY id"):
            self._count(r[0], r[1], r[2], bool(r[3]), r[4])
        for r in self.store.query("SELECT text, source, operator, edit_kind, created FROM lesson_notes"
                                  " ORDER BY id"):
            self.notes.append(Note(*r, run=self.run, evaluator=self.evaluator, estimate=self.estimate))

    # --------------------------------------------------------------------------------------------- queries
    def summary(self, include_prior: bool = True, n_failures: int = 3) -> list[KindSummary]:
        """One KindSummary per (operator, edit kind) seen in this run (and in the prior when included),
        sorted by operator then kind."""
        keys = set(self.counts) | (set(self.prior) if include_prior else set())
        out = []
        for op, kind in sorted(keys):
            fails = sorted(((s, r, n) for (s, r), n in self._failures_by_kind.get((op, kind), {}).items()),
                           key=lambda x: (-x[2], x[0], x[1]))[:n_failures]
            out.append(KindSummary(op, kind, self.counts.get((op, kind), StageCounts()),
                                   self.prior.get((op, kind), StageCounts()) if include_prior else StageCounts(),
                                   fails))
        return out

    def rows(self) -> list[dict[str, Any]]:
        """``summary()`` flattened for a table (W&B, reports): operator, edit_kind, this run's five counts,
        the prior's five counts (``prior_*``), and the commonest failure as ``top_failure``."""
        out = []
        for s in self.summary():
            row: dict[str, Any] = {"operator": s.operator, "edit_kind": s.edit_kind}
            row.update({k: getattr(s.counts, k) for k in STAGES})
            row.update({f"prior_{k}": getattr(s.prior, k) for k in STAGES})
            row["top_failure"] = f"{s.failures[0][0]}: {s.failures[0][1]}" if s.failures else ""
            out.append(row)
        return out

    def top_lines(self, n: int = 8) -> list[str]:
        """Up to ``n`` short prompt lines, most useful first, interleaving: edit kinds that tend to help
        (by improvement rate), edit kinds that tend to fail (by the stage they fail at, with the commonest
        reason; then valid kinds that never improved), recent ptxas/gate failure messages, and free-text
        lessons. Counts include the prior from
        earlier runs; kinds with fewer than MIN_SAMPLES proposals are left out."""
        if self._top_cache is not None and self._top_cache[:2] == (self._version, n):
            return list(self._top_cache[2])
        out = self._top_lines(n)
        self._top_cache = (self._version, n, out)
        return list(out)

    def _top_lines(self, n: int) -> list[str]:
        helps, fails = [], []
        for s in self.summary():
            t = s.total
            if t.proposed < MIN_SAMPLES or s.operator == "seed":  # seeds are not edits
                continue
            who = f"{s.edit_kind} edits by {s.operator}"
            if t.improved:
                helps.append((t.improved / t.proposed,
                              f"helps: {who} improved {t.improved}/{t.proposed}, passed gate {t.passed}/{t.proposed}"))
            bad_stage, bad_n = max(((name, prev - cur) for name, prev, cur in
                                    zip(STAGES[1:4], (t.proposed, t.applied, t.compiled),
                                        (t.applied, t.compiled, t.passed))), key=lambda x: x[1])
            if bad_n and bad_n / t.proposed >= 0.5:
                verb = {"applied": "did not apply", "compiled": "did not compile", "passed": "failed the gate"}
                top = s.failures[0][1] if s.failures else self._prior_reason(s.operator, s.edit_kind)
                fails.append((bad_n / t.proposed, f"fails: {who} {verb[bad_stage]} {bad_n}/{t.proposed}"
                              + (f" (commonest: {top})" if top else "")))
            elif not t.improved and t.passed >= MIN_SAMPLES:  # valid but useless: ranked after real failures
                fails.append((0.25 * t.passed / t.proposed,
                              f"no gain: {who} passed the gate {t.passed}/{t.proposed} but never improved"))
        helps.sort(key=lambda x: -x[0])
        fails.sort(key=lambda x: -x[0])
        recent = [f"recent {st}: {r}" for _, _, st, r in reversed(self.recent) if r]
        if not recent:
            recent = [f"earlier {f.status}: {f.reason}" for f in self.prior_failures
                      if f.reason and f.status != "ok"]
        notes = [f"lesson ({x.source}): {x.text}" for x in [*reversed(self.notes), *self.prior_notes]]
        queues = [[line for _, line in helps], [line for _, line in fails], _dedup(recent), _dedup(notes)]
        out: list[str] = []
        while len(out) < n and any(queues):
            for q in queues:
                if q and len(out) < n:
                    out.append(sanitize_text(q.pop(0), MAX_NOTE_CHARS))
        return out

    def _prior_reason(self, operator: str, kind: str) -> str:
        for f in self.prior_failures:
            if f.operator == operator and f.edit_kind == kind:
                return f.reason
        return ""


def _bump(c: StageCounts, stage: int, improved: bool) -> None:
    for name in STAGES[: stage + 1]:
        setattr(c, name, getattr(c, name) + 1)
    if improved:
        c.improved += 1


def _dedup(lines: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    return [x for x in lines if not (x in seen or seen.add(x))]  # type: ignore[func-returns-value]
