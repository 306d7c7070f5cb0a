"""Static model study: what the CPU-only evaluator estimates for the RMSNorm seeds and template variants,
how long it takes per candidate, and how much faster ptxas' verify-only mode rejects PTX.

    python experiments/static_model.py                  # all three tables
    python experiments/static_model.py --no-variants    # seeds only (no nvcc builds)

Every time printed in the estimate table is a model estimate (evaluators/static.py), not a measurement.
"""

from __future__ import annotations

import argparse
import statistics
import time

from rich.console import Console
from rich.table import Table

from evaluators.static import StaticEvaluator
from evaluators.toolchain import clear_cache, compile_ptx, ptxas_version
from population.kernel import Kernel
from workloads.registry import get_workload

VARIANTS = [
    {"vec": 1},
    {"vec": 2},
    {"vec": 4},
    {"keep_in_regs": 0},
    {"threads": 128},
    {"threads": 512},
    {"threads": 1024},
    {"rows_per_cta": 4, "threads": 256},
]


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        clear_cache()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def verify_timing(kernels: dict[str, Kernel], repeats: int, console: Console) -> None:
    """Median wall time of ptxas: full compile for sm_90 vs verify-only (compute_90), cache cleared."""
    table = Table(title=f"ptxas full compile vs verify-only ({ptxas_version()}), median of {repeats}")
    for col in ("kernel", "PTX lines", "sm_90 -v (ms)", "compute_90 (ms)", "speed-up"):
        table.add_column(col, justify="right")
    for name, k in kernels.items():
        full = _median_seconds(lambda k=k: compile_ptx(k), repeats)
        verify = _median_seconds(lambda k=k: compile_ptx(k, verify_only=True), repeats)
        table.add_row(name, str(k.canonical_ptx.count("\n")), f"{full * 1e3:.1f}", f"{verify * 1e3:.1f}",
                      f"{full / verify:.1f}x")
    console.print(table)


def estimate_table(ev: StaticEvaluator, kernels: dict[str, Kernel], console: Console) -> None:
    """Per kernel: objective, resources, descriptors; per search shape: estimated µs, GB/s, % of copy."""
    wl = ev.workload
    shapes = [tuple(s) for s in wl.search_shapes]
    table = Table(title=f"Static estimates, {wl.name} {wl.dtype} on {ev.gpu.name} (ESTIMATES, not measurements)")
    for col in ("kernel", "objective", "regs", "occ", "traffic", *[f"{s[0]}x{s[1]} µs (GB/s)" for s in shapes]):
        table.add_column(col, justify="right")
    for name, k in kernels.items():
        r = ev.evaluate(k)
        if not r.ok:
            table.add_row(name, str(r.status), "", "", "", *[r.reason[:40]] + [""] * (len(shapes) - 1))
            continue
        cells = [f"{s.time_us:.1f} ({s.gbps:.0f}, {100 * s.frac_copy:.0f}%)" for s in r.shapes]
        table.add_row(name, f"{r.objective:.3f}", str(r.resources.registers), f"{r.occupancy.occupancy:.2f}",
                      f"{r.features['traffic_ratio']:.2f}", *cells)
    console.print(table)


def overhead_table(ev: StaticEvaluator, kernels: dict[str, Kernel], repeats: int, console: Console) -> None:
    """Evaluator time per candidate once ptxas is cached (fresh Kernel objects, so only ptxas is reused)."""
    table = Table(title=f"Static evaluator overhead per candidate after ptxas (median of {repeats})")
    for col in ("kernel", "ms / candidate", "candidates / s"):
        table.add_column(col, justify="right")
    for name, k in kernels.items():
        ev.evaluate(k)
        times = []
        for _ in range(repeats):
            fresh = Kernel(module=k.module, entry=k.entry, launch=k.launch)
            _ = fresh.identity  # printing and hashing: the engine has paid for it before evaluation
            t = time.perf_counter()
            ev.evaluate(fresh)
            times.append(time.perf_counter() - t)
        med = statistics.median(times)
        table.add_row(name, f"{med * 1e3:.1f}", f"{1 / med:.0f}")
    console.print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="rmsnorm")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-variants", action="store_true", help="seeds only (template variants need nvcc)")
    args = ap.parse_args()
    console = Console(width=170)
    wl = get_workload(args.workload, dtype=args.dtype)
    seeds = wl.seeds()
    kernels = {"naive seed": seeds[0], "template (default knobs)": seeds[1]}
    if not args.no_variants:
        for knobs in VARIANTS:
            label = " ".join(f"{k}={v}" for k, v in knobs.items())
            kernels[f"template {label}"] = wl.instantiate({**wl.default_knobs, **knobs})
    ev = StaticEvaluator(wl, gpu=args.gpu)
    verify_timing({"naive seed": seeds[0], "template": seeds[1]}, args.repeats, console)
    estimate_table(ev, kernels, console)
    overhead_table(ev, {"naive seed": seeds[0], "template": seeds[1]}, args.repeats, console)


if __name__ == "__main__":
    main()
