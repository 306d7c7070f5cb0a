"""RMSNorm forward on the GPU: naive seed, template variants and library baselines over the benchmark matrix.

Every kernel goes through the full GPUPool path (ptxas -> cubin -> gate on the gate shapes -> benchmark with
L2 flush, CUDA events, median of repeats, baselines re-timed round-robin in the same worker). Prints a markdown
table: per shape, µs / GB/s / % of the measured device-to-device copy bandwidth for the naive seed, the best
template variant (best geomean over the shapes), torch eager, torch.compile (and Liger/QuACK when importable),
and the speedups of the best variant. Writes it to experiments/results/rmsnorm_baselines_<dtype>.md and $OUT.

Usage (GPU machine): ``python experiments/rmsnorm_baselines.py [--dtype bf16] [--shapes benchmark] [--repeats 20]``

``--long-rows [N,N,...]``: instead, per benchmark row length N (default 16384, 32768, 65536, 131072, 262144) the
TUNED_KNOBS set, the shared-memory staging candidates (workloads.rmsnorm.LONG_ROW_CANDIDATES) and the w-in-registers
candidates (WREG_CANDIDATES), each through the whole gate and then timed at that one benchmark shape only (the
library baselines interleaved with the TUNED_KNOBS set, under every ``--baseline-weights`` definition); prints µs and
% of the device-to-device copy per variant beside the TUNED_KNOBS set, and writes rmsnorm_long_rows_<dtype>.md/.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluators.provenance import versions as package_versions
from evaluators.types import EvalResult, Status, geomean
from workloads.rmsnorm import (
    BENCHMARK_SHAPES,
    LONG_ROW_CANDIDATES,
    SHORT_ROW_CANDIDATES,
    WREG_CANDIDATES,
    RMSNorm,
    tuned_knobs,
)

# A handful of template knob sets spanning threads per row, registers vs re-read, and cache hints.
VARIANTS: list[dict[str, int]] = [
    # The template v2 sets predicted per N range before any measurement (GPU_NOTES.md), smallest N first;
    # workloads.rmsnorm.TUNED_KNOBS now holds the fastest of all these variants per N.
    {"threads": 256, "rows_per_cta": 32, "max_chunks": 4, "row_iters": 2},  # N <= 256
    {"threads": 256, "rows_per_cta": 16, "max_chunks": 4, "row_iters": 4},  # N <= 512
    {"threads": 256, "rows_per_cta": 8, "max_chunks": 4, "row_iters": 2},  # N <= 1024
    {"threads": 256, "rows_per_cta": 4, "max_chunks": 4, "row_iters": 2},  # N <= 2048
    {"threads": 256, "rows_per_cta": 2, "max_chunks": 4, "row_iters": 2},  # N <= 4096
    {"threads": 256, "rows_per_cta": 1, "max_chunks": 4},  # N <= 8192
    {"threads": 512, "rows_per_cta": 1, "max_chunks": 4},  # N <= 16384
    {"threads": 512, "rows_per_cta": 1, "max_chunks": 8},  # N <= 32768
    {"threads": 512, "cluster": 2, "max_chunks": 8},  # N <= 65536
    {"threads": 512, "cluster": 4, "max_chunks": 8},  # N <= 131072
    {"threads": 512, "cluster": 8, "max_chunks": 8},  # N <= 262144
    # Alternatives the GPU decides between: w held in registers over the row loop, wider clusters, cache hints.
    {"threads": 256, "rows_per_cta": 32, "max_chunks": 4, "row_iters": 4, "w_regs": 1},
    {"threads": 256, "rows_per_cta": 2, "max_chunks": 4, "row_iters": 2, "w_regs": 1},
    {"threads": 512, "cluster": 8, "max_chunks": 4},
    {"threads": 1024, "cluster": 8, "max_chunks": 4},
    {"threads": 256, "cluster": 2, "max_chunks": 8},  # 4 CTAs/SM instead of 2 for N = 32768 / 65536 / 131072
    {"threads": 256, "cluster": 4, "max_chunks": 8},
    {"threads": 256, "cluster": 8, "max_chunks": 8},
    {"threads": 512, "rows_per_cta": 1, "max_chunks": 8, "cache_hint": 1},
    {},  # defaults: 256 threads, 1 row per CTA, 16-byte accesses, row in registers (8 chunks)
    {"threads": 128, "rows_per_cta": 4},  # best v1 set by geomean (run 3)
]


def versions() -> dict[str, str]:
    return package_versions(("torch", "cupy", "numpy", "triton", "liger_kernel"))


def table(wl: RMSNorm, rows: dict[str, EvalResult], copy_gbps: float) -> str:
    """Markdown: one row per shape, µs | GB/s | % copy for each kernel and baseline."""
    naive, best = rows["naive seed"], rows["best template"]
    base_names = [n for n in ("torch", "torch_compile", "liger", "quack")
                  if any(n in s.baseline_us for s in best.shapes)]
    head = ["M x N", "naive µs", "naive GB/s", "naive %", "best µs", "best GB/s", "best %"]
    for n in base_names:
        head += [f"{n} µs", f"{n} GB/s", f"{n} %"]
    head += [f"best vs {n}" for n in ["naive", *base_names]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    speed: dict[str, list[float]] = {n: [] for n in ["naive", *base_names]}
    for sn, sb in zip(naive.shapes, best.shapes):
        cells = [f"{sb.shape[0]} x {sb.shape[1]}"]
        for s in (sn, sb):
            cells += [f"{s.time_us:.1f}", f"{s.gbps:.0f}", f"{100 * s.gbps / copy_gbps:.0f}"]
        for n in base_names:
            us = sb.baseline_us.get(n)
            g = wl.gbps(sb.shape, us) if us else 0.0
            cells += [f"{us:.1f}", f"{g:.0f}", f"{100 * g / copy_gbps:.0f}"] if us else ["-", "-", "-"]
        for n in speed:
            ref = sn.time_us if n == "naive" else sb.baseline_us.get(n)
            if ref:
                speed[n].append(ref / sb.time_us)
            cells.append(f"{ref / sb.time_us:.2f}x" if ref else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("| geomean | | | | | | |" + " |" * (3 * len(base_names)) + " "
                 + " | ".join(f"{geomean(v):.2f}x" for v in speed.values()) + " |")
    return "\n".join(lines)


def dispatch_table(wl: RMSNorm, variants: dict[str, EvalResult], copy_gbps: float) -> str:
    """Markdown: per shape, the fastest variant that passed (what a per-row-length dispatch over the variants
    would run), its µs / GB/s / % of copy and its speedup over each baseline timed beside it; geomean last."""
    ok = {k: v for k, v in variants.items() if v.status == Status.OK and v.shapes}
    if not ok:
        return "(no variant passed)"
    shapes = [s.shape for s in next(iter(ok.values())).shapes]
    names = [n for n in ("torch", "torch_compile", "liger", "quack") if any(n in s.baseline_us for r in ok.values()
                                                                   for s in r.shapes)]
    lines = ["| M x N | fastest variant | µs | GB/s | % copy | " + " | ".join(f"vs {n}" for n in names) + " |",
             "|---|---|---|---|---|" + "---|" * len(names)]
    speed: dict[str, list[float]] = {n: [] for n in names}
    for i, shape in enumerate(shapes):
        label, r = min(ok.items(), key=lambda kv: kv[1].shapes[i].time_us)
        s = r.shapes[i]
        cells = [f"{shape[0]} x {shape[1]}", f"`{label}`", f"{s.time_us:.1f}", f"{s.gbps:.0f}",
                 f"{100 * s.gbps / copy_gbps:.0f}"]
        for n in names:
            sp = s.speedups.get(n)
            if sp:
                speed[n].append(sp)
            cells.append(f"{sp:.2f}x" if sp else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("| geomean | | | | | " + " | ".join(f"{geomean(v):.2f}x" if v else "-" for v in speed.values()) + " |")
    return "\n".join(lines)


LONG_ROWS_DEFAULT = (16384, 32768, 65536, 131072, 262144)


RESULTS_DIR = Path(__file__).resolve().parent / "results"


def long_rows(wl: RMSNorm, ns: list[int], repeats: int, out: str, results_dir: Path | None = RESULTS_DIR,
              weights: tuple[str, ...] = ("workload", "x")) -> int:
    """The ``--long-rows`` study (module docstring): per N the TUNED_KNOBS set first (the library baselines
    interleaved with it), then each candidate of SHORT_ROW_CANDIDATES[N], LONG_ROW_CANDIDATES[N] and
    WREG_CANDIDATES[N] (any benchmark N: the name is historical), gated and timed at
    the benchmark shape (M, N), in a GPUPool whose libraries get w as ``weights[0]`` says; then the TUNED_KNOBS
    set again with the baselines in one more pool per other entry of ``weights`` (``workloads.rmsnorm_baselines``:
    ``workload`` = fp32 w, ``x`` = w in x's dtype), so the table shows what the weight's dtype does to each
    library. The table goes to ``results_dir`` and ``out`` (either may be empty). Returns 0 when every variant
    passed the gate, 1 otherwise."""
    from evaluators.gpu.pool import GPUPool

    shapes = {n: next(s for s in BENCHMARK_SHAPES if s[1] == n) for n in ns}
    rows: list[tuple[int, str, str, EvalResult]] = []
    copy, device = 0.0, "?"
    for wi, weight in enumerate(weights):
        wlw = RMSNorm(wl.dtype, wl.eps, baseline_weight=weight)
        with GPUPool(wlw, shapes=[shapes[ns[0]]], baselines="interleaved", repeats=repeats, timeout_s=300,
                     check_output="all", seed=2026) as pool:
            copy = pool.copy_gbps
            for n in ns:
                cands = [("tuned", tuned_knobs(n))]
                if wi == 0:
                    cands += [*(("short", k) for k in SHORT_ROW_CANDIDATES.get(n, [])),
                              *(("smem", k) for k in LONG_ROW_CANDIDATES.get(n, [])),
                              *(("wregs", k) for k in WREG_CANDIDATES.get(n, []))]
                for tag, knobs in cands:
                    kern = wlw.instantiate(knobs)
                    label = f"{tag} " + " ".join(f"{k}={v}" for k, v in sorted(knobs.items()))
                    # the libraries are timed beside the tuned set only (the candidates' ratio is to that set)
                    r = pool.evaluate(kern, shapes=[shapes[n]], baselines="interleaved" if tag == "tuned" else "none")
                    rows.append((n, weight, label, r))
                    s = r.shapes[0] if r.shapes else None
                    print(f"N={n:>6} w={weight:<8} {r.status.value:>14} " + (
                          f"{s.time_us:8.1f} us {100 * s.gbps / copy:5.1f} % copy " if s else "")
                          + f"smem={kern.launch.dynamic_smem_bytes} {label} {r.reason[:160]}", flush=True)
            device = pool.info[0].get("device", "?")
    md = [f"# RMSNorm forward, {wl.dtype} x, fp32 w: long rows, TUNED_KNOBS vs candidates, libraries by weight dtype",
          "", f"GPU {device}; {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; device-to-device copy {copy:.0f} GB/s. "
          f"Versions: {json.dumps(versions())}. One shape per N (the benchmark M); gate first; median of {repeats}. "
          "Libraries' w: `workload` = the fp32 w the kernel reads, `x` = cast to x's dtype (2 bytes).", "",
          "| M x N | libraries' w | variant | status | µs | % copy | vs tuned | libraries (% copy) |",
          "|---|---|---|---|---|---|---|---|"]
    tuned_us: dict[int, float] = {}
    for n, weight, label, r in rows:
        s = r.shapes[0] if r.shapes and r.status == Status.OK else None
        if s and label.startswith("tuned") and n not in tuned_us:
            tuned_us[n] = s.time_us
        base = ", ".join(f"{b} {100 * wl.gbps(s.shape, us) / copy:.1f}" for b, us in s.baseline_us.items()) if s else ""
        md.append(f"| {shapes[n][0]} x {n} | {weight} | `{label}` | {r.status.value} | " + (
            f"{s.time_us:.1f} | {100 * s.gbps / copy:.1f} | {tuned_us.get(n, s.time_us) / s.time_us:.3f}x | {base} |"
            if s else f"- | - | - | {r.reason[:80]} |"))
    text = "\n".join(md) + "\n"
    print(text)
    for folder in filter(None, [str(results_dir or ""), out]):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"rmsnorm_long_rows_{wl.dtype}.md").write_text(text)
        (Path(folder) / f"rmsnorm_long_rows_{wl.dtype}.json").write_text(json.dumps(
            [{"n": n, "baseline_weight": w, "label": lb, **r.to_json()} for n, w, lb, r in rows], default=str))
    return 0 if all(r.status == Status.OK for _, _, _, r in rows) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--shapes", default="benchmark", help="benchmark | search | heldout")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--variants", type=int, default=len(VARIANTS), help="how many of VARIANTS to try")
    ap.add_argument("--only", default="", help="comma-separated indices into VARIANTS to try instead")
    ap.add_argument("--out", default=os.environ.get("OUT", ""), help="extra folder for the table and JSON")
    ap.add_argument("--long-rows", nargs="?", const=",".join(map(str, LONG_ROWS_DEFAULT)), default="",
                    help="comma-separated row lengths: TUNED_KNOBS vs LONG_ROW_CANDIDATES at those benchmark shapes")
    ap.add_argument("--baseline-weights", default="workload,x",
                    help="how the libraries get w, comma-separated (workload: fp32 as the kernel; x: x's dtype); "
                         "--long-rows times the libraries under each, the rest under the first")
    args = ap.parse_args()
    weights = tuple(args.baseline_weights.split(","))
    if args.long_rows:
        return long_rows(RMSNorm(args.dtype), [int(n) for n in args.long_rows.split(",")], args.repeats, args.out,
                         weights=weights)

    from evaluators.gpu.pool import GPUPool

    wl = RMSNorm(args.dtype, baseline_weight=weights[0])
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    with GPUPool(wl, shapes=args.shapes, baselines="interleaved", repeats=args.repeats, timeout_s=300, check_output="all",
                 seed=2026) as pool:
        results: dict[str, EvalResult] = {"naive seed": pool.evaluate(wl.seeds()[0])}
        variants = {}
        chosen = ([VARIANTS[int(i)] for i in args.only.split(",")] if args.only
                  else VARIANTS[: args.variants])
        for knobs in chosen:
            k = wl.instantiate(knobs)
            label = " ".join(f"{n}={v}" for n, v in sorted(dict(k.launch.knobs).items()))
            variants[label] = pool.evaluate(k)
            r = variants[label]
            print(f"{r.status.value:>14} objective={r.objective} {label} {r.reason[:160]}", flush=True)
            print("    GB/s per shape:", " ".join(f"{s.shape[1]}:{s.gbps:.0f}" for s in r.shapes), flush=True)
        for label, r in results.items():
            print(f"{label}: GB/s per shape:", " ".join(f"{s.shape[1]}:{s.gbps:.0f}" for s in r.shapes))
            if r.shapes:
                for n in r.shapes[0].baseline_us:
                    print(f"  {n}:", " ".join(f"{s.shape[1]}:{wl.gbps(s.shape, s.baseline_us[n]):.0f}"
                                             for s in r.shapes if n in s.baseline_us))
            print("  notes:", r.extra.get("baseline_notes"), flush=True)
        copy = pool.copy_gbps
        device = pool.info[0].get("device", "?")
    if results["naive seed"].status != Status.OK:
        print("naive seed failed:", results["naive seed"].reason)
        return 1
    name = f"rmsnorm_baselines_{args.dtype}{'' if args.shapes == 'benchmark' else '_' + args.shapes}"
    folders = [Path(p) for p in filter(None, [str(Path(__file__).resolve().parent / "results"), args.out])]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.json").write_text(json.dumps(
            {k: v.to_json() for k, v in {**results, **{f"variant {k}": v for k, v in variants.items()}}.items()},
            default=str, indent=1))
    ok = {k: v for k, v in variants.items() if v.status == Status.OK}
    if not ok:
        print("no template variant passed")
        return 1
    best_label = max(ok, key=lambda k: ok[k].objective or 0)
    results["best template"] = ok[best_label]
    md = [f"# RMSNorm forward, {args.dtype} x, fp32 w: {args.shapes} shapes", "",
          f"GPU {device}; {started}; device-to-device copy {copy:.0f} GB/s (read + write, 1 GiB, median).",
          f"Versions: {json.dumps(versions())}.",
          "Method: ptxas sm_90 cubin loaded with cupy.cuda.Module().load; gate first (poisoned outputs, fresh "
          "inputs, float64 reference, bitwise determinism); timing = CUDA events around each launch after reading "
          f"2 x L2 and a 200 µs stream hold, {args.repeats} repeats after 3 warm-ups, median; candidate and "
          "baselines round-robin in one process; every benchmarked output re-checked against float64. "
          f"GB/s = (2*M*N*elt + 4*N) / time. Libraries' w: {weights[0]} (workloads.rmsnorm_baselines).",
          f"Best template variant (by geomean speedup over torch eager): `{best_label}`.", "",
          table(wl, results, copy), "",
          "Fastest passing variant per shape (what a dispatch on the row length over these variants would run; "
          "speedups against the baselines timed beside that variant):", "",
          dispatch_table(wl, variants, copy), "", "Variants (geomean speedup over torch eager on these shapes):", ""]
    for label, r in sorted(variants.items(), key=lambda kv: -(kv[1].objective or 0)):
        md.append(f"- `{label}`: {r.status.value}, {r.objective and round(r.objective, 3)}"
                  + (f" ({r.reason[:120]})" if r.status != Status.OK else ""))
    notes = results["best template"].extra.get("baseline_notes", {})
    if notes:
        md += ["", "Baselines skipped: " + "; ".join(f"{k}: {v}" for k, v in notes.items())]
    text = "\n".join(md) + "\n"
    print(text)
    for folder in folders:
        (folder / f"{name}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
