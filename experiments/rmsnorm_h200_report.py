"""Write the report of an RMSNorm factory run: ``report.md``, PNG figures and ``report.json`` (the numbers).

Inputs: the run dir of ``python -m evolve experiment=rmsnorm_h200`` (``store.sqlite``, ``metrics.jsonl``) and
the ``verify.json`` of ``experiments/rmsnorm_h200_verify.py``. Sections:

- targets: the best kernel's gate, held-out gate and compute-sanitizer verdicts; geomean speedups over the
  naive seed, torch eager and torch.compile across the benchmark shapes; % of the measured device-to-device
  copy bandwidth at 32768 x 4096 and every larger shape (by bytes moved);
- per shape: µs, GB/s (bytes = 2*M*N*elt + 4*N over time) and % of copy for the naive seed, the best evolved
  kernel, torch, torch.compile (Liger/QuACK when they were timed) and the best template-knob kernel, with the
  speedups of the best kernel and their geomeans. Baseline times are those re-timed round-robin with the best
  kernel in the same worker (``baseline_us`` of its verification); the template column is its own run;
- held-out shapes, sanitizer, ncu DRAM bytes against the byte model;
- the lineage of the best kernel (``archive.lineage.lineage_steps``): operator, abridged edit, search objective,
  gain over the parent;
- archive coverage and QD score over evaluations (``metrics.jsonl``), failures by status
  (``Store.status_counts``), operator contributions from the lessons memory (``archive.lessons.Lessons``);
- GPU, dates, versions (store meta and the verification's), method, verification phase timings.

Speedup = baseline µs / kernel µs; geomean = exp(mean(log(speedups))) over the shapes where both were timed
(``evaluators.types.geomean``). A run verified with the static evaluator (dry run) is labelled ESTIMATE
throughout.

Usage: ``python experiments/rmsnorm_h200_report.py --run RUN_DIR --verify verify.json --out DIR``
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluators.types import geomean

BASELINES = ("torch", "torch_compile", "liger", "quack")
NAIVE_KEYS = ("naive", "naive_seed")  # the GPU pool's name for the interleaved seed, and the static model's
LABEL = {"naive": "naive seed", "best": "best evolved", "template": "best template", "torch": "torch eager",
         "torch_compile": "torch.compile", "liger": "Liger", "quack": "QuACK"}
ROOFLINE_TARGET = 0.85  # issue 6, target 3: >= 85% of copy bandwidth at 32768 x 4096 and above
TARGET_SHAPE = (32768, 4096)
EDIT_LINES = 3
EDIT_CHARS = 160


class ReportError(ValueError):
    """An input is missing or malformed; the message names the file and the key."""


# ------------------------------------------------------------------------------------------------- numbers
def bytes_moved(shape: tuple[int, int], elt: int) -> int:
    """RMSNorm bytes: 2*M*N*elt (x read, y written) + 4*N (fp32 w); workloads.rmsnorm."""
    m, n = shape
    return 2 * m * n * elt + 4 * n


def gbps(shape: tuple[int, int], elt: int, time_us: float) -> float:
    """GB/s (1e9 bytes/s) of the byte model at ``time_us`` µs."""
    return bytes_moved(shape, elt) / (time_us * 1e-6) / 1e9


@dataclass
class ShapeRow:
    """Times (µs) of every kernel and baseline at one shape; None where not measured."""

    shape: tuple[int, int]
    us: dict[str, float | None] = field(default_factory=dict)

    def speedup(self, over: str, of: str = "best") -> float | None:
        a, b = self.us.get(over), self.us.get(of)
        return a / b if a and b else None


def _shapes_of(res: dict[str, Any] | None) -> dict[tuple[int, int], dict[str, Any]]:
    if not res:
        return {}
    return {tuple(s["shape"]): s for s in res.get("shapes", [])}  # type: ignore[misc]


def shape_rows(verify: dict[str, Any]) -> list[ShapeRow]:
    """One ShapeRow per benchmark shape, from the best kernel's verification (its time and the baselines timed
    with it), the template's and naive seed's own runs; [] when the best kernel's benchmark was not measured
    (a phase cut or failed: the report says so and still covers the rest)."""
    bench = verify.get("benchmark") or {}
    best = _shapes_of(bench.get("best"))
    if not best:
        return []
    tmpl, naive = _shapes_of(bench.get("template")), _shapes_of(bench.get("naive"))
    order = [tuple(s) for s in verify.get("shapes", {}).get("benchmark", [])] or list(best)
    rows = []
    for shape in order:
        s = best.get(shape)  # type: ignore[call-overload]
        if s is None:
            continue
        base = s.get("baseline_us", {})
        us: dict[str, float | None] = {"best": s["time_us"]}
        us["naive"] = next((base[k] for k in NAIVE_KEYS if k in base), None)
        if us["naive"] is None and shape in naive:
            us["naive"] = naive[shape]["time_us"]
        for b in BASELINES:
            us[b] = base.get(b)
        us["template"] = tmpl[shape]["time_us"] if shape in tmpl else None
        rows.append(ShapeRow(shape, us))  # type: ignore[arg-type]
    return rows


def geomeans(rows: list[ShapeRow], of: str = "best") -> dict[str, float | None]:
    """Geomean speedup of ``of`` over each of naive, the baselines and template, across the shapes where both
    were timed (None when none were)."""
    out: dict[str, float | None] = {}
    for name in ("naive", *BASELINES, "template"):
        xs = [x for r in rows if (x := r.speedup(name, of)) is not None]
        out[name] = geomean(xs) if xs else None
    return out


def present(rows: list[ShapeRow]) -> list[str]:
    """Kernels and baselines with at least one time, in table order."""
    return [k for k in ("naive", "best", *BASELINES, "template") if any(r.us.get(k) for r in rows)]


# ------------------------------------------------------------------------------------------------- inputs
def load_verify(path: Path) -> dict[str, Any]:
    """verify.json as a dict; ReportError when it is missing, not JSON or not a verification file."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ReportError(f"{path}: cannot read verify.json: {e}") from e
    for key in ("schema", "phases", "benchmark", "dtype"):
        if key not in data:
            raise ReportError(f"{path}: not a verify.json (no {key!r} key)")
    return data


def load_metrics(path: Path) -> list[dict[str, Any]]:
    """Rows of metrics.jsonl ([] when absent); ReportError naming the line of a malformed row."""
    if not path.is_file():
        return []
    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ReportError(f"{path}:{i}: not JSON ({e})") from e
    return out


@dataclass
class RunFacts:
    """What the report reads from the run store."""

    meta: dict[str, Any]
    status_counts: dict[str, int]
    lineage: list[dict[str, Any]]
    lineage_of: int | None
    operators: list[dict[str, Any]]
    n_candidates: int
    first_created: float | None = None
    last_created: float | None = None
    gate_versions: dict[str, int] | None = None


def read_run(run_dir: Path, best_id: int | None) -> RunFacts:
    """Store meta, status counts, the lineage of ``best_id`` (default: the store's best ok row) and the lessons
    rows summed per operator. ReportError when there is no store."""
    from archive.lessons import Lessons
    from archive.lineage import lineage_steps
    from archive.store import Store

    path = run_dir / "store.sqlite"
    if not path.is_file():
        raise ReportError(f"{run_dir}: no store.sqlite")
    store = Store(path, readonly=True)
    try:
        meta = store.meta()
        counts = store.status_counts()
        try:
            steps = lineage_steps(store, best_id)
        except (ValueError, KeyError):
            steps = []
        per_op: dict[str, dict[str, Any]] = {}
        for r in Lessons(store).rows():
            d = per_op.setdefault(r["operator"], {"operator": r["operator"], "proposed": 0, "applied": 0,
                                                  "compiled": 0, "passed": 0, "improved": 0, "top_failure": ""})
            for k in ("proposed", "applied", "compiled", "passed", "improved"):
                d[k] += int(r[k])
            if r["top_failure"] and not d["top_failure"]:
                d["top_failure"] = r["top_failure"]
        span = store.query("SELECT MIN(created), MAX(created) FROM candidates")[0]
        gates = {str(v) if v is not None else "unrecorded": int(n) for v, n in store.query(
            "SELECT json_extract(metrics, '$.extra.gate_version'), COUNT(*) FROM candidates GROUP BY 1")}
        return RunFacts(meta, counts, steps, best_id, sorted(per_op.values(), key=lambda d: -d["improved"]),
                        store.count(), span[0], span[1], gates)
    finally:
        store.close()


# ------------------------------------------------------------------------------------------------- figures
def figures(out: Path, rows: list[ShapeRow], elt: int, copy_gbps: float | None, metrics: list[dict[str, Any]],
            lineage: list[dict[str, Any]], estimate: bool) -> list[str]:
    """bandwidth.png, search.png, lineage.png (when there is data for each); returns the file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tag = " (ESTIMATE)" if estimate else ""
    made = []
    keys = [k for k in present(rows)]
    if rows:
        fig, ax = plt.subplots(figsize=(12, 4.5))
        width = 0.8 / max(1, len(keys))
        for i, k in enumerate(keys):
            ys = [gbps(r.shape, elt, r.us[k]) if r.us.get(k) else 0.0 for r in rows]  # type: ignore[arg-type]
            ax.bar([j + i * width for j in range(len(rows))], ys, width, label=LABEL[k])
        if copy_gbps:
            ax.axhline(copy_gbps, color="k", ls="--", lw=1, label=f"copy {copy_gbps:.0f} GB/s")
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))])
        ax.set_xticklabels([f"{r.shape[0]}x{r.shape[1]}" for r in rows], rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("GB/s (bytes moved / time)")
        ax.set_title(f"RMSNorm forward, bandwidth per shape{tag}")
        ax.set_ylim(0, 1.25 * max([copy_gbps or 0.0, *ax.get_ylim()]))
        ax.legend(fontsize=8, ncol=4, loc="upper left")
        fig.tight_layout()
        fig.savefig(out / "bandwidth.png", dpi=110)
        plt.close(fig)
        made.append("bandwidth.png")
    if metrics:
        ev = [m.get("evaluations", i) for i, m in enumerate(metrics)]
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
        for ax, key, title in zip(axes, ("qd_score", "coverage", "best_objective"),
                                  ("QD score", "archive coverage", "best objective (search)")):
            ax.plot(ev, [m.get(key) for m in metrics], marker=".")
            ax.set_xlabel("evaluations")
            ax.set_title(title + tag, fontsize=10)
        fig.tight_layout()
        fig.savefig(out / "search.png", dpi=110)
        plt.close(fig)
        made.append("search.png")
    if lineage:
        fig, ax = plt.subplots(figsize=(10, 3.6))
        ax.plot([s["step"] for s in lineage], [s["objective"] for s in lineage], marker="o")
        for s in lineage:
            if s["objective"] is not None:
                ax.annotate(s["operator"], (s["step"], s["objective"]), fontsize=7, rotation=30,
                            textcoords="offset points", xytext=(0, 6))
        ax.set_xlabel("step from seed")
        ax.set_ylabel("search objective")
        ax.set_title(f"Lineage of the best kernel (#{lineage[-1]['id']}){tag}")
        fig.tight_layout()
        fig.savefig(out / "lineage.png", dpi=110)
        plt.close(fig)
        made.append("lineage.png")
    return made


# ------------------------------------------------------------------------------------------------- markdown
def _f(x: float | None, fmt: str = "{:.1f}", none: str = "-") -> str:
    return none if x is None else fmt.format(x)


def _utc(t: float | None) -> str:
    import datetime as dt

    return "?" if t is None else dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _bw(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.3g}"


def _x(x: float | None) -> str:
    return _f(x, "{:.2f}x")


def _md_table(head: list[str], body: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in body)]


def abridge(edit: str, empty: str = "(seed)") -> str:
    """The first EDIT_LINES lines of an edit script, at most EDIT_CHARS characters, pipes escaped; ``empty``
    for no text."""
    lines = [ln.strip() for ln in edit.strip().splitlines() if ln.strip()]
    text = " ⏎ ".join(lines[:EDIT_LINES]) + (f" … (+{len(lines) - EDIT_LINES} lines)" if len(lines) > EDIT_LINES
                                              else "")
    text = text if len(text) <= EDIT_CHARS else text[: EDIT_CHARS - 1] + "…"
    return (text or empty).replace("|", "\\|").replace("`", "'")


def _all_clean(flags: list[bool | None]) -> bool | None:
    """False when any tool found something, None when none ran or one gave no verdict, else True."""
    if any(f is False for f in flags):
        return False
    return True if flags and all(f is True for f in flags) else None


def verdicts(verify: dict[str, Any], rows: list[ShapeRow], elt: int) -> dict[str, Any]:
    """The issue's three targets, computed: gate, held_out, sanitizer (True/False/None = not run), geomeans,
    roofline fractions at shapes >= 32768 x 4096 by bytes and whether all reach ROOFLINE_TARGET."""
    bench = (verify.get("benchmark") or {}).get("best") or {}
    held = (verify.get("heldout") or {}).get("best")
    san = verify.get("sanitizer") or {}
    copy = verify.get("copy_gbps")
    big = [r for r in rows if bytes_moved(r.shape, elt) >= bytes_moved(TARGET_SHAPE, elt)]
    fracs = {f"{r.shape[0]}x{r.shape[1]}": gbps(r.shape, elt, r.us["best"]) / copy  # type: ignore[arg-type]
             for r in big if copy and r.us.get("best")}
    g = geomeans(rows)
    return {
        "gate": bench.get("status") == "ok" if bench else None,
        "held_out": (held.get("status") == "ok") if held else None,
        "sanitizer": ({t: r.get("clean") for t, r in san.items()} or None),
        "sanitizer_clean": _all_clean([r.get("clean") for r in san.values()]),
        "geomean_vs_naive": g["naive"], "geomean_vs_torch": g["torch"],
        "geomean_vs_torch_compile": g["torch_compile"], "geomeans": g,
        "frac_copy_large": fracs,
        "roofline_target_met": (all(f >= ROOFLINE_TARGET for f in fracs.values()) if fracs else None),
    }


def objective_note(facts: RunFacts) -> str:
    """What the search objective was measured against, from the store's config."""
    kind = ((facts.meta.get("config") or {}).get("evaluator") or {}).get("kind")
    if facts.meta.get("estimate") or kind == "static":
        return "static model: estimated geomean speedup over the naive seed, an ESTIMATE"
    return "GPU pool: geomean speedup over torch eager rms_norm, measured"


def _yes(x: bool | None) -> str:
    return {True: "yes", False: "**NO**", None: "not run"}[x]


def render(verify: dict[str, Any], facts: RunFacts, metrics: list[dict[str, Any]], figs: list[str]) -> tuple[str, dict[str, Any]]:
    """report.md text and the numbers behind it (report.json)."""
    elt = {"bf16": 2, "fp16": 2, "fp32": 4}[verify["dtype"]]
    est = bool(verify.get("estimate"))
    rows = shape_rows(verify)
    copy = verify.get("copy_gbps")
    v = verdicts(verify, rows, elt)
    keys = present(rows)
    cfg = facts.meta.get("config") or {}
    md: list[str] = [f"# RMSNorm forward ({verify['dtype']} x, fp32 w): factory run report"
                     + (" — ESTIMATES, NO GPU" if est else ""), ""]
    if est:
        md += ["> **Dry run.** Verified with the static evaluator: every time, GB/s and speedup here is a model "
               "estimate, not a measurement; sanitizer and ncu did not run.", ""]
    md += [f"- GPU: {verify.get('device', '?')}; search {_utc(facts.first_created)} to {_utc(facts.last_created)}; "
           f"verification {verify.get('started_utc', '?')} to "
           f"{verify.get('finished_utc', '(cut)')}; run dir `{Path(verify.get('run_dir', '')).name}`.",
           f"- Device-to-device copy bandwidth (read + write, 1 GiB, median): {_f(copy, '{:.0f}')} GB/s.",
           f"- Search: {cfg.get('algorithm', {}).get('name', '?')}, operators "
           f"{[o.get('name') for o in cfg.get('mutator', {}).get('operators', [])]}, budget "
           f"{cfg.get('budget', {})}, seed {cfg.get('seed', '?')}; {facts.n_candidates} candidates stored, "
           f"{metrics[-1].get('evaluations') if metrics else '?'} evaluations.",
           "- LLM operator: " + (f"yes ({(cfg.get('llm') or {}).get('kind', cfg.get('llm'))})"
                                 if any(o.get("name") == "llm" for o in cfg.get("mutator", {}).get("operators", []))
                                 else "not in this run's mutator (structural + template operators only)") + ".", ""]
    md += ["## Targets", ""]
    g = v["geomeans"]
    md += _md_table(["target", "result"], [
        ["best kernel passes every gate (gate shapes + 11 benchmark outputs re-checked)", _yes(v["gate"])],
        ["best kernel passes the held-out shapes", _yes(v["held_out"])],
        ["compute-sanitizer finds nothing",
         _yes(v["sanitizer_clean"]) + (" (" + ", ".join(f"{t}: {_yes(c)}" for t, c in v["sanitizer"].items()) + ")"
                                       if v["sanitizer"] else "")],
        ["geomean speedup over the naive seed (11 shapes)", _x(g["naive"])],
        ["geomean speedup over torch.compile (target > 1.0)", _x(g["torch_compile"])],
        ["geomean speedup over torch eager", _x(g["torch"])],
        [f">= {ROOFLINE_TARGET:.0%} of copy at 32768 x 4096 and above", _yes(v["roofline_target_met"])
         + (" (" + ", ".join(f"{k}: {100 * f:.0f}%" for k, f in v["frac_copy_large"].items()) + ")"
            if v["frac_copy_large"] else "")],
    ])
    md += ["", "## Per shape", "",
           "µs (median of CUDA-event-timed launches after an L2 flush), GB/s = (2·M·N·elt + 4·N) / time, "
           "% = GB/s / copy bandwidth. Baselines were re-timed round-robin with the best kernel in one worker; "
           "the template column comes from its own run.", ""]
    head = ["M x N"]
    for k in keys:
        head += [f"{LABEL[k]} µs", "GB/s", "%"]
    sp = [k for k in keys if k != "best"]
    head += [f"best vs {LABEL[k]}" for k in sp]
    if not rows:
        why = next((f"{p['status']}: {p.get('note', '')}" for p in verify["phases"] if p["name"] == "benchmark:best"),
                   "phase not reached")
        res = (verify.get("benchmark") or {}).get("best")
        if res:
            why = f"{res.get('status')}: {res.get('reason', '')}"
        md += [f"**The best kernel's benchmark matrix was not measured** ({abridge(why, '')})."]
    body = []
    for r in rows:
        cells = [f"{r.shape[0]} x {r.shape[1]}"]
        for k in keys:
            t = r.us.get(k)
            bw = gbps(r.shape, elt, t) if t else None
            cells += [_f(t), _f(bw, "{:.0f}"), _f(100 * bw / copy if bw and copy else None, "{:.0f}")]
        cells += [_x(r.speedup(k)) for k in sp]
        body.append(cells)
    if rows:
        body.append(["**geomean**", *([""] * (3 * len(keys))), *[f"**{_x(g[k])}**" for k in sp]])
        md += _md_table(head, body)
    if "bandwidth.png" in figs:
        md += ["", "![bandwidth per shape](bandwidth.png)"]
    notes = verify.get("baseline_notes") or ((verify.get("benchmark") or {}).get("best") or {}).get(
        "extra", {}).get("baseline_notes")
    if notes:
        md += ["", "Baselines not timed: " + "; ".join(f"{k}: {t}" for k, t in notes.items())]
    # held-out
    md += ["", "## Held-out generality shapes", "",
           "Gate (poisoned outputs, fresh inputs under every distribution, float64 reference, bitwise "
           "determinism, inputs unchanged) on shapes the search never saw, then times without baselines.", ""]
    hb, per = [], {}
    for key in ("best", "template", "naive"):
        res = (verify.get("heldout") or {}).get(key)
        hb.append([LABEL[key], str(res.get("status")) if res else "not run",
                   abridge((res or {}).get("reason", "") or "", "")])
        per[key] = _shapes_of(res)
    md += _md_table(["kernel", "status", "reason"], hb)
    held_keys = [k for k in ("best", "template", "naive") if per[k]]
    if held_keys:
        md += ["", *_md_table(["M x N", *(f"{LABEL[k]} µs / GB/s" for k in held_keys)],
                              [[f"{m} x {n}", *(f"{per[k][(m, n)]['time_us']:.1f} / {_bw(per[k][(m, n)]['gbps'])}"
                                                if (m, n) in per[k] else "-" for k in held_keys)]
                               for m, n in (tuple(s) for s in verify.get("shapes", {}).get("heldout", []))])]
    # other finalists' verification
    md += ["", "## Verification status of the finalists (benchmark matrix)", ""]
    fb = []
    for key in ("best", "template", "naive"):
        fin = (verify.get("finalists") or {}).get(key, {})
        res = (verify.get("benchmark") or {}).get(key)
        fb.append([LABEL[key], f"#{fin.get('candidate_id')}", str(fin.get("operator", "")),
                   _f(fin.get("search_objective"), "{:.3f}"), str(res.get("status")) if res else "not run",
                   _f(res.get("objective"), "{:.3f}") if res else "-", abridge((res or {}).get("reason", "") or "", "")])
    md += _md_table(["kernel", "candidate", "operator", "search objective", "status", "objective (11 shapes)",
                     "reason"], fb)
    # sanitizer / ncu
    md += ["", "## compute-sanitizer (best kernel)", ""]
    san = verify.get("sanitizer") or {}
    if san:
        md += _md_table(["tool", "errors", "clean", "summary"],
                        [[t, _f(r.get("errors"), "{}", "?"), _yes(r.get("clean")),
                          abridge("; ".join(r.get("summary_lines", [])) or r.get("note", ""), "")]
                         for t, r in san.items()])
        md += ["", f"Shapes replayed: {verify.get('shapes', {}).get('sanitizer')}."]
    else:
        md += ["Not run: " + "; ".join(f"{p['name']}: {p.get('note', p['status'])}" for p in verify["phases"]
                                       if p["name"].startswith("sanitize")) or "not run"]
    ncu = verify.get("ncu")
    md += ["", "## DRAM bytes (ncu)", ""]
    if ncu and "total_bytes" in ncu:
        md += [f"At {ncu['shape'][0]} x {ncu['shape'][1]}: {ncu['total_bytes'] / 1e6:.1f} MB moved "
               f"({ncu['read_bytes'] / 1e6:.1f} read, {ncu['write_bytes'] / 1e6:.1f} written) against the model's "
               f"{ncu['model_bytes'] / 1e6:.1f} MB ({ncu['total_bytes'] / ncu['model_bytes']:.3f}x); "
               f"{ncu['time_us']:.1f} µs under ncu."]
    else:
        md += ["Not measured" + (f": {ncu['error'][:300]}" if ncu and "error" in ncu else
                                 " (" + next((p.get("note", p["status"]) for p in verify["phases"]
                                              if p["name"] == "ncu"), "phase not reached") + ").")]
    # lineage
    md += ["", "## Lineage of the best kernel", "",
           f"Search objective = the run's objective on the search shapes ({objective_note(facts)}); "
           "gain = objective / parent's objective.", ""]
    if facts.lineage:
        md += _md_table(["step", "candidate", "operator", "edit (abridged)", "objective", "gain"],
                        [[str(s["step"]), f"#{s['id']}", s["operator"], abridge(s["edit_text"]),
                          _f(s["objective"], "{:.4f}"), _x(s["ratio"])] for s in facts.lineage])
        if "lineage.png" in figs:
            md += ["", "![lineage](lineage.png)"]
    else:
        md += ["No lineage: the store has no ok candidate."]
    # search dynamics
    md += ["", "## Search: coverage and QD score", ""]
    if metrics:
        last = metrics[-1]
        md += [f"Final: {last.get('evaluations')} evaluations, QD score {_f(last.get('qd_score'), '{:.3f}')}, "
               f"coverage {_f(100 * last['coverage'] if 'coverage' in last else None, '{:.2f}')}% "
               f"({last.get('n_elites')} elites), best objective {_f(last.get('best_objective'), '{:.4f}')}, "
               f"{_f(last.get('evals_per_s'), '{:.2f}')} evaluations/s over {_f(last.get('seconds'), '{:.0f}')} s."]
        if "search.png" in figs:
            md += ["", "![QD score, coverage, best objective](search.png)"]
    else:
        md += ["No metrics.jsonl in the run dir."]
    md += ["", "## Failures by status", ""]
    total = sum(facts.status_counts.values()) or 1
    md += _md_table(["status", "candidates", "share"],
                    [[s, str(n), f"{100 * n / total:.1f}%"] for s, n in
                     sorted(facts.status_counts.items(), key=lambda kv: -kv[1])])
    md += ["", "## Operator contributions (lessons memory)", "",
           "Counts are cumulative stages: proposed >= applied >= compiled >= passed the gate >= improved the "
           "archive.", ""]
    md += _md_table(["operator", "proposed", "applied", "compiled", "passed", "improved", "commonest failure"],
                    [[o["operator"], *(str(o[k]) for k in ("proposed", "applied", "compiled", "passed", "improved")),
                      abridge(o["top_failure"], "")] for o in facts.operators])
    helped = [o["operator"] for o in facts.operators if o["improved"] and o["operator"] != "seed"]
    never = [o["operator"] for o in facts.operators if not o["improved"] and o["operator"] != "seed"]
    md += ["", f"Produced improvements: {', '.join(helped) or 'none'}. Never helped: {', '.join(never) or 'none'}."]
    # method / versions / timings
    md += ["", "## Method and versions", "",
           "Search: `python -m evolve experiment=rmsnorm_h200` (search-time shape subset, every gate on: poisoned "
           "outputs, fresh inputs, float64 reference, bitwise determinism, inputs unchanged; a result above the "
           "measured copy roofline is rejected as too_fast_to_be_true). Verification: "
           "`experiments/rmsnorm_h200_verify.py` (cubins from ptxas loaded with cupy.cuda.Module().load; before each timed "
           "launch a read of 2 x L2 of clean memory, then a 200 µs hold of the stream so host launch overhead "
           "is not timed; median of repeats; kernel and baselines interleaved in one worker; "
           "every benchmarked output re-checked; compute-sanitizer over `experiments/sanitize_replay.py` with "
           "exact-size allocations). Libraries' weight: "
           + ("w cast to x's dtype (runs before 2026-12-08; workload option baseline_weight=x)"
              if ((facts.meta.get("config") or {}).get("workload") or {}).get("baseline_weight", "x") == "x"
              else "the kernel's fp32 w (baseline_weight=workload)") + ".", "",
           f"- Correctness gate: version {verify.get('gate_version', 'unrecorded (v1)')} (GATE.md); the search's "
           f"rows: {_gate_versions(facts)}",
           f"- Run versions (store meta): `{json.dumps(facts.meta.get('versions', {}))}`",
           f"- Verification versions: `{json.dumps(verify.get('versions', {}))}`", ""]
    tl = verify.get("search_timeline") or {}
    if tl:
        md += [f"Search command: start-up {_f(tl.get('startup_s'))} s (imports, config, GPU pool: workers, copy "
               f"bandwidth, baseline compilation, gate warm-up), search {_f(tl.get('search_s'))} s, teardown "
               f"(export, W&B) {_f(tl.get('teardown_s'))} s, total {_f(tl.get('total_s'))} s; {tl.get('rows')} "
               f"candidates, {_f(tl.get('evaluations_per_s'), '{:.2f}')} evaluations/s.", ""]
    md += _md_table(["verification phase", "status", "seconds", "note"],
                    [[p["name"], p["status"], _f(p.get("seconds"), "{:.1f}"), abridge(p.get("note", "") or "", "")]
                     for p in verify["phases"]])
    numbers = {"estimate": est, "copy_gbps": copy, "verdicts": v,
               "rows": [{"shape": list(r.shape), "us": r.us,
                         "gbps": {k: gbps(r.shape, elt, t) for k, t in r.us.items() if t},
                         "speedups": {k: r.speedup(k) for k in sp}} for r in rows],
               "status_counts": facts.status_counts, "lineage": facts.lineage, "operators": facts.operators,
               "helped": helped, "never_helped": never, "figures": figs}
    return "\n".join(md) + "\n", numbers


def write_report(run_dir: Path, verify_path: Path, out: Path) -> dict[str, Any]:
    """Write report.md, report.json and the figures into ``out``; returns report.json's content.
    ReportError for missing or malformed inputs."""
    verify = load_verify(verify_path)
    rows = shape_rows(verify)
    best_id = (verify.get("finalists") or {}).get("best", {}).get("candidate_id")
    facts = read_run(run_dir, best_id)
    metrics = load_metrics(run_dir / "metrics.jsonl")
    out.mkdir(parents=True, exist_ok=True)
    elt = {"bf16": 2, "fp16": 2, "fp32": 4}[verify["dtype"]]
    figs = figures(out, rows, elt, verify.get("copy_gbps"), metrics, facts.lineage, bool(verify.get("estimate")))
    text, numbers = render(verify, facts, metrics, figs)
    (out / "report.md").write_text(text)
    (out / "report.json").write_text(json.dumps(numbers, indent=1, default=str))
    return numbers


def _gate_versions(facts: Any) -> str:
    """The gate versions recorded in the store rows (metrics.extra.gate_version), with counts."""
    counts = getattr(facts, "gate_versions", None) or {}
    return ", ".join(f"gate {k}: {n} rows" for k, n in sorted(counts.items())) or "no rows"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, type=Path, help="run dir (store.sqlite, metrics.jsonl)")
    ap.add_argument("--verify", required=True, type=Path, help="verify.json of rmsnorm_h200_verify.py")
    ap.add_argument("--out", required=True, type=Path, help="folder for report.md, report.json and figures")
    args = ap.parse_args(argv)
    try:
        numbers = write_report(args.run, args.verify, args.out)
    except ReportError as e:
        print(f"rmsnorm_h200_report: {e}", file=sys.stderr)
        return 2
    v = numbers["verdicts"]
    print(f"wrote {args.out / 'report.md'}: geomean vs naive {_x(v['geomean_vs_naive'])}, vs torch.compile "
          f"{_x(v['geomean_vs_torch_compile'])}, gate {_yes(v['gate'])}, held-out {_yes(v['held_out'])}, "
          f"sanitizer {_yes(v['sanitizer_clean'])}" + (" (ESTIMATES)" if numbers["estimate"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
