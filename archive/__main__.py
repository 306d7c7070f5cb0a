"""``python -m archive``: tools over a run dir.

    python -m archive lineage <run dir> [--id N] [--diff] [--json]

``lineage``: how a kernel came to be, seed -> kernel (default: the best ok candidate): per step the operator,
the edit script, the status and objective (with its change), the PTX diff (``--diff``), and for template steps
which of the parent's own edits were kept or dropped. Exit status 2 with one message for a missing run dir, a
file that is not a store, or an unknown id.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path


def lineage_main(args: argparse.Namespace) -> int:
    from archive.export import workload_from_meta
    from archive.lineage import format_lineage, lineage_report
    from archive.store import Store, StoreError

    run_dir = Path(args.run_dir)
    path = run_dir / "store.sqlite" if run_dir.is_dir() else run_dir
    if not path.exists():
        jobs = sorted(run_dir.glob("*/store.sqlite")) if run_dir.is_dir() else []
        hint = (f"; {run_dir} holds the run dirs of a sweep: give one of them, e.g. {jobs[0].parent}" if jobs
                else " (give a run dir holding store.sqlite)")
        print(f"error: {path}: no such store{hint}", file=sys.stderr)
        return 2
    try:
        store = Store(path, readonly=True)
    except (sqlite3.DatabaseError, StoreError) as e:
        print(f"error: {path} is not a ptxforge store: {e}", file=sys.stderr)
        return 2
    with store:
        meta = store.meta()
        try:
            steps = lineage_report(store, args.id, workload=workload_from_meta(meta), diff=args.diff)
        except (KeyError, ValueError) as e:
            print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(steps, indent=2, default=str))
    else:
        prov = meta.get("provenance") or {}
        estimate = bool(prov.get("estimate", meta.get("estimate")))
        print(format_lineage(steps, objective_name=objective_label(prov.get("objective"), estimate),
                             estimate=estimate))
    return 0


def objective_label(objective: object, estimate: bool) -> str:
    """The objective's name in the lineage report: a run's provenance stores ``{"baseline": ..., "definition":
    ...}`` (``evolve.app``), shown as ``speedup over <baseline>`` (``estimated`` first for an estimate); a plain
    string as is; nothing as ``objective``."""
    if isinstance(objective, dict):
        base = objective.get("baseline")
        return f"{'estimated ' if estimate else ''}speedup over {base}" if base else "objective"
    return str(objective or "objective")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m archive", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    lin = sub.add_parser("lineage", help="seed -> kernel: operator, edit script, objective, PTX diff per step")
    lin.add_argument("run_dir", help="a run dir (or its store.sqlite)")
    lin.add_argument("--id", type=int, default=None, help="candidate row id (default: the best ok candidate)")
    lin.add_argument("--diff", action="store_true", help="show the PTX diff of each step")
    lin.add_argument("--json", action="store_true", help="print the steps as JSON")
    args = ap.parse_args(argv)
    return lineage_main(args)


if __name__ == "__main__":
    sys.exit(main())
