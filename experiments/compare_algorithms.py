"""Compare search algorithms run under the same budget and seeds: QD score and best objective vs evaluations,
mean and spread over seeds.

Method. Each run dir (a Hydra job of ``python -m evolve -m algorithm=...  seed=...``) holds ``summary.json``
(algorithm, seed, final numbers) and ``metrics.jsonl`` (one snapshot every ``logger.log_every`` evaluations,
plus the final one). A metric at evaluation count e is the last snapshot at or before e (a step function:
the archive only changes when a result is told). Points are fractions of the smallest final evaluation count
among the runs, so every run contributes to every point. Spread is the sample standard deviation (n - 1) over
seeds, 0 for a single seed. Objectives from the static evaluator are estimates; the summary says which.

Usage::

    python -m evolve -m experiment=compare          # 5 algorithms x 3 seeds
    python experiments/compare_algorithms.py multirun/2026-11-30/01-02-03-1234-abcd [--points 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class RunRecord:
    """One run: its dir, algorithm, seed, final summary and metric history (evaluations ascending)."""

    path: Path
    algorithm: str
    seed: int
    summary: dict[str, Any]
    history: list[dict[str, float]]

    def at(self, evaluations: int, key: str) -> float | None:
        """``key`` from the last snapshot with ``evaluations <=`` the given count (None before the first)."""
        value = None
        for h in self.history:
            if h["evaluations"] > evaluations:
                break
            if key in h:
                value = h[key]
        return value


def load_runs(paths: list[Path]) -> list[RunRecord]:
    """Every run under ``paths`` (dirs searched recursively for ``summary.json``). ValueError when none."""
    runs = []
    for root in paths:
        for summ in sorted(Path(root).rglob("summary.json")):
            d = summ.parent
            summary = json.loads(summ.read_text())
            by_eval: dict[int, dict[str, float]] = {}
            mfile = d / "metrics.jsonl"
            if mfile.exists():
                for line in mfile.read_text().splitlines():
                    if line.strip():
                        snap = json.loads(line)
                        by_eval[int(snap["evaluations"])] = snap  # a resumed run re-logs: the last one wins
            runs.append(RunRecord(d, str(summary["algorithm"]), int(summary["seed"]), summary,
                                  [by_eval[k] for k in sorted(by_eval)]))
    if not runs:
        raise ValueError(f"no run (summary.json) under {[str(p) for p in paths]}")
    return runs


def _mean_sd(xs: list[float]) -> tuple[float, float]:
    if not xs:
        return math.nan, math.nan
    return statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0


def comparison_table(runs: list[RunRecord], points: int = 4) -> list[dict[str, Any]]:
    """Rows (algorithm, evaluations, seeds, qd_mean, qd_sd, best_mean, best_sd, coverage_mean), algorithms in
    first-seen order and ``points`` evaluation counts each (see the module docstring)."""
    horizon = min(int(r.summary["evaluations"]) for r in runs)
    marks = sorted({max(1, round(horizon * (i + 1) / points)) for i in range(points)})
    algorithms = list(dict.fromkeys(r.algorithm for r in runs))
    rows = []
    for alg in algorithms:
        group = [r for r in runs if r.algorithm == alg]
        for e in marks:
            qd = [v for r in group if (v := r.at(e, "qd_score")) is not None]
            best = [v for r in group if (v := r.at(e, "best_objective")) is not None]
            cov = [v for r in group if (v := r.at(e, "coverage")) is not None]
            qm, qs = _mean_sd(qd)
            bm, bs = _mean_sd(best)
            rows.append({"algorithm": alg, "evaluations": e, "seeds": len(group),
                         "seed_list": sorted(r.seed for r in group), "qd_mean": qm, "qd_sd": qs,
                         "best_mean": bm, "best_sd": bs, "coverage_mean": statistics.fmean(cov) if cov else math.nan})
    return rows


def format_table(rows: list[dict[str, Any]], estimate: bool) -> str:
    """The rows as a fixed-width text table."""
    head = f"{'algorithm':<12} {'evals':>6} {'seeds':>5} {'QD score':>20} {'best objective':>20} {'coverage':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['algorithm']:<12} {r['evaluations']:>6} {r['seeds']:>5} "
                     f"{r['qd_mean']:>11.4g} ± {r['qd_sd']:<6.3g} {r['best_mean']:>11.4g} ± {r['best_sd']:<6.3g} "
                     f"{100 * r['coverage_mean']:>8.2f}%")
    if estimate:
        lines.append("objectives are static-evaluator ESTIMATES (no GPU measurement)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="multirun dir(s) or run dirs")
    ap.add_argument("--points", type=int, default=4, help="evaluation counts per algorithm (default 4)")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    runs = load_runs(args.paths)
    rows = comparison_table(runs, args.points)
    print(format_table(rows, any(r.summary.get("estimate") for r in runs)))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
