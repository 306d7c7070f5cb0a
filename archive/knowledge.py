"""The knowledge store: what earlier runs learned, shared across runs in one SQLite file.

Keyed by workload family (e.g. ``"rmsnorm"``) and GPU (e.g. ``"h200"``), it accumulates the lessons memory of
every run that points at it (``archive.lessons.Lessons`` merges into it after each committed batch): per
operator and edit kind, how many proposals were made, applied, compiled, passed the gate and improved; failure
reasons with counts; and free-text lessons with their source. A new run reads it as its prior, so it starts from
what earlier runs learned; ``open_knowledge(None)`` (config ``knowledge=none``) disables it for clean
comparisons.

Provenance. Every free-text lesson (a note) carries the run, the model that wrote it, the evaluator and whether
the run's objectives were estimates; the ``runs`` table lists every run that merged into the file with its
model(s), evaluator, GPU and estimate flag. Counts and failure reasons of runs whose objectives are estimates
are kept under their own key (``gpu`` ``"<name> (estimate)"``, see ``knowledge_gpu_key``), so a GPU run's
prior never mixes measured and estimated outcomes. Only outcomes of evaluated candidates and critic notes are
merged; a failure of the proposal machinery (an LLM endpoint down) never reaches this file.

Schema version 2 added the provenance columns and the ``runs`` table; a version-1 file is upgraded in place
(its older notes keep empty provenance).

Several runs (a Hydra sweep) may write the same file at once: WAL mode, a 30 s busy timeout and short
additive UPSERT transactions keep concurrent merges correct. Merges happen after the run store commits, so after
a crash between the two a batch is missing from the knowledge store, never counted twice (at-most-once).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import astuple, dataclass, fields
from pathlib import Path

KNOWLEDGE_SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kinds (
    family TEXT NOT NULL, gpu TEXT NOT NULL, operator TEXT NOT NULL, edit_kind TEXT NOT NULL,
    proposed INTEGER NOT NULL DEFAULT 0, applied INTEGER NOT NULL DEFAULT 0, compiled INTEGER NOT NULL DEFAULT 0,
    passed INTEGER NOT NULL DEFAULT 0, improved INTEGER NOT NULL DEFAULT 0, updated REAL NOT NULL,
    PRIMARY KEY (family, gpu, operator, edit_kind)
);
CREATE TABLE IF NOT EXISTS failures (
    family TEXT NOT NULL, gpu TEXT NOT NULL, operator TEXT NOT NULL, edit_kind TEXT NOT NULL,
    status TEXT NOT NULL, reason TEXT NOT NULL, count INTEGER NOT NULL, last_seen REAL NOT NULL,
    PRIMARY KEY (family, gpu, operator, edit_kind, status, reason)
);
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, family TEXT NOT NULL, gpu TEXT NOT NULL, text TEXT NOT NULL,
    source TEXT NOT NULL, operator TEXT, edit_kind TEXT, run TEXT NOT NULL DEFAULT '', created REAL NOT NULL,
    model TEXT, evaluator TEXT, estimate INTEGER
);
CREATE TABLE IF NOT EXISTS runs (
    run TEXT PRIMARY KEY, family TEXT NOT NULL, gpu TEXT NOT NULL, evaluator TEXT, estimate INTEGER,
    models TEXT NOT NULL DEFAULT '', first_merge REAL NOT NULL, last_merge REAL NOT NULL
)
"""
_V1_TO_V2 = ("ALTER TABLE notes ADD COLUMN model TEXT", "ALTER TABLE notes ADD COLUMN evaluator TEXT",
             "ALTER TABLE notes ADD COLUMN estimate INTEGER")


def knowledge_gpu_key(gpu: str, estimate: bool) -> str:
    """The ``gpu`` key a run's lessons are kept under: the GPU name, or ``"<name> (estimate)"`` for a run
    whose objectives are static-model estimates."""
    return f"{gpu} (estimate)" if estimate else gpu


@dataclass
class StageCounts:
    """How far proposals of one (operator, edit kind) got: each count includes the later stages
    (proposed >= applied >= compiled >= passed >= improved)."""

    proposed: int = 0
    applied: int = 0
    compiled: int = 0
    passed: int = 0
    improved: int = 0

    def __add__(self, other: StageCounts) -> StageCounts:
        return StageCounts(*(a + b for a, b in zip(astuple(self), astuple(other))))

    def __bool__(self) -> bool:
        return any(astuple(self))


STAGES = tuple(f.name for f in fields(StageCounts))


@dataclass(frozen=True)
class Failure:
    """A normalised failure reason and how often it was seen (``last_seen``: UNIX time)."""

    operator: str
    edit_kind: str
    status: str
    reason: str
    count: int
    last_seen: float


@dataclass(frozen=True)
class Note:
    """A free-text lesson (already sanitised) and where it came from: source (e.g. ``"llm.reflect"``), the
    operator and edit kind it is about, when (UNIX seconds), and its provenance: run (run dir name), model (the
    language model that wrote it, None for rule-made notes), evaluator (``gpu`` / ``static``) and estimate
    (True when the run's objectives were estimates)."""

    text: str
    source: str
    operator: str | None = None
    edit_kind: str | None = None
    created: float = 0.0
    run: str = ""
    model: str | None = None
    evaluator: str | None = None
    estimate: bool | None = None


class KnowledgeStore:
    """The cross-run lessons file (see the module docstring). ``path``: the SQLite file (parents created).
    Raises ValueError when the file holds another schema version."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=30.0)
        c = self._conn
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=NORMAL")
        version = c.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, 1, KNOWLEDGE_SCHEMA_VERSION):
            c.close()
            raise ValueError(f"{self.path}: knowledge schema version {version}, this code uses "
                             f"{KNOWLEDGE_SCHEMA_VERSION}")
        c.execute("BEGIN IMMEDIATE")
        if version == 1:
            for stmt in _V1_TO_V2:
                c.execute(stmt)
        for stmt in _SCHEMA.split(";"):
            if stmt.strip():
                c.execute(stmt)
        c.execute(f"PRAGMA user_version={KNOWLEDGE_SCHEMA_VERSION}")
        c.execute("COMMIT")

    def merge(self, family: str, gpu: str, counts: Mapping[tuple[str, str], StageCounts],
              failures: Mapping[tuple[str, str, str, str], int], notes: list[Note], run: str = "", *,
              evaluator: str | None = None, estimate: bool | None = None) -> None:
        """Add count deltas, failure-count deltas (key: operator, edit kind, status, reason) and notes for
        (family, gpu) in one transaction, and record ``run`` (with its evaluator, estimate flag and the models
        of its notes) in the ``runs`` table."""
        now = time.time()
        models = sorted({n.model for n in notes if n.model})
        with self._lock:
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                if run:
                    old = c.execute("SELECT models FROM runs WHERE run=?", (run,)).fetchone()
                    have = set(filter(None, (old[0] if old else "").split(",")))
                    c.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(run) DO UPDATE SET"
                              " models=excluded.models, last_merge=excluded.last_merge",
                              (run, family, gpu, evaluator, None if estimate is None else int(estimate),
                               ",".join(sorted(have | set(models))), now, now))
                for (op, kind), d in counts.items():
                    if not d:
                        continue
                    c.execute(
                        "INSERT INTO kinds (family, gpu, operator, edit_kind, proposed, applied, compiled, passed,"
                        " improved, updated) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO UPDATE SET"
                        " proposed=proposed+excluded.proposed, applied=applied+excluded.applied,"
                        " compiled=compiled+excluded.compiled, passed=passed+excluded.passed,"
                        " improved=improved+excluded.improved, updated=excluded.updated",
                        (family, gpu, op, kind, *astuple(d), now))
                for (op, kind, status, reason), n in failures.items():
                    c.execute(
                        "INSERT INTO failures VALUES (?,?,?,?,?,?,?,?) ON CONFLICT DO UPDATE SET"
                        " count=count+excluded.count, last_seen=excluded.last_seen",
                        (family, gpu, op, kind, status, reason, int(n), now))
                for note in notes:
                    c.execute("INSERT INTO notes (family, gpu, text, source, operator, edit_kind, run, created,"
                              " model, evaluator, estimate) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                              (family, gpu, note.text, note.source, note.operator, note.edit_kind,
                               note.run or run, note.created or now, note.model, note.evaluator or evaluator,
                               None if (e := note.estimate if note.estimate is not None else estimate) is None
                               else int(e)))
            except BaseException:
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")

    def counts(self, family: str, gpu: str) -> dict[tuple[str, str], StageCounts]:
        """(operator, edit kind) -> accumulated StageCounts for this family and GPU."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT operator, edit_kind, {','.join(STAGES)} FROM kinds WHERE family=? AND gpu=?"
                " ORDER BY operator, edit_kind", (family, gpu)).fetchall()
        return {(r[0], r[1]): StageCounts(*r[2:]) for r in rows}

    def failures(self, family: str, gpu: str, limit: int = 20, *, recent: bool = False) -> list[Failure]:
        """Failure reasons, commonest first (or most recently seen first with ``recent=True``)."""
        order = "last_seen DESC, count DESC" if recent else "count DESC, last_seen DESC"
        with self._lock:
            rows = self._conn.execute(
                "SELECT operator, edit_kind, status, reason, count, last_seen FROM failures WHERE family=? AND"
                f" gpu=? ORDER BY {order}, reason LIMIT ?", (family, gpu, limit)).fetchall()
        return [Failure(*r) for r in rows]

    def notes(self, family: str, gpu: str, limit: int = 20) -> list[Note]:
        """Free-text lessons, most recent first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT text, source, operator, edit_kind, created, run, model, evaluator, estimate FROM notes"
                " WHERE family=? AND gpu=? ORDER BY id DESC LIMIT ?", (family, gpu, limit)).fetchall()
        return [Note(*r[:8], None if r[8] is None else bool(r[8])) for r in rows]

    def runs(self) -> list[dict[str, object]]:
        """Every run that merged into this file: run, family, gpu, evaluator, estimate, models, first_merge,
        last_merge (UNIX seconds), oldest first."""
        with self._lock:
            cur = self._conn.execute("SELECT * FROM runs ORDER BY first_merge, run")
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, r)) for r in cur.fetchall()]

    def close(self) -> None:
        """Close the connection (committed merges are already on disk)."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> KnowledgeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def default_knowledge_path() -> Path:
    """``$PTXFORGE_KNOWLEDGE``, else ``$XDG_CACHE_HOME/ptxforge/knowledge.sqlite`` (``~/.cache`` by default)."""
    env = os.environ.get("PTXFORGE_KNOWLEDGE")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "ptxforge" / "knowledge.sqlite"


def open_knowledge(path: str | Path | None) -> KnowledgeStore | None:
    """A KnowledgeStore at ``path``; None (disabled) for None, ``""``, ``"none"``, ``"null"``, ``"off"`` or
    ``"false"`` (any case); ``"default"`` for ``default_knowledge_path()``. ValueError from ``KnowledgeStore``
    when the file holds another schema version."""
    if path is None or str(path).strip().lower() in ("", "none", "null", "off", "false"):
        return None
    if str(path) == "default":
        return KnowledgeStore(default_knowledge_path())
    return KnowledgeStore(path)
