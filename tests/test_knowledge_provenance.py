"""The shared knowledge store: opt-in (off by default), provenance on every lesson, estimated and measured
outcomes kept apart, and a version-1 file upgraded in place."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hydra import compose, initialize_config_dir

from archive.knowledge import KnowledgeStore, open_knowledge
from archive.lessons import Lessons
from evolve.config import register

CONF = str(Path(__file__).resolve().parents[1] / "conf")


def test_knowledge_is_off_by_default():
    register()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=["run_dir=/tmp/x"])
    assert open_knowledge(cfg.knowledge) is None


def test_every_lesson_carries_its_provenance(tmp_path):
    k = KnowledgeStore(tmp_path / "k.sqlite")
    est = Lessons(None, k, family="rmsnorm", gpu="h200", run="run-a", evaluator="static", estimate=True)
    for _ in range(3):
        est.record("hints", "MODIFIER", "ok", improved=True)
    est.note("cache hints on x help", source="llm.reflect", operator="llm", model="smollm2")
    est.flush()
    notes = k.notes("rmsnorm", "h200 (estimate)")
    assert [(n.text, n.run, n.model, n.evaluator, n.estimate) for n in notes] == [
        ("cache hints on x help", "run-a", "smollm2", "static", True)]
    assert k.runs()[0] | {"first_merge": 0, "last_merge": 0} == {
        "run": "run-a", "family": "rmsnorm", "gpu": "h200 (estimate)", "evaluator": "static", "estimate": 1,
        "models": "smollm2", "first_merge": 0, "last_merge": 0}
    # a GPU run does not take estimated outcomes as its prior; another estimating run does
    gpu_run = Lessons(None, k, family="rmsnorm", gpu="h200", run="run-b", evaluator="gpu", estimate=False)
    assert gpu_run.prior == {} and gpu_run.prior_notes == []
    other = Lessons(None, k, family="rmsnorm", gpu="h200", run="run-c", evaluator="static", estimate=True)
    assert other.prior[("hints", "MODIFIER")].improved == 3 and other.prior_notes[0].model == "smollm2"
    k.close()


V1 = """
CREATE TABLE kinds (family TEXT NOT NULL, gpu TEXT NOT NULL, operator TEXT NOT NULL, edit_kind TEXT NOT NULL,
    proposed INTEGER NOT NULL DEFAULT 0, applied INTEGER NOT NULL DEFAULT 0, compiled INTEGER NOT NULL DEFAULT 0,
    passed INTEGER NOT NULL DEFAULT 0, improved INTEGER NOT NULL DEFAULT 0, updated REAL NOT NULL,
    PRIMARY KEY (family, gpu, operator, edit_kind));
CREATE TABLE failures (family TEXT NOT NULL, gpu TEXT NOT NULL, operator TEXT NOT NULL, edit_kind TEXT NOT NULL,
    status TEXT NOT NULL, reason TEXT NOT NULL, count INTEGER NOT NULL, last_seen REAL NOT NULL,
    PRIMARY KEY (family, gpu, operator, edit_kind, status, reason));
CREATE TABLE notes (id INTEGER PRIMARY KEY AUTOINCREMENT, family TEXT NOT NULL, gpu TEXT NOT NULL, text TEXT NOT NULL,
    source TEXT NOT NULL, operator TEXT, edit_kind TEXT, run TEXT NOT NULL DEFAULT '', created REAL NOT NULL);
INSERT INTO notes (family, gpu, text, source, run, created) VALUES ('rmsnorm', 'h200', 'old note', 'critic', 'r0', 1.0);
PRAGMA user_version=1;
"""


def test_version_1_file_is_upgraded(tmp_path):
    path = tmp_path / "k.sqlite"
    con = sqlite3.connect(path)
    con.executescript(V1)
    con.close()
    with KnowledgeStore(path) as k:
        (n,) = k.notes("rmsnorm", "h200")
        assert (n.text, n.run, n.model, n.estimate) == ("old note", "r0", None, None)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 2
