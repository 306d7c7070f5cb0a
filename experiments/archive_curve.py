"""QD score, coverage and best objective of a run after its first e evaluations, rebuilt from its store: for runs
that left only a store (recorded GPU runs: ``experiments/data/*.sqlite.xz``), so that two runs of unequal length
can be compared at the same evaluation count, and a run on the GPU against one on ``evaluator=replay``.

    python experiments/archive_curve.py experiments/data/rmsnorm_gate5_map_elites_s0.sqlite.xz \
        experiments/data/rmsnorm_gate5_random_s1.sqlite.xz --at 100,291,540 [--json out.json]

Method: the store's evaluated candidates (every row, in id order: the order the engine told them) are offered,
in that order, to a fresh ``archive.grid.GridArchive`` with the run's own dimensions and QD offset (from its final
engine checkpoint); an ok row with an objective enters as the engine would have entered it (``GridArchive.add``).
After the e-th row: ``compute_stats`` of the archive (QD score = sum of elite objectives minus the offset,
coverage = elites / cells, best = the best elite's objective). The rebuild ignores verdicts that arrive after
insertion (an elite a sanitizer later rejected stays in): the runs recorded so far had none (their final archive
equals the rebuilt one, checked by ``rebuilt_equals_checkpoint``). Objectives are the store's own, so two runs
compare on one scale only when they took their objective against the same reference (for a geomean speedup over a
per-shape constant reference and QD offset 0, which algorithm ranks first does not depend on the reference).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from archive.grid import GridArchive
from archive.store import StoreError
from evaluators.recorded import open_store, run_name


@dataclass
class CurvePoint:
    """The archive after ``evaluations`` evaluations: QD score, coverage (0-1), best objective (None: no
    elite yet), elites."""

    evaluations: int
    qd_score: float
    coverage: float
    best: float | None
    n_elites: int


def store_file(store: str | Path) -> Path:
    """``store`` itself, or the ``store.sqlite`` of the run dir ``store`` names. FileNotFoundError for a directory
    without one."""
    path = Path(store)
    if path.is_dir():
        if not (path / "store.sqlite").is_file():
            raise FileNotFoundError(f"{store}: a directory without store.sqlite (give a run dir or a store file)")
        return path / "store.sqlite"
    return path


def archive_curve(store: str | Path, at: Sequence[int]) -> tuple[list[CurvePoint], GridArchive, dict[str, Any]]:
    """(one ``CurvePoint`` per count in ``at`` (sorted; a count beyond the run's length gives the final
    archive at the run's length), the final rebuilt archive, the store's engine checkpoint).

    ``store``: a store file or a run dir holding ``store.sqlite``. Raises FileNotFoundError for a missing store,
    ValueError when the store has no engine checkpoint (the dimensions are unknown) or ``at`` holds a count < 1."""
    marks = sorted({int(e) for e in at})
    if not marks or marks[0] < 1:
        raise ValueError(f"archive_curve: evaluation counts must be >= 1, got {list(at)}")
    store = store_file(store)
    with open_store(store) as st:
        rows = st.candidates(with_ptx=False)
        cp = st.load_checkpoint("engine")
    if cp is None:
        raise ValueError(f"{store}: no engine checkpoint, so the archive's dimensions are unknown")
    recorded = GridArchive.from_state(cp["archive"])
    archive = GridArchive(recorded.dims, qd_offset=recorded.qd_offset)
    out: list[CurvePoint] = []

    def point(e: int) -> CurvePoint:
        s = archive.stats()
        return CurvePoint(e, s.qd_score, s.coverage, s.best, s.n_elites)

    pending = list(marks)
    for i, row in enumerate(rows, start=1):
        if row.status == "ok" and row.objective is not None:
            archive.add(row.id, row.objective, row.features)
        while pending and pending[0] == i:
            out.append(point(pending.pop(0)))
    out.extend(point(len(rows)) for _ in pending)
    return out, archive, cp


def rebuilt_equals_checkpoint(archive: GridArchive, checkpoint: dict[str, Any]) -> bool:
    """True when the rebuilt archive holds the checkpoint's elites (cell, candidate, objective)."""
    recorded = GridArchive.from_state(checkpoint["archive"])
    key = lambda a: {e.cell: (e.candidate_id, e.objective) for e in a.elites()}  # noqa: E731
    return key(archive) == key(recorded)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stores", nargs="+", help="run stores (.sqlite or .sqlite.xz) or run dirs")
    ap.add_argument("--at", required=True, type=lambda s: [int(x) for x in s.split(",") if x],
                    help="evaluation counts, comma-separated")
    ap.add_argument("--json", type=Path, default=None, help="also write the points as JSON here")
    args = ap.parse_args(argv)
    report: dict[str, Any] = {}
    for s in args.stores:
        try:
            pts, archive, cp = archive_curve(s, args.at)
        except (FileNotFoundError, ValueError, StoreError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        path = store_file(s)
        name = run_name(path) if path.name != "store.sqlite" else path.resolve().parent.name
        same = rebuilt_equals_checkpoint(archive, cp)
        report[name] = {"store": str(s), "rebuilt_equals_checkpoint": same,
                        "points": [vars(p) for p in pts]}
        print(f"{name}: final archive {'equals' if same else 'DIFFERS FROM'} the checkpoint's")
        for asked, p in zip(sorted(set(args.at)), pts):
            if asked > p.evaluations:
                print(f"  after {asked:5d} evaluations: the run ended after {p.evaluations}")
                continue
            best = "-" if p.best is None else f"{p.best:.4f}"
            print(f"  after {p.evaluations:5d} evaluations: best {best}  QD {p.qd_score:.3f}  "
                  f"coverage {100 * p.coverage:.1f}%  elites {p.n_elites}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
