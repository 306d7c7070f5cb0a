"""KDA fused recurrent forward on a GPU: are the seeds right, and how fast are they against fla?

For each kernel (the naive seed, the template seed and ``--variants`` template knob sets):
1. correctness, checked here directly (not through the gate): launch on fresh inputs at the gate shapes and
   two benchmark shapes, compare o and the final state (the inout buffer) with the float64 JAX reference
   (every element at small shapes, sampled (sequence, head) pairs at large ones): the largest error in units
   of the workload tolerance (atol + rtol |ref|; <= 1 passes, plus half a bf16 ulp for o) and fla's test
   criterion RMS(ref - out) / RMS(ref) (< 5e-3 passes);
2. timing at the 12 benchmark shapes (six scenarios run as recurrences, six decode batches), interleaved
   round-robin with fla ``fused_recurrent_kda`` (gate, beta sigmoid and L2 norm in its kernel), L2 flushed
   before each launch, CUDA events, median of ``--repeats``; the state buffer is restored from a pristine copy
   between launches by neither (its value does not change the work).

With ``--store`` (a KDA run's store) the run's best kernel is one of them (``search #id``): the check of a
search's product at every benchmark shape. ``--heldout`` checks and times the workload's held-out shapes too. Besides the
fastest kernel per shape, each kernel's own geomean speedup over fla is reported (the figure one kernel is
judged by).

Prints two tables and writes ``kda_h200.json`` under ``--out``. FlashKDA is not timed (CUTLASS build).
Usage: python experiments/kda_h200.py [--out DIR] [--repeats 10] [--variants 'cols=8,warps=2;cols=2,warps=8']
       python experiments/kda_h200.py --store RUN/store.sqlite --variants '' --heldout
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from experiments.kda_check import correctness_row, kernels_of, row_line

CHECK_SHAPES = [(1, 1), (1, 17), (2, 63), (3, 1, 63, 17), (1, 2048)]


# Checks whose host-side draw and float64 reference would exceed these are drawn on the GPU and checked at two
# sampled (sequence, head) pairs (``check_plan``).
BIG_TOKEN_HEADS = 1 << 16
BIG_STATE_PAIRS = 1 << 10


def is_big(shape: tuple[int, ...]) -> bool:
    """True when a check at ``shape`` (H, L_1, ..., L_N) must be drawn on the GPU and sampled: more than
    BIG_TOKEN_HEADS token-heads (the full JAX reference of every pair) or more than BIG_STATE_PAIRS
    (sequence, head) states (128 x 128 fp32 each: 1.6 GB at N = 256, H = 96)."""
    return sum(shape[1:]) * shape[0] > BIG_TOKEN_HEADS or (len(shape) - 1) * shape[0] > BIG_STATE_PAIRS


def check_plan(wl, heldout: bool = False) -> list[tuple[tuple[int, ...], str, int, bool]]:
    """(shape, distribution, seed, big) of every correctness check: every distribution at CHECK_SHAPES, the
    normal one at the varlen lengths with 8 heads and at the largest decode batch (256 x H = 96); with
    ``heldout``, the normal one and the long-memory one at each held-out shape too (a search's product is
    judged there as well: right on shapes it never saw)."""
    from workloads.kda.recurrent import VARLEN

    plan = [(s, d, 100 + i, is_big(s)) for s in CHECK_SHAPES for i, d in enumerate(wl.distributions)]
    plan += [(s, "normal", 100, is_big(s)) for s in [(8, *VARLEN), wl.benchmark_shapes[-1]]]
    if heldout:
        plan += [(tuple(s), d, 200 + i, is_big(tuple(s))) for s in wl.heldout_shapes
                 for i, d in enumerate(("normal", "long_memory")) if d in wl.distributions]
    return plan


def timed_shapes(wl, heldout: bool) -> list[tuple[int, ...]]:
    """The benchmark shapes, then (``heldout``) the held-out ones not among them."""
    return list(wl.benchmark_shapes) + ([s for s in wl.heldout_shapes if s not in wl.benchmark_shapes]
                                        if heldout else [])


def dry_run(args: argparse.Namespace) -> int:
    """Everything that needs no GPU: ptxas + ABI + occupancy for each kernel, the launch rule at every shape,
    inputs and the reference at the smallest check shape."""
    from evaluators.pipeline import prepare
    from targets.spec import resolve_gpu
    from workloads.kda import KDARecurrent

    gpu, wl = resolve_gpu(args.gpu), KDARecurrent()
    for name, k in kernels_of(wl, args.variants, args.store).items():
        p = prepare(k, wl, gpu, wl.benchmark_shapes + CHECK_SHAPES)
        print(f"{name:34s} regs {p.resources.registers:3d} spills {p.resources.spill_stores_bytes:4d} B "
              f"block {p.block} occupancy {p.occupancy.occupancy:.2f} grids "
              f"{[wl.launch_dims(s, k.launch)[0] for s in wl.benchmark_shapes[:3]]}")
    inputs = wl.make_inputs(CHECK_SHAPES[2], 100)
    o, s = wl.reference_pairs(inputs, None)
    print(f"reference at {CHECK_SHAPES[2]}: o {o.shape} finite {bool(np.isfinite(o).all())}, state {s.shape}")
    notes: dict[str, str] = {}
    print(f"fla baseline on this machine: {sorted(wl.baselines(inputs, CHECK_SHAPES[2], ('fla',), notes))} {notes}")
    print(f"would time {len(timed_shapes(wl, args.heldout))} shapes x "
          f"{len(kernels_of(wl, args.variants, args.store)) + 1} kernels, "
          f"{args.repeats} repeats each")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="experiments/results/kda_h200")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--variants", default="cols=8,warps=2;cols=2,warps=8;cols=4,warps=4,prefetch=0")
    ap.add_argument("--gpu", default=None, help="targets.spec GPU name (default: targets.spec.DEFAULT_GPU)")
    ap.add_argument("--store", default=None, help="a KDA run's store (.sqlite or .sqlite.xz): its best kernel too")
    ap.add_argument("--heldout", action="store_true", help="check and time the held-out shapes as well")
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU: compile every kernel through the front half, check the launch rule at every "
                         "shape and the reference on the smallest, print the plan")
    args = ap.parse_args()
    if args.dry_run:
        return dry_run(args)

    import cupy as cp

    from evaluators.gpu.args import build_args, launch_function, param_types
    from evaluators.gpu.benchmark import L2Flusher, median_us, time_interleaved
    from evaluators.pipeline import prepare
    from targets.spec import resolve_gpu
    from workloads.dtypes import storage_dtype, to_device, to_float64
    from workloads.kda import KDARecurrent

    gpu = resolve_gpu(args.gpu)
    wl = KDARecurrent()
    atol, rtol = wl.tolerance
    kernels = kernels_of(wl, args.variants, args.store)
    fns = {}
    for name, k in kernels.items():
        p = prepare(k, wl, gpu, wl.search_shapes)  # the evaluators' front half: ptxas, ABI, occupancy
        mod = cp.cuda.Module()
        mod.load(p.compiled.cubin)
        fns[name] = (mod.get_function(k.entry), param_types(k), k.launch, p.resources.registers, mod)

    def launch(name, inputs, out, shape):
        fn, types, lc, _, _ = fns[name]
        grid, block, smem = wl.launch_dims(shape, lc)
        launch_function(fn, grid, block, build_args(wl.abi, types, {**inputs, **out}, wl.scalars(shape), wl.entry), smem)

    results: dict = {"gpu": gpu.name, "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                     "correctness": [], "timing": []}
    print(f"device {results['device']}; tolerance atol {atol} rtol {rtol}\n")
    print(f"{'kernel':34s} {'regs':>4s} {'shape':>22s} {'dist':>14s} {'o tol':>8s} {'o rms':>9s} "
          f"{'S tol':>8s} {'S rms':>9s} ok")
    all_ok = True
    for shape, dist, seed, big_shape in check_plan(wl, args.heldout):
        # One reference per (shape, distribution), every kernel. A large shape (the reference of every
        # pair, or the state: 256 x 96 x 128 x 128 fp32 = 1.6 GB at decode B=256, H=96) is drawn on the GPU
        # and checked at sampled (sequence, head) pairs only: drawing it with NumPy, its full float64
        # reference and three full-state comparisons took the whole 55 s step on the H200 (2026-12-01).
        host = ({k: cp.asnumpy(v) for k, v in wl.make_inputs(shape, seed, dist, cp).items()} if big_shape
                else wl.make_inputs(shape, seed, dist))
        pairs = wl.sample_pairs(host, 2) if big_shape else None
        ro, rs = wl.reference_pairs(host, pairs)
        at = (slice(None),) if pairs is None else tuple(np.array(x) for x in zip(*pairs))
        rs = rs[at]
        for name in fns:
            inputs = to_device(host, cp)  # the very values the reference saw (bf16 as uint16 bits)
            out = {"o": cp.full((sum(shape[1:]), shape[0], 128), 0x7FA5, dtype=storage_dtype("bf16", cp))}
            launch(name, inputs, out, shape)
            cp.cuda.get_current_stream().synchronize()
            o = to_float64(out["o"].get(), "bf16")
            st = (inputs["state"] if pairs is None else inputs["state"][tuple(cp.asarray(a) for a in at)]
                  ).get().astype(np.float64)
            row = correctness_row(name, shape, dist, o, ro, st, rs, atol, rtol, pairs)
            all_ok &= row["ok"]
            results["correctness"].append(row)
            print(row_line(row, shape, fns[name][3], 34), flush=True)

    flush = L2Flusher.for_device()
    print(f"\n{'shape':>28s} " + " ".join(f"{n[:22]:>22s}" for n in fns) + f" {'fla':>10s} {'best/fla':>9s}")
    ratios = []
    own: dict[str, list[float]] = {n: [] for n in fns}  # per kernel: fla / its time, benchmark shapes only
    for shape in timed_shapes(wl, args.heldout):
        heldout = shape not in wl.benchmark_shapes
        inputs = wl.make_inputs(shape, 7, "normal", cp)
        out = {"o": cp.empty((sum(shape[1:]), shape[0], 128), dtype=storage_dtype("bf16", cp))}
        timed = {n: (lambda n=n, i=inputs, o=out, s=shape: launch(n, i, o, s)) for n in fns}
        notes: dict[str, str] = {}
        timed.update(wl.baselines(inputs, shape, ("fla",), notes))
        t0 = time.perf_counter()
        times = {n: median_us(v) for n, v in time_interleaved(timed, flush, warmup=2, repeats=args.repeats).items()}
        best = min(times[n] for n in fns)
        ratio = times["fla"] / best if "fla" in times else float("nan")
        if "fla" in times and not heldout:
            ratios.append(ratio)
            for n in fns:
                own[n].append(times["fla"] / times[n])
        results["timing"].append({"shape_heads": shape[0], "lengths": list(shape[1:]), "us": times,
                                  "heldout": heldout, "fla_note": notes.get("fla"),
                                  "seconds": time.perf_counter() - t0})
        label = ("held-out " if heldout else "") + f"H={shape[0]} N={len(shape) - 1} T={sum(shape[1:])}"
        print(f"{label:>28s} " + " ".join(f"{times[n]:22.1f}" for n in fns)
              + f" {times.get('fla', float('nan')):10.1f} {ratio:9.3f}" + (f"  fla: {notes['fla']}" if notes else ""))
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else float("nan")
    results["geomean_best_seed_speedup_over_fla"] = geo
    print(f"\ngeomean speedup of the fastest kernel per shape over fla: {geo:.3f} "
          f"({len(ratios)} benchmark shapes; times in µs; FlashKDA not timed)")
    results["geomean_speedup_over_fla"] = {n: math.exp(sum(map(math.log, r)) / len(r)) if r else float("nan")
                                           for n, r in own.items()}
    for n, g in results["geomean_speedup_over_fla"].items():
        worst = min(own[n]) if own[n] else float("nan")
        print(f"  {n:34s} geomean {g:.3f}x fla, worst shape {worst:.3f}x")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "kda_h200.json").write_text(json.dumps(results, indent=1, default=str))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
