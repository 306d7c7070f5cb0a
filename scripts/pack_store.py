"""Pack a run's store for the repo's recorded data: a consistent copy (WAL included) with the ``cubin`` column
emptied (ptxas rebuilds a cubin from the stored PTX), vacuumed and compressed with xz (preset 9e: the stores are
mostly PTX text that repeats across candidates, and xz's 64 MiB window packs a 44 MB store into ~0.8 MB where
gzip's 32 KiB window left 9 MB; the device machine's 64 MiB transfer carries the repo's recorded stores).

Usage: ``python scripts/pack_store.py <run>/store.sqlite <out>.sqlite.xz``; prints the candidate and ok counts.
A ``<out>`` ending in ``.gz`` is written with gzip instead. Exit status 1 (with a message) when the store cannot
be read.
"""

from __future__ import annotations

import gzip
import lzma
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path


def pack(src: str, dst: str) -> tuple[int, int]:
    """Write ``dst`` (xz, or gzip for a ``.gz`` name, of a cubin-less copy of the SQLite store ``src``); returns
    (candidates, ok). sqlite3.Error when ``src`` cannot be read."""
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "store.sqlite"
        s, d = sqlite3.connect(src), sqlite3.connect(plain)
        try:
            s.backup(d)
            d.execute("UPDATE candidates SET cubin = NULL")
            d.commit()
            d.execute("VACUUM")
            n, ok = d.execute("SELECT count(*), coalesce(sum(status = 'ok'), 0) FROM candidates").fetchone()
        finally:
            s.close()
            d.close()
        packed = (gzip.open(dst, "wb", compresslevel=9) if str(dst).endswith(".gz")
                  else lzma.open(dst, "wb", preset=9 | lzma.PRESET_EXTREME))
        with open(plain, "rb") as f, packed as g:
            shutil.copyfileobj(f, g)
    return int(n), int(ok)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        n, ok = pack(sys.argv[1], sys.argv[2])
    except sqlite3.Error as e:
        sys.exit(f"{sys.argv[1]}: not a readable store ({e})")
    print(f"candidates {n}, ok {ok}: {sys.argv[2]} ({Path(sys.argv[2]).stat().st_size} bytes)")
