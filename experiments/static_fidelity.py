"""How well the CPU models rank recorded GPU kernels: the static cost model and the replay surrogate, scored with
leave-one-run-out validation (``evaluators.holdout``: fitted on the other runs, minus every kernel the held-out
run also measured; never scored on a run it was fitted on).

    python experiments/static_fidelity.py experiments/data/rmsnorm_*.sqlite.xz
    python experiments/static_fidelity.py STORES... --write      # also update evaluators/fidelity.json
    python experiments/static_fidelity.py STORES... --no-surrogate --top 50
    python experiments/static_fidelity.py --fit A.sqlite.xz B.sqlite.xz --score C.sqlite.xz D.sqlite.xz

``--fit`` / ``--score`` replace leave-one-run-out by one split (``evaluators.holdout.fit_then_score``): both
models fitted once on the ``--fit`` stores (as the shipped calibration and ``evaluator=replay`` over them would
be), then scored unchanged on each ``--score`` store, minus every kernel the fitted stores measured.

Prints, per held-out run and for all held-out kernels pooled: Spearman and Kendall rank correlation of the
geomean score (over all kernels and within the GPU's top 50), top-50 and top-10 overlap (with the chance
value), where the model's favourite lands in the GPU's order, and per shape the Spearman of the times and the
median relative time error. The first run computes the static terms of every recorded kernel (ptxas +
traffic, a few minutes on 2 cores) and caches them (``evaluators.calibration.recorded_terms``).

``--write`` records the pooled held-out numbers with the shipped model version (the calibration in
``evaluators/static_calibration.json``, fitted on all given stores by ``experiments/calibrate_static.py``) in
``evaluators/fidelity.json``; the static and replay evaluators print them in their run banner.

What CPU results can show, and what they cannot: see the README section "CPU evaluation and its fidelity".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from archive.store import StoreError
from evaluators import cost_model
from evaluators.calibration import recorded_terms
from evaluators.cost_model import load_calibration
from evaluators.fidelity import FIDELITY_FILE
from evaluators.holdout import FoldResult, fit_then_score, fold_metrics, leave_one_run_out
from evaluators.recorded import Recording, load_recording
from workloads.registry import get_workload

TARGETS = {"static": {"spearman": 0.8, "spearman_top": 0.5, "overlap_top": 25, "favourite_percentile": 0.10,
                      "median_rel_error": 0.25},
           "replay": {"spearman": 0.9, "overlap_top": 35}}


def pooled(folds: list[FoldResult]) -> FoldResult:
    """All held-out kernels in one fold (a kernel measured by several runs counted once, first fold wins)."""
    seen: set[str] = set()
    rows = []
    for f in folds:
        for i, ident in enumerate(f.identities):
            if ident not in seen:
                seen.add(ident)
                rows.append((f, i, ident))
    pick = lambda attr: np.stack([getattr(f, attr)[i] for f, i, _ in rows])  # noqa: E731
    return FoldResult("pooled", [r[2] for r in rows], pick("gpu_us"), pick("static_us"), pick("replay_us"),
                      pick("replay_std"), folds[0].constants, 0)


def table(console: Console, title: str, results: dict[str, dict], top: int) -> None:
    t = Table(title=title)
    for col in ("held-out", "n", "Spearman", f"Spearman top{top}", "Kendall", f"overlap top{top} (chance)",
                "overlap top10", "favourite pct", "per shape: Spearman / median rel. err"):
        t.add_column(col, justify="right")
    for name, m in results.items():
        shapes = "  ".join(f"{k}: {v['spearman']:.2f}/{100 * v['median_rel_error']:.0f}%"
                           for k, v in m["per_shape"].items())
        t.add_row(name, str(int(m["n"])), f"{m['spearman']:.3f}", f"{m['spearman_top']:.3f}",
                  f"{m['kendall']:.3f}", f"{int(m['overlap_top'])} ({m['chance_overlap_top']:.1f})",
                  str(int(m["overlap_top10"])), f"{100 * m['favourite_percentile']:.1f}%", shapes)
    console.print(t)


def check_targets(which: str, m: dict) -> list[str]:
    """Lines saying which targets of the issue the pooled held-out metrics meet."""
    out = []
    for key, want in TARGETS[which].items():
        if key == "median_rel_error":
            worst = max(v["median_rel_error"] for v in m["per_shape"].values())
            out.append(f"  median rel. error per shape <= {want:.0%}: worst {worst:.1%} "
                       f"{'MET' if worst <= want else 'NOT MET'}")
        elif key == "favourite_percentile":
            got = m[key]
            out.append(f"  favourite inside the GPU's top {want:.0%}: at {got:.1%} {'MET' if got <= want else 'NOT MET'}")
        else:
            got = m[key]
            out.append(f"  {key} >= {want}: {got:.3f} {'MET' if got >= want else 'NOT MET'}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stores", nargs="*", help="recorded run stores (.sqlite or .sqlite.xz), at least two, for "
                    "leave-one-run-out")
    ap.add_argument("--fit", nargs="+", default=None, help="fit on these stores only (with --score)")
    ap.add_argument("--score", nargs="+", default=None, help="score on these stores only (with --fit)")
    ap.add_argument("--workload", default="rmsnorm")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--top", type=int, default=50)
    ap.add_argument("--processes", type=int, default=None)
    ap.add_argument("--no-surrogate", action="store_true", help="score the static model only")
    ap.add_argument("--members", type=int, default=5)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", action="store_true", help=f"record the pooled held-out numbers in {FIDELITY_FILE}")
    ap.add_argument("--write-later", action="store_true",
                    help=f"with --fit (the shipped calibration's own stores) and --score (runs recorded after it): "
                    f"record the pooled numbers in {FIDELITY_FILE} as the shipped model's fidelity on later runs")
    ap.add_argument("--json", default=None, help="also write every metric to this JSON file")
    ap.add_argument("--loop-floor", choices=cost_model.LOOP_FLOORS, default=cost_model.LOOP_FLOOR,
                    help="the static model's sweep-loop latency floor (evaluators/cost_model.py LOOP_FLOOR): "
                    "'busiest' is a candidate term, fitted and scored here, never written with --write")
    args = ap.parse_args(argv)
    if args.loop_floor != cost_model.LOOP_FLOOR and (args.write or args.write_later):
        ap.error("--loop-floor other than the shipped one is a candidate: not with --write / --write-later")
    cost_model.LOOP_FLOOR = args.loop_floor
    console = Console(width=max(Console().width, 180))
    split = args.fit is not None or args.score is not None
    if split and (not args.fit or not args.score or args.stores):
        ap.error("--fit and --score go together, without positional stores")
    if split and args.write:
        ap.error(f"--write records the shipped model's leave-one-run-out fidelity in {FIDELITY_FILE}: not with "
                 "--fit / --score")
    if args.write_later:
        shipped = sorted(load_calibration().info.get("stores", []))
        if not split or sorted(Path(s).name for s in args.fit) != shipped:
            ap.error(f"--write-later needs --fit with exactly the shipped calibration's stores ({', '.join(shipped)}) "
                     "and --score with runs recorded after it")
    if not split and len(args.stores) < 2:
        ap.error("leave-one-run-out needs at least two stores")
    try:
        rec = load_recording(args.fit if split else args.stores)
        scored: list[Recording] = [load_recording([s]) for s in args.score] if split else []
    except (FileNotFoundError, StoreError) as e:  # a wrong path is the user's mistake: one line, not a traceback
        ap.error(str(e))
    kernels = {k: m for r in [rec, *scored] for k, m in r.kernels.items()}
    wl = get_workload(args.workload, dtype=args.dtype)
    t0 = time.perf_counter()
    terms = recorded_terms(kernels.values(), wl, gpu=args.gpu, processes=args.processes,
                           progress=lambda i, n: console.print(f"  static terms {i}/{n}") if i % 100 == 0 else None)
    bad = sum(1 for t in terms.values() if t.get("status") != "ok")
    runs = rec.runs + [r for s in scored for r in s.runs]
    console.print(f"{len(kernels)} distinct kernels over {len(runs)} runs ({bad} the static model cannot "
                  f"evaluate); terms in {time.perf_counter() - t0:.0f} s")
    ref = np.array(list(rec.reference_times().values()))
    if split:
        folds = fit_then_score(rec, scored, terms, surrogate=not args.no_surrogate, seed=args.seed,
                               members=args.members, steps=args.steps)
        method = (f"fitted on {', '.join(rec.runs)} ({folds[0].train_kernels} kernels), scored unchanged on each "
                  "other run minus every kernel the fitted runs measured")
    else:
        folds = leave_one_run_out(rec, terms, surrogate=not args.no_surrogate, seed=args.seed,
                                  members=args.members, steps=args.steps)
        method = "leave-one-run-out, kernels deduplicated by identity across folds"
    console.print(method)
    report: dict[str, dict] = {}
    for which in ("static",) + (() if args.no_surrogate else ("replay",)):
        res = {f.run: fold_metrics(f, ref, rec.shapes, which, args.top) for f in folds}
        res["pooled"] = fold_metrics(pooled(folds), ref, rec.shapes, which, args.top)
        report[which] = res
        title = ("static cost model" if which == "static" else "replay surrogate (unseen kernels)")
        table(console, f"{title}: held-out fidelity against the H200", res, args.top)
        for line in check_targets(which, res["pooled"]):
            console.print(line)
    for f in folds:
        console.print(f"fold {f.run}: fitted on {f.train_kernels} kernels; constants "
                      f"{json.dumps({k: round(v, 3) for k, v in f.constants.to_json().items()})}")
    if args.json:
        Path(args.json).write_text(json.dumps({**report, "method": method, "seed": args.seed, "folds": {
            f.run: {"train_kernels": f.train_kernels, "constants": f.constants.to_json()} for f in folds}},
            indent=1))
    if args.write:
        cal = load_calibration()
        out = json.loads(FIDELITY_FILE.read_text()) if FIDELITY_FILE.is_file() else {}
        stores = [Path(s).name for s in args.stores]
        for which, res in report.items():
            out[which] = {"model_version": model_version(which, cal), "workload": wl.name, "stores": stores,
                          "date": time.strftime("%Y-%m-%d"), "method": method, **pooled_record(res["pooled"]),
                          "folds": {k: {kk: vv for kk, vv in v.items() if kk != "per_shape"}
                                    for k, v in res.items() if k != "pooled"}}
        FIDELITY_FILE.write_text(json.dumps(out, indent=1) + "\n")
        console.print(f"wrote {FIDELITY_FILE}")
    if args.write_later:
        write_later(report, [Path(s).name for s in args.score], method)
    return 0


def model_version(which: str, cal: Any) -> str:
    """The version FIDELITY_FILE records for ``which`` ("static" or "replay") under calibration ``cal``."""
    return cal.version if which == "static" else f"replay+{cal.version}"


def pooled_record(pooled: dict) -> dict:
    """A pooled fold's metrics as FIDELITY_FILE holds them: ``held_out`` and ``median_rel_error_per_shape``."""
    return {"held_out": {k: v for k, v in pooled.items() if k != "per_shape"},
            "median_rel_error_per_shape": {k: v["median_rel_error"] for k, v in pooled["per_shape"].items()}}


def write_later(report: dict[str, dict], stores: list[str], method: str) -> None:
    """Record under ``"later_runs"`` of each kind's entry in FIDELITY_FILE how the shipped model (its version must
    be the entry's) ranked the kernels of runs recorded after it was fitted: the strongest held-out evidence, since
    neither the constants nor the model's design could have seen them."""
    cal = load_calibration()
    out = json.loads(FIDELITY_FILE.read_text()) if FIDELITY_FILE.is_file() else {}
    for which, res in report.items():
        version = model_version(which, cal)
        entry = out.get(which)
        if not entry or entry.get("model_version") != version:
            raise SystemExit(f"{FIDELITY_FILE}: no {which} entry for {version}: run --write first")
        entry["later_runs"] = {"stores": stores, "date": time.strftime("%Y-%m-%d"), "method": method,
                               **pooled_record(res["pooled"])}
    FIDELITY_FILE.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote later_runs in {FIDELITY_FILE}")


if __name__ == "__main__":
    raise SystemExit(main())
