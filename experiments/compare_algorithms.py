"""Compare search algorithms run under the same budget and seeds: per algorithm and metric (QD score, coverage,
best objective) at fixed evaluation counts, the mean, median and a 95% bootstrap confidence interval over seeds,
pairwise Mann-Whitney U tests with Holm's correction, and plots of each metric against evaluations with bands.

Method.
- Runs: every run dir under the given paths (a Hydra job of ``python -m evolve -m algorithm=... seed=...``) that
  holds ``metrics.jsonl`` (one ``Snapshot.flat()`` at the first evaluation and at every multiple of
  ``logger.log_every``, plus the final one) and ``summary.json`` (written when a run ends). A run without
  ``summary.json``, or whose last snapshot is short of its evaluation budget, is *partial* (killed or still
  running): it is reported and left out (``--include-partial`` keeps it up to the evaluations it reached).
- Pooling: runs are only compared when they share workload, budget, evaluator, hardware, gate version,
  objective definition and static-model version (``evolve.runinfo.POOL_KEYS``, read from ``summary.json``'s
  ``provenance`` or the store's meta). Runs that differ are refused with the differing key and values unless
  ``--pool-anyway``.
- Seeds: an algorithm missing a seed that another algorithm has is warned about; two runs of one algorithm with
  the same seed are warned about and only the one that reached more evaluations is kept.
- A metric at evaluation count e is the snapshot logged at e (the engine logs at multiples of ``log_every``);
  when a run has no snapshot exactly at e the last one before e is used and the lag is warned about. The
  default evaluation counts are ``--points`` evenly spaced multiples of the runs' common ``log_every`` up to the
  smallest budget (so every run contributes to every count).
- Statistics per (algorithm, metric, evaluation count) over seeds: mean, median, and a 95% bootstrap CI of the
  mean (``scipy.stats.bootstrap``, BCa, 9999 resamples, seeded; the percentile method where BCa is undefined,
  e.g. all values equal). Pairwise, for each metric at each count: two-sided Mann-Whitney U
  (``scipy.stats.mannwhitneyu``), p-values adjusted with Holm's step-down method over the algorithm pairs of that
  (metric, count) (Holm 1979, Scand. J. Statist. 6:65-70), and the effect size A = U / (n1 n2) (the probability
  that a run of the first algorithm beats one of the second, Vargha and Delaney 2000). With 3 seeds per
  algorithm the smallest two-sided p-value is 0.1: more seeds are needed for significance at 0.05.
- Plots (matplotlib, PNG): per metric, the mean over seeds against evaluations with the 95% bootstrap band.
  ``--wandb`` also logs the tables and plots to a W&B run (offline unless WANDB_MODE says otherwise).
- Objectives from the static evaluator are estimates; the output says so.

Usage::

    python -m evolve -m experiment=compare          # 5 algorithms x 3 seeds
    python experiments/compare_algorithms.py multirun/2026-11-30/01-02-03-1234-abcd [--points 4] [--at 10,100]
        [--json out.json] [--plots DIR] [--wandb] [--pool-anyway] [--include-partial]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sqlite3
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from evolve.runinfo import POOL_KEYS  # noqa: E402

METRICS = (("qd_score", "QD score"), ("coverage", "coverage"), ("best_objective", "best objective"))
CONFIDENCE = 0.95
N_RESAMPLES = 9999


class PoolError(ValueError):
    """Runs that must not be compared (they differ in a ``POOL_KEYS`` entry)."""


@dataclass
class RunRecord:
    """One run: its dir, algorithm, seed, provenance, summary (None for a partial run), log interval and metric
    history (snapshots ascending by evaluations; a resumed run's re-logged snapshot replaces the earlier one)."""

    path: Path
    algorithm: str
    seed: int
    provenance: dict[str, Any]
    summary: dict[str, Any] | None
    history: list[dict[str, float]]
    log_every: int | None = None
    budget: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def reached(self) -> int:
        """Evaluations of the last snapshot (0 without one)."""
        return int(self.history[-1]["evaluations"]) if self.history else 0

    @property
    def partial(self) -> bool:
        """No summary.json: the run was killed or is still running (a run that ended writes one)."""
        return self.summary is None

    def at(self, evaluations: int, key: str) -> tuple[float | None, int | None]:
        """(``key`` from the last snapshot with ``evaluations <=`` the count, that snapshot's evaluations);
        (None, None) before the first snapshot holding ``key``."""
        value, when = None, None
        for h in self.history:
            if h["evaluations"] > evaluations:
                break
            if key in h:
                value, when = h[key], int(h["evaluations"])
        return value, when


def _store_meta(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "store.sqlite"
    if not path.exists():
        return {}
    try:
        con = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True, timeout=5)
        try:
            return {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM meta")}
        finally:
            con.close()
    except (sqlite3.Error, ValueError):
        return {}


def _provenance_from_config(config: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """Provenance of a run that predates ``evolve.runinfo`` (only what its config says; versions unknown)."""
    estimate = bool(meta.get("estimate"))
    return {"workload": config.get("workload"),
            "budget": {k: (config.get("budget") or {}).get(k) for k in ("evaluations", "seconds", "candidates")},
            "evaluator": "static" if estimate else (config.get("evaluator") or {}).get("kind"),
            "hardware": {k: (config.get("hardware") or {}).get(k) for k in ("name", "arch")},
            "gate_version": None, "objective": None, "static_model_version": None, "estimate": estimate}


def load_run(run_dir: Path) -> RunRecord | None:
    """The run in ``run_dir`` (None when it has neither metrics.jsonl nor summary.json)."""
    summ_path, mfile = run_dir / "summary.json", run_dir / "metrics.jsonl"
    if not summ_path.exists() and not mfile.exists():
        return None
    summary = json.loads(summ_path.read_text()) if summ_path.exists() else None
    meta = _store_meta(run_dir)
    config = meta.get("config") or {}
    provenance = (summary or {}).get("provenance") or meta.get("provenance") or _provenance_from_config(config, meta)
    algorithm = (summary or {}).get("algorithm") or (config.get("algorithm") or {}).get("name")
    seed = (summary or {}).get("seed", config.get("seed"))
    if algorithm is None or seed is None:
        return None
    by_eval: dict[int, dict[str, float]] = {}
    if mfile.exists():
        for line in mfile.read_text().splitlines():
            if line.strip():
                try:
                    snap = json.loads(line)
                except json.JSONDecodeError:  # a line cut by a kill: the earlier ones stand
                    continue
                by_eval[int(snap["evaluations"])] = snap
    log_every = (config.get("logger") or {}).get("log_every")
    budget = (provenance.get("budget") or {}).get("evaluations")
    return RunRecord(run_dir, str(algorithm), int(seed), provenance, summary, [by_eval[k] for k in sorted(by_eval)],
                     int(log_every) if log_every else None, int(budget) if budget else None)


def load_runs(paths: list[Path]) -> list[RunRecord]:
    """Every run under ``paths`` (searched recursively for ``metrics.jsonl`` / ``summary.json``), sorted by path.
    ValueError when none."""
    dirs: set[Path] = set()
    for root in paths:
        root = Path(root)
        if not root.exists():
            raise ValueError(f"{root}: no such directory")
        for name in ("summary.json", "metrics.jsonl"):
            dirs.update(p.parent for p in root.rglob(name))
    runs = [r for d in sorted(dirs) if (r := load_run(d)) is not None]
    if not runs:
        raise ValueError(f"no run (summary.json or metrics.jsonl) under {[str(p) for p in paths]}")
    return runs


def _canon(x: Any) -> str:
    return json.dumps(x, sort_keys=True, default=str)


def check_poolable(runs: list[RunRecord]) -> list[str]:
    """Descriptions of every ``POOL_KEYS`` entry on which the runs differ ([] when they can be pooled): the key,
    each value and how many runs (and which dirs) hold it."""
    problems = []
    for key in POOL_KEYS:
        groups: dict[str, list[RunRecord]] = {}
        for r in runs:
            groups.setdefault(_canon(r.provenance.get(key)), []).append(r)
        if len(groups) > 1:
            parts = [f"{v} in {len(g)} run(s) (e.g. {g[0].path})" for v, g in sorted(groups.items(), key=lambda kv:
                                                                                       -len(kv[1]))]
            problems.append(f"{key}: " + "; ".join(parts))
    return problems


def select_runs(runs: list[RunRecord], *, include_partial: bool = False, pool_anyway: bool = False
                ) -> tuple[list[RunRecord], list[str]]:
    """The runs to compare and the warnings about them: partial runs (left out unless ``include_partial``),
    duplicate (algorithm, seed) pairs (the run that reached more evaluations is kept), missing seeds.
    PoolError when the runs differ in a ``POOL_KEYS`` entry and not ``pool_anyway``."""
    warn: list[str] = []
    partial = [r for r in runs if r.partial]
    if partial:
        what = ", ".join(f"{r.algorithm} seed {r.seed} ({r.reached} evaluations, {r.path})" for r in partial[:8])
        more = f" and {len(partial) - 8} more" if len(partial) > 8 else ""
        verb = "kept up to the evaluations they reached" if include_partial else "left out"
        warn.append(f"{len(partial)} partial run(s) (killed or still running: no summary.json), {verb}: {what}{more}")
        if not include_partial:
            runs = [r for r in runs if not r.partial]
    if not runs:
        raise ValueError("every run is partial; use --include-partial to compare what they reached")
    problems = check_poolable(runs)
    if problems:
        text = "runs differ in what they measured, so pooling them would compare unlike things:\n  " + \
            "\n  ".join(problems)
        if not pool_anyway:
            raise PoolError(text + "\nselect one group of run dirs, or pass --pool-anyway to compare them anyway")
        warn.append("POOLED ANYWAY (--pool-anyway): " + text)
    kept: dict[tuple[str, int], RunRecord] = {}
    for r in runs:
        key = (r.algorithm, r.seed)
        if key in kept:
            other = kept[key]
            keep, drop = (r, other) if r.reached > other.reached else (other, r)
            warn.append(f"duplicate seed: {r.algorithm} seed {r.seed} in {other.path} and {r.path}; kept {keep.path} "
                        f"({keep.reached} evaluations), left out {drop.path}")
            kept[key] = keep
        else:
            kept[key] = r
    runs = sorted(kept.values(), key=lambda r: (r.algorithm, r.seed))
    all_seeds = sorted({r.seed for r in runs})
    for alg in dict.fromkeys(r.algorithm for r in runs):
        have = {r.seed for r in runs if r.algorithm == alg}
        missing = [s for s in all_seeds if s not in have]
        if missing:
            warn.append(f"missing seeds: {alg} has no run for seed(s) {missing} (others have {all_seeds})")
    return runs, warn


def evaluation_marks(runs: list[RunRecord], points: int, at: list[int] | None = None) -> list[int]:
    """The evaluation counts to report: ``at`` when given, else ``points`` counts evenly spaced up to the
    smallest evaluation count every run reached, rounded down to a multiple of the runs' common ``log_every``
    (where the engine logs a snapshot). A count below the first multiple is raised to it (30 evaluations with
    ``log_every`` 10 and 4 points: 10, 20, 30, not 8, which has no snapshot), so fewer than ``points`` counts
    may come back; only runs shorter than ``log_every`` get counts between snapshots."""
    if at:
        return sorted(set(int(x) for x in at))
    horizon = min(r.reached for r in runs)
    steps = {r.log_every for r in runs if r.log_every}
    step = math.lcm(*steps) if steps else 1
    marks = set()
    for i in range(points):
        e = horizon * (i + 1) / points
        m = int(max(e, step) // step) * step if horizon >= step else max(1, round(e))
        marks.add(min(max(1, m), horizon))
    marks.add(horizon)
    return sorted(marks)


def bootstrap_ci(values: list[float], confidence: float = CONFIDENCE, n_resamples: int = N_RESAMPLES,
                 seed: int = 0) -> tuple[float, float]:
    """(low, high) of a ``confidence`` bootstrap CI of the mean (``scipy.stats.bootstrap``, BCa; percentile
    where BCa is undefined). Equal values give (v, v); fewer than two values give (nan, nan)."""
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return math.nan, math.nan
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = stats.bootstrap((x,), np.mean, confidence_level=confidence, n_resamples=n_resamples,
                                  method=method, rng=np.random.default_rng(seed), vectorized=True)
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(lo) and math.isfinite(hi):
            return lo, hi
    return math.nan, math.nan


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979), in the input order: sort ascending, multiply the i-th
    smallest (0-based) by (m - i), take the running maximum, cap at 1."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def _values(group: list[RunRecord], e: int, key: str, lags: list[str]) -> list[float]:
    out = []
    for r in group:
        v, when = r.at(e, key)
        if v is None:
            continue
        if when != e and r.reached >= e:
            lags.append(f"{r.algorithm} seed {r.seed}: no snapshot at {e} evaluations, used the one at {when}")
        out.append(float(v))
    return out


def comparison_table(runs: list[RunRecord], marks: list[int], *, seed: int = 0
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """(summary rows, test rows, snapshot-lag warnings).

    Summary row: algorithm, metric, evaluations, n, seeds, mean, median, ci_low, ci_high (95% bootstrap CI of
    the mean). Test row: metric, evaluations, a, b (algorithms), n_a, n_b, U (of a), A (= U / (n_a n_b)),
    p (two-sided Mann-Whitney U), p_holm (Holm-adjusted over the pairs of this metric and count)."""
    algorithms = list(dict.fromkeys(r.algorithm for r in runs))
    rows: list[dict[str, Any]] = []
    tests: list[dict[str, Any]] = []
    lags: list[str] = []
    for key, _label in METRICS:
        for e in marks:
            samples: dict[str, list[float]] = {}
            for alg in algorithms:
                group = [r for r in runs if r.algorithm == alg]
                xs = _values(group, e, key, lags)
                samples[alg] = xs
                lo, hi = bootstrap_ci(xs, seed=seed)
                rows.append({"algorithm": alg, "metric": key, "evaluations": e, "n": len(xs),
                             "seeds": sorted(r.seed for r in group),
                             "mean": float(np.mean(xs)) if xs else math.nan,
                             "median": float(np.median(xs)) if xs else math.nan, "ci_low": lo, "ci_high": hi})
            family = []
            for a, b in itertools.combinations(algorithms, 2):
                xa, xb = samples[a], samples[b]
                if len(xa) < 1 or len(xb) < 1:
                    continue
                if len(set(xa) | set(xb)) == 1:  # identical samples: no evidence of a difference
                    u, p = len(xa) * len(xb) / 2.0, 1.0
                else:
                    res = stats.mannwhitneyu(xa, xb, alternative="two-sided")
                    u, p = float(res.statistic), float(res.pvalue)
                family.append({"metric": key, "evaluations": e, "a": a, "b": b, "n_a": len(xa), "n_b": len(xb),
                               "U": u, "A": u / (len(xa) * len(xb)), "p": p})
            for t, adj in zip(family, holm([t["p"] for t in family])):
                t["p_holm"] = adj
            tests += family
    order = {k: i for i, (k, _) in enumerate(METRICS)}
    rows.sort(key=lambda r: (order[r["metric"]], algorithms.index(r["algorithm"]), r["evaluations"]))
    return rows, tests, sorted(set(lags))


def _g(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4g}"


def format_table(rows: list[dict[str, Any]], tests: list[dict[str, Any]], estimate: bool) -> str:
    """The summary and test rows as fixed-width text tables."""
    out = []
    for key, label in METRICS:
        sel = [r for r in rows if r["metric"] == key]
        if not sel:
            continue
        unit = " (%)" if key == "coverage" else ""
        scale = 100.0 if key == "coverage" else 1.0
        head = f"{'algorithm':<12} {'evals':>6} {'n':>3} {'mean':>10} {'median':>10} {'95% CI of the mean':>24}"
        out += [f"{label}{unit}", head, "-" * len(head)]
        for r in sel:
            ci = f"[{_g(r['ci_low'] * scale)}, {_g(r['ci_high'] * scale)}]"
            out.append(f"{r['algorithm']:<12} {r['evaluations']:>6} {r['n']:>3} {_g(r['mean'] * scale):>10} "
                       f"{_g(r['median'] * scale):>10} {ci:>24}")
        out.append("")
    if tests:
        last = max(t["evaluations"] for t in tests)
        head = f"{'metric':<15} {'evals':>6} {'a':<12} {'b':<12} {'A(a>b)':>7} {'p':>8} {'p (Holm)':>9}"
        out += [f"pairwise Mann-Whitney U (two-sided), Holm-adjusted per metric and evaluation count; at {last} "
                f"evaluations (all counts in --json)", head, "-" * len(head)]
        for t in tests:
            if t["evaluations"] != last:
                continue
            star = " *" if t["p_holm"] < 0.05 else ""
            out.append(f"{t['metric']:<15} {t['evaluations']:>6} {t['a']:<12} {t['b']:<12} {t['A']:>7.2f} "
                       f"{t['p']:>8.3g} {t['p_holm']:>9.3g}{star}")
        out.append("A: probability that a run of a beats a run of b; * p (Holm) < 0.05")
    if estimate:
        out.append("objectives are static-evaluator ESTIMATES (no GPU measurement)")
    return "\n".join(out)


def curves(runs: list[RunRecord], key: str, *, seed: int = 0, n_resamples: int = 1999
           ) -> dict[str, tuple[list[int], list[float], list[float], list[float]]]:
    """Per algorithm: (evaluations, mean, ci_low, ci_high) over seeds at every evaluation count any of its runs
    logged (up to the smallest count its runs reached)."""
    out = {}
    for alg in dict.fromkeys(r.algorithm for r in runs):
        group = [r for r in runs if r.algorithm == alg]
        horizon = min(r.reached for r in group)
        xs = sorted({int(h["evaluations"]) for r in group for h in r.history if h["evaluations"] <= horizon})
        mean, lo, hi = [], [], []
        for e in xs:
            vals = [float(v) for r in group if (v := r.at(e, key)[0]) is not None]
            mean.append(float(np.mean(vals)) if vals else math.nan)
            a, b = bootstrap_ci(vals, n_resamples=n_resamples, seed=seed) if len(vals) > 1 else (math.nan, math.nan)
            lo.append(a)
            hi.append(b)
        out[alg] = (xs, mean, lo, hi)
    return out


def plot_metrics(runs: list[RunRecord], out_dir: Path, *, estimate: bool = False) -> list[Path]:
    """One PNG per metric (``<out_dir>/<metric>.png``): mean over seeds against evaluations, with the 95%
    bootstrap band, one line per algorithm. Returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for key, label in METRICS:
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
        scale = 100.0 if key == "coverage" else 1.0
        for alg, (xs, mean, lo, hi) in curves(runs, key).items():
            if not xs:
                continue
            line, = ax.plot(xs, np.array(mean) * scale, label=alg, lw=1.6)
            lo_a, hi_a = np.array(lo) * scale, np.array(hi) * scale
            ok = np.isfinite(lo_a) & np.isfinite(hi_a)
            if ok.any():
                ax.fill_between(np.array(xs)[ok], lo_a[ok], hi_a[ok], color=line.get_color(), alpha=0.2, lw=0)
        ax.set_xlabel("evaluations")
        ax.set_ylabel(label + (" (%)" if key == "coverage" else "") + (" (ESTIMATE)" if estimate and key != "coverage"
                                                                        else ""))
        n = len({r.seed for r in runs})
        ax.set_title(f"{label}: mean over seeds (n <= {n}) with 95% bootstrap band")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        p = out_dir / f"{key}.png"
        fig.savefig(p)
        plt.close(fig)
        paths.append(p)
    return paths


def log_to_wandb(rows: list[dict[str, Any]], tests: list[dict[str, Any]], pngs: list[Path], *, group: str,
                 mode: str | None = None, run_dir: Path | None = None) -> str:
    """Log the tables (``comparison``, ``pairwise_tests``) and the plots (``plots/<metric>``) to a new W&B run of
    job type ``compare`` in ``group``; returns the run's directory."""
    import os

    import wandb

    run = wandb.init(project="ptxforge", group=group, job_type="compare", name=f"compare-{group}",
                     mode=mode or os.environ.get("WANDB_MODE", "offline"),
                     dir=str(run_dir) if run_dir else None, settings=wandb.Settings(console="off", silent=True))
    try:
        cols = ["algorithm", "metric", "evaluations", "n", "mean", "median", "ci_low", "ci_high"]
        run.log({"comparison": wandb.Table(columns=cols, data=[[r[c] for c in cols] for r in rows])})
        tcols = ["metric", "evaluations", "a", "b", "n_a", "n_b", "U", "A", "p", "p_holm"]
        run.log({"pairwise_tests": wandb.Table(columns=tcols, data=[[t[c] for c in tcols] for t in tests])})
        run.log({f"plots/{p.stem}": wandb.Image(str(p)) for p in pngs})
        return str(Path(run.dir).parent)
    finally:
        run.finish()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="multirun dir(s) or run dirs")
    ap.add_argument("--points", type=int, default=4, help="evaluation counts to report (default 4)")
    ap.add_argument("--at", type=lambda s: [int(x) for x in s.split(",") if x], default=None,
                    help="explicit evaluation counts, e.g. 10,50,200")
    ap.add_argument("--json", type=Path, help="also write rows, tests and warnings as JSON here")
    ap.add_argument("--plots", type=Path, help="write PNG plots here (default: <first path>/compare_plots)")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--wandb", action="store_true", help="log tables and plots to W&B")
    ap.add_argument("--pool-anyway", action="store_true", help="compare runs that differ in what they measured")
    ap.add_argument("--include-partial", action="store_true", help="keep killed/unfinished runs")
    args = ap.parse_args(argv)
    try:
        runs, warn = select_runs(load_runs(args.paths), include_partial=args.include_partial,
                                 pool_anyway=args.pool_anyway)
    except PoolError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    marks = evaluation_marks(runs, args.points, args.at)
    rows, tests, lags = comparison_table(runs, marks)
    warn += lags
    estimate = any(bool(r.provenance.get("estimate")) for r in runs)
    for w in warn:
        print(f"warning: {w}", file=sys.stderr)
    print(format_table(rows, tests, estimate))
    pngs: list[Path] = []
    if not args.no_plots:
        pngs = plot_metrics(runs, args.plots or (args.paths[0] / "compare_plots"), estimate=estimate)
        print("plots: " + ", ".join(str(p) for p in pngs))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "tests": tests, "warnings": warn, "marks": marks,
                                         "runs": [str(r.path) for r in runs]}, indent=2, default=str))
    if args.wandb:
        group = str((runs[0].summary or {}).get("experiment") or "compare")
        print("W&B run: " + log_to_wandb(rows, tests, pngs, group=group, run_dir=args.paths[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
