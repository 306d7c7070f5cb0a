"""The run store: one SQLite file (WAL mode) per run holding every candidate, checkpoints and run metadata.

Tables (schema version ``SCHEMA_VERSION``, kept in ``PRAGMA user_version`` and checked on open):

- ``candidates``: one row per candidate, failed or not (see ``CandidateRow`` for the columns).
- ``checkpoints``: name -> JSON state (archive, RNG, bandit, algorithm...) and the highest candidate id the
  state covers.
- ``meta``: key -> JSON value (config, versions, GPU, workload).
- ``lesson_events`` / ``lesson_notes``: the lessons memory of this run (written by ``archive.lessons``).

Crash model. Every write is a SQLite transaction; ``record_batch(rows, checkpoint)`` (or ``with
store.transaction() as tx``) commits candidate rows, lesson events and the checkpoint that covers them
atomically. SQLite's WAL makes a commit all-or-nothing, so a process killed at any instant (kill -9, OOM)
leaves the file at the last committed transaction: whole batches only, and a checkpoint whose
``last_candidate_id`` equals the highest row id written with it. With the default ``synchronous=NORMAL`` a
commit survives a process crash; after an OS crash or power loss the last few commits may be lost (never
half-applied). Pass ``synchronous="FULL"`` to make each commit durable across power loss too, at a cost per
commit. Rows written outside ``record_batch`` after the last checkpoint are "ahead" of it; resume code that
wants exact replay should use ``rows_after_checkpoint(name)`` to see (or ``truncate_after`` to drop) them.

Concurrency: one ``Store`` object may be shared by threads (a lock serialises its one connection): the engine
thread writes, tracker/reporting threads read. Other processes can read the file at the same time (WAL
readers never block the writer).

Identity dedup: ``find_identity(hash)`` returns the earliest row with that identity, so an engine can reuse
the earlier result instead of evaluating the same kernel twice.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
# How an ok row's reason begins when its elite has no compute-sanitizer verdict (the tool gave none): the engine
# writes it, the export reads it (archive.export.unverified).
UNVERIFIED = "unverified"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS candidates (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    identity TEXT NOT NULL,
    parents TEXT NOT NULL DEFAULT '[]',
    parent_ids TEXT NOT NULL DEFAULT '[]',
    operator TEXT NOT NULL DEFAULT '',
    edit_text TEXT NOT NULL DEFAULT '',
    entry TEXT NOT NULL DEFAULT '',
    ptx TEXT NOT NULL DEFAULT '',
    launch TEXT NOT NULL DEFAULT '{}',
    status TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    objective REAL,
    metrics TEXT NOT NULL DEFAULT '{}',
    features TEXT NOT NULL DEFAULT '{}',
    cell TEXT,
    timings TEXT NOT NULL DEFAULT '{}',
    eval_seconds REAL NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    island INTEGER,
    generation INTEGER,
    cubin BLOB
);
CREATE INDEX IF NOT EXISTS candidates_identity ON candidates(identity, id);
CREATE INDEX IF NOT EXISTS candidates_status ON candidates(status);
CREATE TABLE IF NOT EXISTS checkpoints (
    name TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    last_candidate_id INTEGER NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS lesson_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    operator TEXT NOT NULL,
    edit_kind TEXT NOT NULL,
    status TEXT NOT NULL,
    improved INTEGER NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    candidate_id INTEGER,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS lesson_notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    text TEXT NOT NULL,
    source TEXT NOT NULL,
    operator TEXT,
    edit_kind TEXT,
    candidate_id INTEGER,
    created REAL NOT NULL
);
"""


class StoreError(RuntimeError):
    """The store file cannot be used (wrong schema version, not a ptxforge store, unknown row)."""


_JSON_COLS = {"parents", "parent_ids", "launch", "metrics", "features", "cell", "timings"}


@dataclass
class CandidateRow:
    """One candidate as stored.

    id: row id (None before insertion; assigned in insertion order); identity: ``Kernel.identity`` (64 hex);
    parents: parent identities (``Kernel.parents``); parent_ids: parent row ids (filled from ``parents`` on
    insert when empty and the parents are in the store); operator / edit_text: what made it;
    entry: the ``.entry`` name; ptx: the module text; launch: ``LaunchConfig.to_json()``;
    status: ``evaluators.types.Status`` value (or a pre-evaluation status such as ``"apply_error"``);
    reason: why it failed ("" when ok); objective: None unless ok; metrics: ``EvalResult.to_json()`` minus the
    columns above (shapes with µs and GB/s, resources, occupancy, traffic bytes, estimate flag, extra);
    features: descriptor values; cell: archive cell index when it entered the archive, else None;
    timings: seconds per phase (e.g. propose, apply, compile, evaluate); eval_seconds: evaluator wall seconds;
    created: UNIX wall time of the insert; island / generation: set by island and generational algorithms;
    cubin: compiled bytes when the evaluator kept them.
    """

    identity: str
    status: str
    parents: list[str] = field(default_factory=list)
    parent_ids: list[int] = field(default_factory=list)
    operator: str = ""
    edit_text: str = ""
    entry: str = ""
    ptx: str = ""
    launch: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    objective: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    features: dict[str, float] = field(default_factory=dict)
    cell: list[int] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    eval_seconds: float = 0.0
    created: float = 0.0
    island: int | None = None
    generation: int | None = None
    cubin: bytes | None = None
    id: int | None = None

    @classmethod
    def from_eval(cls, kernel: Any, result: Any, *, cell: Sequence[int] | None = None,
                  timings: Mapping[str, float] | None = None, island: int | None = None,
                  generation: int | None = None, cubin: bytes | None = None) -> CandidateRow:
        """A row from a ``population.kernel.Kernel`` and its ``evaluators.types.EvalResult``."""
        metrics = result.to_json()
        for k in ("status", "reason", "objective", "features", "eval_seconds"):
            metrics.pop(k, None)
        return cls(identity=kernel.identity, status=str(result.status), parents=list(kernel.parents),
                   operator=kernel.operator, edit_text=kernel.edit_text, entry=kernel.entry, ptx=kernel.ptx,
                   launch=kernel.launch.to_json(), reason=result.reason, objective=result.objective,
                   metrics=metrics, features=dict(result.features),
                   cell=None if cell is None else [int(c) for c in cell], timings=dict(timings or {}),
                   eval_seconds=float(result.eval_seconds), island=island, generation=generation, cubin=cubin)

    @classmethod
    def from_failure(cls, kernel: Any, status: str, reason: str, **kw: Any) -> CandidateRow:
        """A row for a candidate that never reached the evaluator (``"apply_error"``, ``"no_proposal"``...)."""
        return cls(identity=kernel.identity, status=status, reason=reason, parents=list(kernel.parents),
                   operator=kernel.operator, edit_text=kernel.edit_text, entry=kernel.entry, ptx=kernel.ptx,
                   launch=kernel.launch.to_json(), **kw)

    def to_eval_result(self) -> Any:
        """Rebuild the ``EvalResult`` (for dedup: reuse an earlier evaluation of the same identity)."""
        from evaluators.types import EvalResult, Occupancy, ResourceUsage, ShapeResult, Status

        m = self.metrics
        shapes = [ShapeResult(**{**s, "shape": tuple(s["shape"])}) for s in m.get("shapes", [])]
        return EvalResult(
            status=Status(self.status), reason=self.reason, objective=self.objective, shapes=shapes,
            resources=ResourceUsage(**m["resources"]) if m.get("resources") else None,
            occupancy=Occupancy(**m["occupancy"]) if m.get("occupancy") else None,
            traffic_bytes=m.get("traffic_bytes"), features=dict(self.features), estimate=bool(m.get("estimate")),
            measured_dram_bytes=m.get("measured_dram_bytes"), eval_seconds=self.eval_seconds,
            extra=dict(m.get("extra", {})))

    def kernel(self) -> Any:
        """Rebuild the ``Kernel`` (parses ``ptx`` with ``population.parser.parse_module``)."""
        from population.kernel import Kernel, LaunchConfig
        from population.parser import parse_module

        return Kernel(module=parse_module(self.ptx, filename=f"candidate#{self.id}"), entry=self.entry,
                      launch=LaunchConfig.from_json(self.launch) if self.launch else LaunchConfig(),
                      parents=tuple(self.parents), operator=self.operator, edit_text=self.edit_text)


_COLUMNS = [f.name for f in fields(CandidateRow) if f.name != "id"]
_LIGHT = [c for c in _COLUMNS if c not in ("ptx", "cubin")]


def _to_sql(column: str, value: Any) -> Any:
    """A column value as stored: JSON text for the ``_JSON_COLS``, as is otherwise."""
    return json.dumps(value, sort_keys=True) if column in _JSON_COLS else value


def _row_from_sql(r: sqlite3.Row) -> CandidateRow:
    kw: dict[str, Any] = {}
    for k in r.keys():
        v = r[k]
        kw[k] = json.loads(v) if k in _JSON_COLS and v is not None else v
    return CandidateRow(**kw)


@dataclass(frozen=True)
class Checkpoint:
    """A saved state: name, the JSON state, the highest candidate row id it covers, UNIX time written."""

    name: str
    state: dict[str, Any]
    last_candidate_id: int
    created: float


class Transaction:
    """Writes inside one SQLite transaction (from ``Store.transaction()``); all commit together or none."""

    def __init__(self, store: Store, conn: sqlite3.Connection) -> None:
        self._store = store
        self.conn = conn

    def add_candidate(self, row: CandidateRow) -> int:
        """Insert ``row``; sets and returns ``row.id``. Fills ``parent_ids`` from ``parents`` when empty."""
        if not row.identity:
            raise ValueError("CandidateRow.identity is empty")
        if not row.status:
            raise ValueError(f"CandidateRow {row.identity[:12]}: status is empty")
        if not row.created:
            row.created = time.time()
        if not row.parent_ids and row.parents:
            ids = [self._store._first_id(self.conn, p) for p in row.parents]
            row.parent_ids = [i for i in ids if i is not None]
        vals = [_to_sql(c, getattr(row, c)) for c in _COLUMNS]
        cur = self.conn.execute(
            f"INSERT INTO candidates ({','.join(_COLUMNS)}) VALUES ({','.join('?' * len(_COLUMNS))})", vals)
        row.id = int(cur.lastrowid)  # type: ignore[arg-type]
        return row.id

    def save_checkpoint(self, name: str, state: Mapping[str, Any]) -> int:
        """Write checkpoint ``name`` covering every row inserted so far; returns that last row id.
        TypeError when ``state`` is not JSON-serialisable."""
        last = self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM candidates").fetchone()[0]
        self.conn.execute(
            "INSERT OR REPLACE INTO checkpoints (name, state, last_candidate_id, created) VALUES (?,?,?,?)",
            (name, json.dumps(state, sort_keys=True, allow_nan=False), int(last), time.time()))
        return int(last)

    def set_meta(self, key: str, value: Any) -> None:
        """Store a JSON-able ``value`` under ``key`` in this transaction."""
        self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value)))

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """Raw SQL in this transaction (used by ``archive.lessons`` for its tables)."""
        return self.conn.execute(sql, params)


class Store:
    """A run's SQLite store (see the module docstring for tables, the crash model and threading).

    path: the database file (parents created); ``":memory:"`` for a throwaway store.
    readonly: open an existing file for reading only (StoreError if it does not exist).
    synchronous: SQLite ``PRAGMA synchronous`` level, ``"NORMAL"`` (crash-safe) or ``"FULL"`` (power-safe).
    Raises StoreError when the file has another schema version or is not a ptxforge store.
    """

    def __init__(self, path: str | Path, *, readonly: bool = False, synchronous: str = "NORMAL") -> None:
        self.path = Path(path) if str(path) != ":memory:" else None
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"Store: synchronous must be one of OFF, NORMAL, FULL, EXTRA, got {synchronous!r}")
        self._lock = threading.RLock()
        self._in_tx = False
        if self.path is None:
            uri, is_uri = ":memory:", False
        elif readonly:
            if not self.path.exists():
                raise StoreError(f"{self.path}: no such store")
            uri, is_uri = f"file:{urllib.parse.quote(str(self.path.resolve()))}?mode=ro", True
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            uri, is_uri = str(self.path), False
        self._conn = sqlite3.connect(uri, uri=is_uri, check_same_thread=False, isolation_level=None,
                                     timeout=30.0)
        self._conn.row_factory = sqlite3.Row
        self.readonly = readonly
        try:
            self._init(synchronous.upper())
        except Exception:
            self._conn.close()
            raise

    def _init(self, synchronous: str) -> None:
        c = self._conn
        where = self.path or ":memory:"
        try:
            version = c.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{where}: not a SQLite database ({e})") from e
        if self.readonly:
            if version != SCHEMA_VERSION:
                raise StoreError(f"{where}: store schema version {version}, this code reads {SCHEMA_VERSION}")
            return
        if self.path is not None:
            c.execute("PRAGMA journal_mode=WAL")
        c.execute(f"PRAGMA synchronous={synchronous}")
        c.execute("PRAGMA foreign_keys=ON")
        if version == 0 and tables - {"sqlite_sequence"}:
            raise StoreError(f"{where}: has tables {sorted(tables)} but no ptxforge schema version")
        if version not in (0, SCHEMA_VERSION):
            raise StoreError(f"{where}: store schema version {version}, this code writes {SCHEMA_VERSION}")
        with self._lock:
            c.execute("BEGIN IMMEDIATE")
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    c.execute(stmt)
            c.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            c.execute("COMMIT")

    # --------------------------------------------------------------------------------------- transactions
    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """``with store.transaction() as tx:`` — everything written through ``tx`` commits at the end of the
        block, or is rolled back if the block raises. Nested use joins the outer transaction."""
        if self.readonly:
            raise StoreError(f"{self.path}: store opened read-only")
        with self._lock:
            if self._in_tx:
                yield Transaction(self, self._conn)
                return
            self._conn.execute("BEGIN IMMEDIATE")
            self._in_tx = True
            try:
                yield Transaction(self, self._conn)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            else:
                self._conn.execute("COMMIT")
            finally:
                self._in_tx = False

    def record_batch(self, rows: Sequence[CandidateRow], checkpoint: tuple[str, Mapping[str, Any]] | None = None,
                     *, lessons: Any = None) -> list[int]:
        """Insert ``rows``, flush ``lessons`` (an ``archive.lessons.Lessons``) and write ``checkpoint`` =
        (name, state) in one transaction; then merge the lessons into their knowledge store. Returns the new
        row ids in order."""
        with self.transaction() as tx:
            ids = [tx.add_candidate(r) for r in rows]
            if lessons is not None:
                lessons.flush(tx)
            if checkpoint is not None:
                tx.save_checkpoint(checkpoint[0], checkpoint[1])
        if lessons is not None:
            lessons.sync_knowledge()  # the shared file only learns what the run store committed
        return ids

    # ---------------------------------------------------------------------------------------- candidates
    def add_candidate(self, row: CandidateRow) -> int:
        """Insert one row in its own transaction (or the open one); returns its id."""
        with self.transaction() as tx:
            return tx.add_candidate(row)

    def update_candidate(self, id: int, **values: Any) -> None:
        """Set columns of row ``id`` (e.g. ``cell=[1, 2, 0]`` once the archive placed it, or ``cubin``).
        ValueError for an unknown column, StoreError for an unknown id."""
        bad = set(values) - set(_COLUMNS)
        if bad:
            raise ValueError(f"update_candidate: unknown columns {sorted(bad)}; columns: {_COLUMNS}")
        if not values:
            return
        sets = ",".join(f"{k}=?" for k in values)
        vals = [_to_sql(k, v) for k, v in values.items()]
        with self.transaction() as tx:
            n = tx.conn.execute(f"UPDATE candidates SET {sets} WHERE id=?", [*vals, id]).rowcount
        if n == 0:
            raise StoreError(f"{self.path}: no candidate with id {id}")

    def get(self, id: int) -> CandidateRow:
        """The row with this id; StoreError when there is none."""
        with self._lock:
            r = self._conn.execute("SELECT * FROM candidates WHERE id=?", (int(id),)).fetchone()
        if r is None:
            raise StoreError(f"{self.path}: no candidate with id {id}")
        return _row_from_sql(r)

    def _first_id(self, conn: sqlite3.Connection, identity: str) -> int | None:
        r = conn.execute("SELECT id FROM candidates WHERE identity=? ORDER BY id LIMIT 1", (identity,)).fetchone()
        return None if r is None else int(r[0])

    def find_identity(self, identity: str) -> CandidateRow | None:
        """The earliest row with this kernel identity, or None: the evaluation to reuse for a duplicate."""
        with self._lock:
            r = self._conn.execute("SELECT * FROM candidates WHERE identity=? ORDER BY id LIMIT 1",
                                   (identity,)).fetchone()
        return None if r is None else _row_from_sql(r)

    def candidates(self, *, status: str | None = None, after_id: int = 0, with_ptx: bool = True,
                   limit: int | None = None) -> list[CandidateRow]:
        """Rows in id order, optionally only one status and only ids > ``after_id``. ``with_ptx=False`` skips
        the PTX and cubin columns (they come back as "" and None) for cheap scans of large runs."""
        cols = "*" if with_ptx else ",".join(["id", *_LIGHT])
        sql = f"SELECT {cols} FROM candidates WHERE id > ?"
        params: list[Any] = [after_id]
        if status is not None:
            sql += " AND status = ?"
            params.append(status)
        sql += " ORDER BY id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        with self._lock:
            return [_row_from_sql(r) for r in self._conn.execute(sql, params).fetchall()]

    def count(self, status: str | None = None) -> int:
        """Number of rows (with this status when given)."""
        with self._lock:
            if status is None:
                return int(self._conn.execute("SELECT COUNT(*) FROM candidates").fetchone()[0])
            return int(self._conn.execute("SELECT COUNT(*) FROM candidates WHERE status=?",
                                          (status,)).fetchone()[0])

    def status_counts(self) -> dict[str, int]:
        """Rows per status."""
        with self._lock:
            return {r[0]: int(r[1]) for r in
                    self._conn.execute("SELECT status, COUNT(*) FROM candidates GROUP BY status ORDER BY status")}

    def best(self) -> CandidateRow | None:
        """The ok row with the highest objective (earliest on ties), None when no row is ok."""
        with self._lock:
            r = self._conn.execute("SELECT * FROM candidates WHERE status='ok' AND objective IS NOT NULL "
                                   "ORDER BY objective DESC, id ASC LIMIT 1").fetchone()
        return None if r is None else _row_from_sql(r)

    def last_id(self) -> int:
        """Highest row id (0 for an empty store)."""
        with self._lock:
            return int(self._conn.execute("SELECT COALESCE(MAX(id), 0) FROM candidates").fetchone()[0])

    # --------------------------------------------------------------------------------------- checkpoints
    def save_checkpoint(self, name: str, state: Mapping[str, Any]) -> int:
        """Write checkpoint ``name`` (replacing an older one) covering all rows so far; returns that row id."""
        with self.transaction() as tx:
            return tx.save_checkpoint(name, state)

    def checkpoint(self, name: str) -> Checkpoint | None:
        """The checkpoint called ``name`` with its coverage, or None."""
        with self._lock:
            r = self._conn.execute("SELECT * FROM checkpoints WHERE name=?", (name,)).fetchone()
        if r is None:
            return None
        return Checkpoint(r["name"], json.loads(r["state"]), int(r["last_candidate_id"]), float(r["created"]))

    def load_checkpoint(self, name: str) -> dict[str, Any] | None:
        """The state saved as ``name``, or None when there is no such checkpoint."""
        cp = self.checkpoint(name)
        return None if cp is None else cp.state

    def checkpoint_names(self) -> list[str]:
        """Names of all saved checkpoints, sorted."""
        with self._lock:
            return [r[0] for r in self._conn.execute("SELECT name FROM checkpoints ORDER BY name")]

    def rows_after_checkpoint(self, name: str) -> list[CandidateRow]:
        """Rows written after checkpoint ``name`` (all rows when it does not exist)."""
        cp = self.checkpoint(name)
        return self.candidates(after_id=0 if cp is None else cp.last_candidate_id)

    def truncate_after(self, last_id: int) -> int:
        """Delete candidate rows with id > ``last_id`` and their lesson events (resume to an exact checkpoint);
        returns how many candidate rows were deleted. Ids are not reused (AUTOINCREMENT)."""
        with self.transaction() as tx:
            tx.conn.execute("DELETE FROM lesson_events WHERE candidate_id > ?", (last_id,))
            tx.conn.execute("DELETE FROM lesson_notes WHERE candidate_id > ?", (last_id,))
            return tx.conn.execute("DELETE FROM candidates WHERE id > ?", (last_id,)).rowcount

    # ---------------------------------------------------------------------------------------------- meta
    def set_meta(self, key: str, value: Any) -> None:
        """Store a JSON-able value under ``key`` (config, versions, gpu, workload...)."""
        with self.transaction() as tx:
            tx.set_meta(key, value)

    def get_meta(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key``, or ``default``."""
        with self._lock:
            r = self._conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return default if r is None else json.loads(r[0])

    def meta(self) -> dict[str, Any]:
        """All metadata as a dict."""
        with self._lock:
            return {r[0]: json.loads(r[1]) for r in self._conn.execute("SELECT key, value FROM meta ORDER BY key")}

    # ---------------------------------------------------------------------------------------------- misc
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Read-only SQL for reports (``archive.lessons`` aggregates through it)."""
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def close(self) -> None:
        """Close the connection; committed transactions are on disk (see the crash model)."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
