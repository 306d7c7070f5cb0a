"""The SQLite run store: rows, identity dedup, checkpoints, schema check, threads and kill -9 consistency."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from archive.store import SCHEMA_VERSION, CandidateRow, Store, StoreError

REPO = Path(__file__).resolve().parents[1]


def row(identity: str, status: str = "ok", objective: float | None = 1.0, **kw) -> CandidateRow:
    return CandidateRow(identity=identity, status=status, objective=objective, **kw)


def test_round_trip_all_columns(tmp_path):
    with Store(tmp_path / "run.sqlite") as s:
        r = row("a" * 64, operator="hints", edit_text="MODIFIER 3 +nc", entry="k", ptx=".version 8.0\n",
                launch={"block": [256, 1, 1], "dynamic_smem_bytes": 0, "knobs": {"vec": 8}}, reason="",
                metrics={"shapes": [{"shape": [4, 8], "time_us": 3.5}]}, features={"registers": 40.0},
                cell=[1, 2, 0], timings={"compile": 0.25}, eval_seconds=1.5, island=2, generation=7,
                cubin=b"\x7fELF\x00\x01")
        rid = s.add_candidate(r)
        assert rid == 1 and r.id == 1 and r.created > 0
        got = s.get(1)
        assert got == r
        assert s.get_meta("nope", 5) == 5
        s.set_meta("gpu", {"name": "h200", "sm_count": 132})
        assert s.meta() == {"gpu": {"name": "h200", "sm_count": 132}}
        light = s.candidates(with_ptx=False)[0]
        assert light.ptx == "" and light.cubin is None and light.features == {"registers": 40.0}
        with pytest.raises(StoreError, match="no candidate with id 7"):
            s.get(7)
        s.update_candidate(1, cell=[0, 0, 0], objective=2.0)
        assert s.get(1).cell == [0, 0, 0] and s.get(1).objective == 2.0
        with pytest.raises(ValueError, match="unknown columns"):
            s.update_candidate(1, colour="red")
    conn = sqlite3.connect(tmp_path / "run.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_identity_dedup_and_parent_ids(tmp_path):
    s = Store(tmp_path / "run.sqlite")
    s.add_candidate(row("seed", objective=1.0))
    s.add_candidate(row("child", parents=["seed"], objective=1.5))
    s.add_candidate(row("child", status="skipped", objective=None, reason="duplicate of #2"))
    assert s.find_identity("child").id == 2
    assert s.find_identity("missing") is None
    assert s.get(2).parent_ids == [1]
    assert s.count() == 3 and s.count("ok") == 2
    assert s.status_counts() == {"ok": 2, "skipped": 1}
    assert s.best().id == 2


def test_eval_result_round_trip(tmp_path):
    from evaluators.types import EvalResult, Occupancy, ResourceUsage, ShapeResult, Status

    res = EvalResult(status=Status.OK, objective=1.25,
                     shapes=[ShapeResult(shape=(1000, 4096), dtype="bf16", time_us=12.5, gbps=1310.0,
                                         speedups={"torch": 1.25}, baseline_us={"torch": 15.625})],
                     resources=ResourceUsage(entry="k", arch="sm_90", registers=40),
                     occupancy=Occupancy(6, 48, 64, 0.75, "registers"), traffic_bytes=1.6e7,
                     features={"registers": 40.0}, eval_seconds=0.5, extra={"note": 1})
    r = CandidateRow(identity="x", status=str(res.status), objective=res.objective, features=res.features,
                     eval_seconds=res.eval_seconds,
                     metrics={k: v for k, v in res.to_json().items()
                              if k not in ("status", "reason", "objective", "features", "eval_seconds")})
    s = Store(tmp_path / "r.sqlite")
    s.add_candidate(r)
    assert s.get(1).to_eval_result() == res


def test_checkpoint_covers_rows_in_same_transaction(tmp_path):
    s = Store(tmp_path / "run.sqlite")
    ids = s.record_batch([row("a"), row("b")], ("latest", {"n": 2, "rng": [1, 2, 3]}))
    assert ids == [1, 2]
    cp = s.checkpoint("latest")
    assert cp.state == {"n": 2, "rng": [1, 2, 3]} and cp.last_candidate_id == 2
    s.add_candidate(row("c"))
    assert [r.identity for r in s.rows_after_checkpoint("latest")] == ["c"]
    assert s.truncate_after(cp.last_candidate_id) == 1
    assert s.count() == 2
    assert s.add_candidate(row("d")) == 4  # ids are never reused
    # a failing block rolls back rows and checkpoint together
    with pytest.raises(RuntimeError), s.transaction() as tx:
        tx.add_candidate(row("e"))
        tx.save_checkpoint("latest", {"n": 99})
        raise RuntimeError("boom")
    assert s.count() == 3 and s.load_checkpoint("latest") == {"n": 2, "rng": [1, 2, 3]}
    with pytest.raises(ValueError):
        s.save_checkpoint("bad", {"x": float("nan")})
    assert s.load_checkpoint("missing") is None


def test_schema_version_checked(tmp_path):
    p = tmp_path / "run.sqlite"
    Store(p).close()
    conn = sqlite3.connect(p)
    conn.execute("PRAGMA user_version=99")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="schema version 99"):
        Store(p)
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="no ptxforge schema version"):
        Store(other)
    with pytest.raises(StoreError, match="no such store"):
        Store(tmp_path / "absent.sqlite", readonly=True)


def test_one_writer_many_reader_threads(tmp_path):
    s = Store(tmp_path / "run.sqlite")
    stop = threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []

    def reader():
        try:
            while not stop.is_set():
                rows = s.candidates(with_ptx=False)
                assert [r.id for r in rows] == list(range(1, len(rows) + 1))
                seen.append(len(rows))
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(50):
        s.record_batch([row(f"id{i}a"), row(f"id{i}b")], ("latest", {"n": 2 * i + 2}))
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert s.count() == 100 and s.load_checkpoint("latest") == {"n": 100}
    # another process-level reader sees the same committed state
    ro = Store(tmp_path / "run.sqlite", readonly=True)
    assert ro.count() == 100


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {repo!r})
    from archive.grid import Dimension, GridArchive
    from archive.lessons import Lessons
    from archive.store import CandidateRow, Store
    s = Store(sys.argv[1])
    batch = int(sys.argv[2])
    lessons = Lessons(s)
    archive = GridArchive([Dimension("x", tuple(range(0, 11)))])
    n = 0
    while True:
        rows = [CandidateRow(identity=f"k{{n + j}}", status="ok", objective=float(n + j), ptx="x" * 4000,
                             features={{"x": (n + j) % 10 + 0.5}}) for j in range(batch)]
        n += batch
        with s.transaction() as tx:
            for r in rows:
                tx.add_candidate(r)
                archive.add(r.id, r.objective, r.features)
                lessons.record("op", "MODIFIER", "ok", improved=True, candidate_id=r.id)
            lessons.flush(tx)
            tx.save_checkpoint("latest", {{"n": n, "archive": archive.state_dict()}})
        if n == batch * 3:
            print("started", flush=True)
""")


def test_kill_minus_9_leaves_whole_batches(tmp_path):
    from archive.grid import GridArchive
    from archive.lessons import Lessons

    path = tmp_path / "run.sqlite"
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(repo=str(REPO)))
    batch = 7
    for delay in (0.05, 0.3):
        proc = subprocess.Popen([sys.executable, str(script), str(path), str(batch)], stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout.readline().strip() == "started"
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        s = Store(path)
        n = s.count()
        cp = s.checkpoint("latest")
        assert n >= 3 * batch and n % batch == 0
        assert cp.last_candidate_id == s.last_id() == cp.state["n"] == n
        rows = s.candidates(after_id=n - batch)
        assert [r.objective for r in rows] == [float(i) for i in range(n - batch, n)]
        # the archive state and the lessons memory describe exactly the committed rows
        archive = GridArchive.from_state(cp.state["archive"])
        assert sorted(e.candidate_id for e in archive.elites()) == list(range(n - 9, n + 1))
        assert archive.best().objective == float(n - 1)
        lessons = Lessons(s)
        assert lessons.counts[("op", "MODIFIER")].proposed == n == lessons.counts[("op", "MODIFIER")].improved
        s.close()
        path.unlink()
        for suffix in ("-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)


def test_kernel_round_trip_through_the_store(tmp_path):
    from evaluators.types import EvalResult, Status
    from workloads.registry import get_workload

    seed = get_workload("rmsnorm").seeds()[1]
    s = Store(tmp_path / "run.sqlite")
    cid = s.add_candidate(CandidateRow.from_eval(seed, EvalResult(status=Status.COMPILE_ERROR, reason="x"),
                                                 timings={"compile": 0.5}))
    back = s.get(cid).kernel()
    assert back.identity == seed.identity and back.launch == seed.launch and back.entry == seed.entry
    assert s.find_identity(seed.identity).id == cid
    assert s.get(cid).to_eval_result() == EvalResult(status=Status.COMPILE_ERROR, reason="x")
