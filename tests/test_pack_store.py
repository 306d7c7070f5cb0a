"""scripts/pack_store.py: the recorded-data packer keeps every row, drops the cubins, and refuses a non-store."""

from __future__ import annotations

import gzip
import lzma
import sqlite3
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "pack_store.py"


def test_pack_drops_cubins_and_keeps_rows(tmp_path):
    src = tmp_path / "store.sqlite"
    con = sqlite3.connect(src)
    con.execute("PRAGMA journal_mode=WAL")  # rows still in the WAL must be packed too
    con.execute("CREATE TABLE candidates (id INTEGER PRIMARY KEY, status TEXT, ptx TEXT, cubin BLOB)")
    con.executemany("INSERT INTO candidates (status, ptx, cubin) VALUES (?, ?, ?)",
                    [("ok", ".entry a", b"\x7fELF" * 4096), ("wrong_result", ".entry b", b"\x7fELF" * 4096),
                     ("ok", ".entry c", None)])
    con.commit()  # left open: the WAL is not checkpointed into the main file
    out = tmp_path / "packed.sqlite.xz"
    run = subprocess.run([sys.executable, str(SCRIPT), str(src), str(out)], capture_output=True, text=True)
    con.close()
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("candidates 3, ok 2: ")
    plain = tmp_path / "plain.sqlite"
    plain.write_bytes(lzma.decompress(out.read_bytes()))  # xz by default
    rows = sqlite3.connect(plain).execute("SELECT status, ptx, cubin FROM candidates ORDER BY id").fetchall()
    assert rows == [("ok", ".entry a", None), ("wrong_result", ".entry b", None), ("ok", ".entry c", None)]


def test_pack_writes_gzip_for_a_gz_name_and_open_store_reads_both(tmp_path):
    from evaluators.recorded import open_store, run_name

    src = tmp_path / "store.sqlite"
    from archive.store import Store

    with Store(src):
        pass
    for name in ("run_a.sqlite.gz", "run_b.sqlite.xz"):
        out = tmp_path / name
        run = subprocess.run([sys.executable, str(SCRIPT), str(src), str(out)], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        opener = gzip.open if name.endswith(".gz") else lzma.open
        with opener(out, "rb") as f:
            assert f.read(16) == b"SQLite format 3\x00"
        with open_store(out) as st:
            assert st.count() == 0
        assert run_name(out) == name.split(".")[0]


def test_pack_refuses_a_file_that_is_not_a_store(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("not sqlite")
    run = subprocess.run([sys.executable, str(SCRIPT), str(bad), str(tmp_path / "o.gz")], capture_output=True,
                         text=True)
    assert run.returncode == 1 and "not a readable store" in run.stderr
