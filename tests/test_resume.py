"""kill -9 in the middle of `python -m evolve`, resume in the same run dir, and the run ends with the same
archive and the same candidate rows as an uninterrupted run (static evaluator, real ptxas, ordered tells)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from archive.store import Store
from evolve.engine import CHECKPOINT

REPO = Path(__file__).resolve().parents[1]
BUDGET = 24


def command(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "evolve", "evaluator=static", "logger=none", f"budget.evaluations={BUDGET}",
            "engine.progress=false", "engine.export=false", "knowledge=none", "seed=3", f"hydra.run.dir={run_dir}"]


def rows(path: Path) -> list[tuple]:
    with Store(path, readonly=True) as s:
        return [(r.id, r.identity, r.status, r.operator, r.edit_text, r.objective, r.parent_ids, r.cell)
                for r in s.candidates(with_ptx=False)]


def count_rows(path: Path) -> int:
    if not path.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        try:
            return int(con.execute("SELECT COUNT(*) FROM candidates").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_kill9_then_resume_equals_uninterrupted(tmp_path):
    env = {**os.environ, "WANDB_MODE": "disabled"}
    full = tmp_path / "full"
    out = subprocess.run(command(full), cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]

    cut = tmp_path / "cut"
    proc = subprocess.Popen(command(cut), cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while count_rows(cut / "store.sqlite") < 10:
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no progress within 300 s"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    killed_at = count_rows(cut / "store.sqlite")
    assert 10 <= killed_at < len(rows(full / "store.sqlite"))

    out = subprocess.run(command(cut), cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resumed from checkpoint" in out.stderr

    assert rows(cut / "store.sqlite") == rows(full / "store.sqlite")
    with Store(full / "store.sqlite", readonly=True) as a, Store(cut / "store.sqlite", readonly=True) as b:
        sa, sb = a.load_checkpoint(CHECKPOINT), b.load_checkpoint(CHECKPOINT)
        assert sa["archive"] == sb["archive"]
        assert sa["selector"] == sb["selector"] and sa["rng"] == sb["rng"]
        assert sb["budget"]["evaluations"] == BUDGET and sb["pending"] == []
