"""A prompt/response cache in SQLite, so a resumed (or repeated, same-seed) run does not pay twice.

The key is ``ChatRequest.key(model)``: SHA-256 over the model id, messages, sampling parameters, seed and
grammar. A request without a seed at temperature > 0 is not cached, because two such calls are meant to differ.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

from evolve.llm.base import ChatRequest, Completion, LLMBackend, Usage

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    request TEXT NOT NULL,
    completion TEXT NOT NULL,
    created REAL NOT NULL
)
"""


class ResponseCache:
    """SQLite (WAL) map from request hash to Completion. ``path`` is created with its parent directory;
    ``":memory:"`` keeps it in memory. Thread-safe (one connection behind a lock)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(_SCHEMA)
        self._db.commit()
        self._lock = threading.Lock()

    def get(self, key: str) -> Completion | None:
        """The cached completion for ``key`` or None. It is marked ``cached=True`` and keeps the original call's
        tokens, seconds and cost, so cost-based rewards are the same on a resumed run (``Usage`` skips it)."""
        with self._lock:
            row = self._db.execute("SELECT completion FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        c = Completion.from_json(json.loads(row[0]))
        c.cached = True
        return c

    def put(self, key: str, request: ChatRequest, completion: Completion) -> None:
        """Store ``completion`` under ``key`` (replacing any earlier one), committed at once."""
        stored = Completion.from_json(completion.to_json())
        stored.cached = False
        req = json.dumps({"messages": [[m.role, m.content] for m in request.messages],
                          "seed": request.seed, "grammar": request.grammar is not None})
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)",
                             (key, completion.model, req, json.dumps(stored.to_json()), time.time()))
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


class CachedBackend:
    """Wraps a backend with a ResponseCache: a hit returns the stored completion without calling the model.

    ``usage`` counts this wrapper's requests (hits included, at zero cost); ``inner.usage`` only real calls."""

    def __init__(self, inner: LLMBackend, cache: ResponseCache) -> None:
        self.inner = inner
        self.cache = cache
        self.model = inner.model
        self.usage = Usage()

    def chat(self, request: ChatRequest) -> Completion:
        cacheable = request.seed is not None or request.temperature == 0
        key = request.key(self.model)
        hit = self.cache.get(key) if cacheable else None
        if hit is not None:
            self.usage.add(hit)
            return hit
        c = self.inner.chat(request)
        if cacheable:
            self.cache.put(key, request, c)
        self.usage.add(c)
        return c
