"""Nsight Compute profiles of RMSNorm template sets side by side: where a long-row kernel's time goes.

Usage: ``python experiments/ncu_profile.py [--long-rows 65536,131072] [--knobs JSON ...] [--out DIR]``.
Per row length N (default 65536), the TUNED_KNOBS set and each LONG_ROW_CANDIDATES[N] set (workloads/rmsnorm.py)
are instantiated, compiled for sm_90 and profiled at the benchmark shape (M, N) under ncu, one launch each
(``evaluators.gpu.ncu.profile_launch``: clocks left as found, fresh normal inputs); ``--knobs`` adds sets of
one's own (a JSON object per set, profiled at every N). The table (markdown, one column a set) gives the
duration, DRAM throughput (% of peak, ncu's SpeedOfLight), DRAM bytes against the compulsory bytes
(``bytes_moved``), L2 hit rate, occupancy, waves, the SMs' active share of the elapsed cycles (a tail or an
idle SM shows there), and the warp stall reasons (cycles per issued instruction, ncu's WarpStateStats terms);
the JSON has every metric ncu reported. About 10-20 s a set on an H200.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluators.gpu.ncu import NcuError, profile_launch
from workloads.rmsnorm import BENCHMARK_SHAPES, LONG_ROW_CANDIDATES, RMSNorm, tuned_knobs

STALLS = ("long_scoreboard", "barrier", "membar", "short_scoreboard", "lg_throttle", "mio_throttle", "wait",
          "drain", "no_instruction", "math_pipe_throttle", "not_selected", "selected", "branch_resolving",
          "dispatch_stall", "sleeping")
METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
           "dram__throughput.avg.pct_of_peak_sustained_elapsed", "lts__t_sector_hit_rate.pct",
           "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__cycles_active.avg", "sm__cycles_elapsed.avg",
           "smsp__average_warps_active_per_issue_active.ratio",
           *(f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio" for s in STALLS))
SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats")


def profile(wl: RMSNorm, knobs: dict[str, int], shape: tuple[int, int]) -> dict[str, float]:
    """Every metric ncu reports for one launch of the template set ``knobs`` at ``shape``; the raw metrics alone
    when ncu refuses the sections (and the reverse), so an ncu without one of them still gives a column."""
    kern = wl.instantiate(knobs)
    try:
        return profile_launch(kern, wl, shape, arch="sm_90", metrics=METRICS, sections=SECTIONS)
    except NcuError as e:
        print(f"  ncu with metrics and sections failed ({str(e)[-200:]}); the sections alone", flush=True)
        return profile_launch(kern, wl, shape, arch="sm_90", sections=SECTIONS)


def rows_of(vals: dict[str, float], compulsory: int) -> dict[str, str]:
    """The table's cells for one profile (``-`` where ncu gave no value)."""
    def g(name: str) -> float | None:
        return vals.get(name)

    def f(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    dram = (g("dram__bytes_read.sum") or 0) + (g("dram__bytes_write.sum") or 0)
    active, elapsed = g("sm__cycles_active.avg"), g("sm__cycles_elapsed.avg")
    out = {"duration (µs)": f(None if g("gpu__time_duration.sum") is None else g("gpu__time_duration.sum") / 1e3,
                               ".1f"),
           "DRAM throughput (% of peak)": f(g("dram__throughput.avg.pct_of_peak_sustained_elapsed"), ".1f"),
           "DRAM bytes / compulsory": f(dram / compulsory if dram else None, ".3f"),
           "L2 hit rate (%)": f(g("lts__t_sector_hit_rate.pct"), ".1f"),
           "achieved occupancy (%)": f(g("sm__warps_active.avg.pct_of_peak_sustained_active"), ".1f"),
           "theoretical occupancy (%)": f(g("Theoretical Occupancy"), ".1f"),
           "waves per SM": f(g("Waves Per SM"), ".2f"),
           "registers / thread": f(g("Registers Per Thread"), ".0f"),
           "SM active / elapsed cycles": f(active / elapsed if active and elapsed else None, ".3f"),
           "warp cycles per issue": f(g("smsp__average_warps_active_per_issue_active.ratio"), ".1f")}
    for s in STALLS:
        out[f"stall {s}"] = f(g(f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio"), ".2f")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--long-rows", default="65536", help="comma-separated row lengths N (benchmark shapes)")
    ap.add_argument("--knobs", action="append", default=[], help="a JSON object of template knobs (repeatable)")
    ap.add_argument("--no-candidates", action="store_true", help="leave LONG_ROW_CANDIDATES out")
    ap.add_argument("--out", default=os.environ.get("OUT", ""), help="folder for ncu_profile.md and .json")
    args = ap.parse_args()
    wl = RMSNorm("bf16")
    try:
        extra = [json.loads(k) for k in args.knobs]
    except json.JSONDecodeError as e:
        raise SystemExit(f"--knobs: not a JSON object: {e}") from None
    md, dump = ["# RMSNorm bf16 long rows under Nsight Compute (one launch each, clocks as found)", ""], []
    for n in (int(x) for x in args.long_rows.split(",")):
        shape = next((s for s in BENCHMARK_SHAPES if s[1] == n), None)
        if shape is None:
            raise SystemExit(f"--long-rows: {n} is not a benchmark row length ({[s[1] for s in BENCHMARK_SHAPES]})")
        sets = [("tuned", tuned_knobs(n))]
        sets += [] if args.no_candidates else [(f"cand{i}", k) for i, k in enumerate(LONG_ROW_CANDIDATES.get(n, []))]
        sets += [(f"knobs{i}", k) for i, k in enumerate(extra)]
        cols: list[tuple[str, dict[str, str]]] = []
        for tag, knobs in sets:
            print(f"N={n} {tag} {knobs}", flush=True)
            try:
                vals = profile(wl, knobs, shape)
            except NcuError as e:
                print(f"  failed: {str(e)[-400:]}", flush=True)
                continue
            dump.append({"shape": list(shape), "tag": tag, "knobs": knobs, "metrics": vals})
            cols.append((tag, rows_of(vals, wl.bytes_moved(shape))))
            print("  " + ", ".join(f"{k} {v}" for k, v in list(cols[-1][1].items())[:6]), flush=True)
        if not cols:
            continue
        md += [f"## {shape[0]} x {n}", "", *(f"- `{t}`: {json.dumps(k, sort_keys=True)}" for t, k in sets), "",
               "| metric | " + " | ".join(t for t, _ in cols) + " |", "|---|" + "---|" * len(cols)]
        md += [f"| {name} | " + " | ".join(c[name] for _, c in cols) + " |" for name in cols[0][1]] + [""]
    text = "\n".join(md) + "\n"
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "ncu_profile.md").write_text(text)
        (Path(args.out) / "ncu_profile.json").write_text(json.dumps(dump, indent=1))
    return 0 if dump else 1


if __name__ == "__main__":
    raise SystemExit(main())
