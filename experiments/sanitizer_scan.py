"""Run one compute-sanitizer tool over the elites of a recorded run, kernel by kernel, and print what each costs:
the process's wall seconds, the seconds it held the GPU's timing lock, the launch that held it longest, and the
verdict. Finds the kernels whose verdict would stall a search's timed launches (a launch under the tool that
holds the lock for tens of seconds). GPU machine only.

    python3 experiments/sanitizer_scan.py STORE [--tool racecheck] [--from-id 1] [--jobs 6] [--budget-s 240]
    python3 experiments/sanitizer_scan.py experiments/data/racecheck_slow_r50.json.gz --timeout-s 300

STORE: a run store (.sqlite / .sqlite.xz), or a ``.json.gz`` kernel list ({"kernels": [{id, operator, entry,
ptx, launch}]}, as experiments/data/racecheck_slow_r50.json.gz) whose kernels are all scanned.

Elites: the candidates that took a cell's best objective when they arrived, in id order (the ones a search
submits for a verdict), the newest first. ``--timeout-s`` is per tool process (default 90: longer is itself
the finding).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def elites(store, from_id: int) -> list:
    """(candidate row, its arrival as elite) for every candidate that improved its cell, id >= from_id."""
    best: dict[str, float] = {}
    out = []
    for row in store.candidates(status="ok"):
        if row.cell is None or row.objective is None:
            continue
        key = str(row.cell)
        if row.objective > best.get(key, float("-inf")):
            best[key] = row.objective
            if row.id >= from_id:
                out.append(row)
    return out


def listed(path: str) -> list:
    """The kernels of a ``.json.gz`` list, as rows with ``id``, ``operator`` and ``kernel()``."""
    import gzip
    import json
    from types import SimpleNamespace

    from population.kernel import Kernel, LaunchConfig
    from population.parser import parse_module

    with gzip.open(path, "rt") as f:
        entries = json.load(f)["kernels"]

    def row(e):
        return SimpleNamespace(id=e["id"], operator=e.get("operator", ""), kernel=lambda: Kernel(
            module=parse_module(e["ptx"], filename=f"{path}#{e['id']}"), entry=e["entry"],
            launch=LaunchConfig.from_json(e["launch"])))

    return [row(e) for e in entries]


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    from evaluators.gpu import sanitizer
    from evaluators.recorded import open_store
    from workloads.rmsnorm import RMSNorm

    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("store")
    ap.add_argument("--tool", default="racecheck", choices=sanitizer.ELITE_TOOLS)
    ap.add_argument("--from-id", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=6, help="tool processes at once (no timed launches meanwhile)")
    ap.add_argument("--budget-s", type=float, default=240.0, help="no new kernel is started after this")
    ap.add_argument("--timeout-s", type=float, default=90.0)
    a = ap.parse_args(argv)
    if sanitizer.find_sanitizer() is None:
        print("compute-sanitizer not found")
        return 2
    wl = RMSNorm("bf16")
    if a.store.endswith(".json.gz"):
        rows = listed(a.store)
    else:
        with open_store(a.store) as st:
            rows = elites(st, a.from_id)[::-1]
    runs: dict[int, list] = {}
    real, local = sanitizer.run_tool, threading.local()

    def capture(*args, **kw):  # each thread's tool runs, for their lock seconds
        r = real(*args, **kw)
        local.runs.append(r)
        return r

    sanitizer.run_tool = capture

    def one(row):
        local.runs = []
        t0 = time.perf_counter()
        v = sanitizer.sanitize([row.kernel()], wl, arch="sm_90", tools=(a.tool,), timed_shapes=wl.search_shapes,
                               timeout_s=a.timeout_s, device="0")[0]
        return row, v, time.perf_counter() - t0, local.runs

    table = Table(title=f"{a.tool} over {len(rows)} elites of {a.store} (newest first)")
    for c in ("id", "operator", "verdict", "wall s", "lock s", "longest launch"):
        table.add_column(c)
    t_start = time.perf_counter()
    todo = list(rows)
    with ThreadPoolExecutor(a.jobs) as ex:
        futs = set()
        while todo or futs:
            while todo and len(futs) < a.jobs and time.perf_counter() - t_start < a.budget_s:
                futs.add(ex.submit(one, todo.pop(0)))
            if not futs:
                break
            done, futs = wait(futs, return_when=FIRST_COMPLETED)
            for f in done:
                row, v, secs, mine = f.result()
                lock = sum(r.lock_seconds or 0.0 for r in mine)
                longest = max((r.longest for r in mine if r.longest), key=lambda d: d["s"], default=None)
                print(f"{row.id} {row.operator} {v.status.value} {v.reason[:80]!r} {secs:.1f} s lock {lock:.2f} "
                      f"longest {longest}", flush=True)
                table.add_row(str(row.id), row.operator, f"{v.status.value} {v.reason[:60]}", f"{secs:.1f}",
                              f"{lock:.2f}", "" if longest is None else f"{longest['s']:.2f} s at {longest['shape']}")
                runs[row.id] = mine
    Console(width=160).print(table)
    print(f"{len(runs)} of {len(rows)} elites scanned in {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
