"""Replay a recorded run's whole candidate sequence through the replay evaluator and check that it rebuilds the
run's archive exactly (the final checkpoint's elites: cell, candidate, objective, descriptors, insertion order).

    python experiments/replay_archive.py experiments/data/rmsnorm_random_s1.sqlite.xz

Every row is rebuilt as a Kernel from its stored PTX and launch (so its identity is recomputed), evaluated by
``evaluators.replay.ReplayEvaluator`` over the same store, and offered to a fresh ``GridArchive`` with the run's
dimensions in the run's order. Exit status 0 when the archives are equal, 1 otherwise (the differences printed).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from archive.grid import GridArchive
from evaluators.recorded import open_store
from evaluators.replay import ReplayEvaluator
from workloads.registry import get_workload


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    with open_store(args.store) as st:
        rows = st.candidates()
        config = st.get_meta("config")
        cp = st.load_checkpoint("engine")
    if cp is None:
        print(f"{args.store}: no engine checkpoint to compare with")
        return 1
    wl = get_workload(config["workload"]["name"], **config["workload"]["options"])
    ev = ReplayEvaluator(wl, [args.store])
    recorded = GridArchive.from_state(cp["archive"])
    archive = GridArchive(recorded.dims, qd_offset=recorded.qd_offset)
    mismatched = 0
    for row in rows:
        k = row.kernel()
        r = ev.evaluate(k)
        if k.identity != row.identity or r.status != row.status or r.objective != row.objective:
            mismatched += 1
        if r.ok and r.objective is not None:
            archive.add(row.id, r.objective, r.features)
    got = {e.cell: (e.candidate_id, e.objective, e.features, e.added) for e in archive.elites()}
    want = {e.cell: (e.candidate_id, e.objective, e.features, e.added) for e in recorded.elites()}
    same = got == want
    print(f"{Path(args.store).name}: {len(rows)} candidates replayed in {time.perf_counter() - t0:.0f} s "
          f"({ev.stats()['recorded']} from the record, {ev.stats()['surrogate']} by the surrogate, {mismatched} "
          f"results differing from their rows); archive: {len(got)} elites rebuilt, {len(want)} recorded: "
          f"{'IDENTICAL' if same else 'DIFFERENT'}")
    for cell in sorted(set(got) | set(want)):
        if got.get(cell) != want.get(cell):
            print(f"  cell {cell}: replayed {got.get(cell)}, recorded {want.get(cell)}")
    return 0 if same and not mismatched else 1


if __name__ == "__main__":
    raise SystemExit(main())
