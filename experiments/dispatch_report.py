"""The report of a multi-task RMSNorm run: the dispatch against the best library at every shape.

Inputs: the run dir (store, summary.json, best/dispatch/) and ``verify_dispatch.json``
(``experiments/dispatch_verify.py``). Writes ``report.md`` and ``report.json`` (the table's numbers and the
verdicts) into ``--out``.

Sections: the method (device, objective definition, gate version, libraries and the ones missing per shape with
the worker's reason); the benchmark matrix (per shape: the bucket's kernel, µs, % of copy, every library's µs,
the best library, the speedup over it and the winner); the targets (geomean >= 1.0x the best library, no shape
below 0.95x, >= 97% of copy at N 1024-32768 and >= 95% at N >= 65536; moonshot >= 1.03x); the held-out shapes
(gate and speed against the best library); each bucket's kernel (range, knobs, objective during the search) and
its lineage (the operator and edit of every step from the seed); the search (evaluations, evaluations/s, statuses,
QD score per task).

Usage: ``python experiments/dispatch_report.py --run RUN --verify verify_dispatch.json --out DIR``
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COLUMNS = ("torch", "torch_compile", "liger", "quack", "quack_tuned")
EDIT_CHARS = 90


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _f(x: Any, fmt: str = "{:.1f}") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def _abridge(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    t = " ⏎ ".join(lines[:3]) + (f" … (+{len(lines) - 3})" if len(lines) > 3 else "")
    t = t if len(t) <= EDIT_CHARS else t[: EDIT_CHARS - 1] + "…"
    return (t or "(seed)").replace("|", "\\|").replace("`", "'")


def _n(key: str) -> int:
    return int(key.split("x")[-1])


def verdicts(bench: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets over the benchmark matrix (None where nothing was measured)."""
    ok = {k: v for k, v in bench.items() if v.get("status") == "ok"}
    sp = {k: v["speedup_vs_best"] for k, v in ok.items() if v.get("speedup_vs_best")}
    gm = _geomean(list(sp.values()))
    mid = [v["frac_copy"] for k, v in ok.items() if 1024 <= _n(k) <= 32768 and v.get("frac_copy")]
    big = [v["frac_copy"] for k, v in ok.items() if _n(k) >= 65536 and v.get("frac_copy")]
    return {"shapes_ok": len(ok), "shapes": len(bench), "geomean_vs_best": gm,
            "min_vs_best": min(sp.values()) if sp else None,
            "worst_shape": min(sp, key=sp.get) if sp else None,
            "target_geomean_1_0": None if gm is None else gm >= 1.0,
            "target_no_shape_below_0_95": None if not sp else min(sp.values()) >= 0.95,
            "target_copy_97_mid": None if not mid else min(mid) >= 0.97,
            "target_copy_95_large": None if not big else min(big) >= 0.95,
            "moonshot_1_03": None if gm is None else gm >= 1.03,
            "min_copy_mid": min(mid) if mid else None, "min_copy_large": min(big) if big else None}


def shape_rows(entries: dict[str, dict[str, Any]]) -> list[list[str]]:
    rows = []
    for key, e in entries.items():
        b = e.get("baseline_us") or {}
        rows.append([key, f"{e.get('bucket')}", f"#{e.get('candidate_id')}",
                     e["status"] if e["status"] != "ok" else _f(e.get("time_us")),
                     _f(100 * e["frac_copy"] if e.get("frac_copy") else None, "{:.0f}%"),
                     *(_f(b.get(c)) for c in COLUMNS), e.get("best_library", "-"),
                     _f(e.get("speedup_vs_best"), "{:.3f}x"), e.get("winner", "-")])
    return rows


def read_search(run_dir: Path) -> dict[str, Any]:
    """Summary, status counts, operator counts and lineage per bucket from the run's store."""
    from archive.lineage import build_graph, lineage_steps
    from archive.store import Store

    out: dict[str, Any] = {"summary": None, "statuses": {}, "operators": {}, "lineage": {}}
    sp = run_dir / "summary.json"
    if sp.is_file():
        out["summary"] = json.loads(sp.read_text())
    else:  # a search cut before its summary: the last metrics line
        mp = run_dir / "metrics.jsonl"
        if mp.is_file() and mp.read_text().strip():
            out["summary"] = json.loads(mp.read_text().strip().splitlines()[-1])
    with Store(run_dir / "store.sqlite", readonly=True) as store:
        out["statuses"] = store.status_counts()
        out["operators"] = {r[0]: r[1] for r in store.query(
            "SELECT operator, COUNT(*) FROM candidates GROUP BY operator ORDER BY 2 DESC")}
        out["transfers"] = store.query("SELECT COUNT(*) FROM candidates WHERE "
                                       "json_extract(timings, '$.transfer_from_task') IS NOT NULL")[0][0]
        out["objective"] = store.get_meta("objective")
        # GPU seconds per evaluation (worker side: gate + benchmark incl. the audit) -> the GPU-bound rate
        gpu = store.query("SELECT COALESCE(json_extract(metrics, '$.extra.seconds.gate'), 0) + "
                          "COALESCE(json_extract(metrics, '$.extra.seconds.benchmark'), 0), "
                          "json_extract(metrics, '$.extra.device') FROM candidates "
                          "WHERE json_extract(metrics, '$.extra.seconds') IS NOT NULL")
        secs = [float(r[0]) for r in gpu if r[0]]
        out["gpu_seconds_per_eval"] = sum(secs) / len(secs) if secs else None
        out["gpu_evals"] = len(secs)
        graph = build_graph(store)
        manifest_path = run_dir / "best" / "dispatch" / "manifest.json"
        if manifest_path.is_file():
            for b in json.loads(manifest_path.read_text())["buckets"]:
                out["lineage"][b["task"]] = lineage_steps(store, int(b["candidate_id"]), graph)
    return out


def render(verify: dict[str, Any], search: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    est = bool(verify.get("estimate"))
    v = verdicts(verify.get("benchmark", {}))
    hv = verdicts(verify.get("heldout", {}))
    obj = search.get("objective") or {}
    L: list[str] = [f"# RMSNorm dispatch vs the best library per shape ({verify.get('dtype')}, {verify.get('device')})",
                    ""]
    if est:
        L += ["> **DRY RUN — ESTIMATES.** No GPU: every time below comes from the static model; the speedups are "
              "over the naive seed under that model, not over any library.", ""]
    L += ["## Method", "",
          f"- Verification: {verify.get('started_utc')} - {verify.get('finished_utc', '(cut)')}, "
          f"{verify.get('seconds', '-')} s; copy roofline {_f(verify.get('copy_gbps'), '{:.0f}')} GB/s.",
          f"- Verification objective: {verify['objective']['definition']}.",
          f"- Search objective: {obj.get('definition', '-')}; gate version {obj.get('gate_version', '-')}.",
          f"- Libraries timed: {', '.join(verify.get('libraries', []))}; every shape re-timed round-robin with the "
          "kernel in one worker, outputs re-checked after the timed launches.",
          "- Each shape runs the kernel of the bucket holding its row length (the dispatch in best/dispatch/)."]
    notes = verify.get("baseline_notes") or {}
    if notes:
        L += ["- Libraries missing or failing: " + "; ".join(f"{k}: {str(t)[:160]}" for k, t in notes.items())]
    missing = sorted({m for e in verify.get("benchmark", {}).values() for m in e.get("missing_libraries", [])})
    if missing:
        L += [f"- Not measured at some shape (the best of those present was used): {', '.join(missing)}."]
    head = ["shape", "bucket", "kernel", "µs", "% copy", *COLUMNS, "best library", "vs best", "winner"]
    L += ["", "## Benchmark matrix", "", *_table(head, shape_rows(verify.get("benchmark", {}))), ""]
    yes = {True: "yes", False: "**no**", None: "-"}
    L += ["## Targets", "",
          f"- geomean vs the best library: **{_f(v['geomean_vs_best'], '{:.3f}x')}** (target >= 1.0x: "
          f"{yes[v['target_geomean_1_0']]}; moonshot >= 1.03x: {yes[v['moonshot_1_03']]})",
          f"- worst shape: {v['worst_shape'] or '-'} at {_f(v['min_vs_best'], '{:.3f}x')} (no shape below 0.95x: "
          f"{yes[v['target_no_shape_below_0_95']]})",
          f"- lowest % of copy at N 1024-32768: {_f(100 * v['min_copy_mid'] if v['min_copy_mid'] else None, '{:.1f}%')}"
          f" (>= 97%: {yes[v['target_copy_97_mid']]}); at N >= 65536: "
          f"{_f(100 * v['min_copy_large'] if v['min_copy_large'] else None, '{:.1f}%')} (>= 95%: "
          f"{yes[v['target_copy_95_large']]})",
          f"- shapes measured ok: {v['shapes_ok']} of {v['shapes']}; cut: {', '.join(verify.get('cut', [])) or 'none'}"
          f"; errors: {'; '.join(verify.get('errors', [])) or 'none'}", ""]
    L += ["## Held-out shapes (gate on the shape itself, then timed against the libraries)", "",
          *_table(head, shape_rows(verify.get("heldout", {}))), "",
          f"Held-out: {hv['shapes_ok']} of {hv['shapes']} passed the gate; geomean vs the best library "
          f"{_f(hv['geomean_vs_best'], '{:.3f}x')}, worst {hv['worst_shape'] or '-'} "
          f"{_f(hv['min_vs_best'], '{:.3f}x')}.", ""]
    L += ["## Buckets and their kernels' lineage", ""]
    for b in verify.get("buckets", []):
        knobs = (b.get("launch") or {}).get("knobs")
        knob_text = ", ".join(f"{k}={v}" for k, v in (knobs.items() if isinstance(knobs, dict) else (knobs or [])))
        borrowed = f" (no elite of its own: borrowed from bucket {b['borrowed_from']})" if b.get("borrowed_from") is not None else ""
        L += [f"### Bucket {b['task']}: {b['name']}, kernel #{b['candidate_id']}, search objective "
              f"{_f(b.get('objective'), '{:.3f}')}{borrowed}", "", f"Knobs: {knob_text or '(not a template instance)'}", ""]
        steps = search["lineage"].get(b["task"]) or search["lineage"].get(str(b["task"])) or []
        if steps:
            L += _table(["step", "row", "operator", "edit", "objective"],
                        [[str(s["step"]), f"#{s['id']}", s["operator"], _abridge(s["edit_text"]),
                          _f(s["objective"], "{:.3f}")] for s in steps])
            ops = [s["operator"] for s in steps[1:]]
            L += ["", f"Operators along the lineage: {' -> '.join(ops) if ops else '(the seed itself)'}", ""]
    s = search.get("summary") or {}
    names = {f"t{int(b['task']):02d}": b["name"] for b in verify.get("buckets", [])}
    gsec = search.get("gpu_seconds_per_eval")
    rate = s.get("evals_per_s")
    n_gpu = 1  # the experiment runs on one H200
    bound = n_gpu / gsec if gsec else None
    L += ["## Search", "",
          f"- throughput: {_f(rate, '{:.2f}')} evaluations/s; GPU seconds per evaluation (gate + benchmark + "
          f"audit, worker side) {_f(gsec, '{:.3f}')} -> GPU-bound rate {_f(bound, '{:.2f}')}/s on {n_gpu} GPU; "
          f"the loop ran at {_f(100 * rate / bound if rate and bound else None, '{:.0f}%')} of it (target >= 90%)",
          "- host seconds of the engine's thread: " + ", ".join(
              f"{k.split('/')[1]} {_f(v, '{:.1f}')}" for k, v in s.items() if k.startswith("host/")),
          f"- evaluations {s.get('evaluations', '-')}, candidates {s.get('candidates', '-')}, "
          f"{_f(s.get('evals_per_s'), '{:.2f}')} evaluations/s over {_f(s.get('seconds'), '{:.0f}')} s; "
          f"transfers to neighbouring buckets: {search.get('transfers', '-')}",
          f"- statuses: {', '.join(f'{k} {n}' for k, n in sorted(search.get('statuses', {}).items()))}",
          f"- rows per operator: {', '.join(f'{k} {n}' for k, n in search.get('operators', {}).items())}",
          f"- QD score {_f(s.get('qd_score'), '{:.2f}')} (sum over tasks); per task: " + ", ".join(
              f"{names.get(k.split('/')[1], k.split('/')[1])} {_f(val, '{:.2f}')}" for k, val in s.items()
              if k.startswith("task/") and k.endswith("/qd_score")), ""]
    data = {"benchmark": v, "heldout": hv, "estimate": est, "rows": verify.get("benchmark", {}),
            "throughput": {"evals_per_s": rate, "gpu_seconds_per_eval": gsec, "gpu_bound_rate": bound,
                           "fraction_of_gpu_bound": rate / bound if rate and bound else None}}
    return "\n".join(L) + "\n", data


def write_report(run_dir: Path, verify_path: Path, out: Path) -> dict[str, Any]:
    verify = json.loads(verify_path.read_text())
    search = read_search(run_dir)
    text, data = render(verify, search)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(text)
    (out / "report.json").write_text(json.dumps(data, indent=2, default=str))
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--verify", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    data = write_report(a.run, a.verify, a.out)
    v = data["benchmark"]
    print(f"geomean vs best library {_f(v['geomean_vs_best'], '{:.3f}x')}, worst {v['worst_shape']} "
          f"{_f(v['min_vs_best'], '{:.3f}x')}{' (ESTIMATE)' if data['estimate'] else ''}; report in {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
