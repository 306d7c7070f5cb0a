"""KDA chunked prefill on a GPU: is the pipeline right, and how fast is it against fla's chunk_kda?

The pipeline (workloads/kda/chunk.py): ``intra`` (reference stage, CuPy fp32: L2 norms, gate, UT transform),
``state_pass`` (the evolved stage: the naive seed, the template seed and ``--variants`` knob sets), ``output``
(reference stage). For each state-pass kernel:

1. correctness, checked directly (not through the gate): the whole pipeline through the GPU worker's launcher
   (``evaluators.gpu.worker.make_launcher``, the same path the gate takes) on fresh inputs at small shapes
   (odd lengths, chunk edges, a varlen batch with a length-1 sequence; every input distribution) and at one
   search shape, o and the final state (the inout buffer) against the float64 JAX recurrence (every element at
   the small shapes, two sampled (sequence, head) pairs at the search shape): the largest error in units of the
   workload tolerance (<= 1 passes; o plus half a bf16 ulp) and fla's test criterion RMS(ref - out) / RMS(ref)
   (< 5e-3 passes). fla's chunk_kda is checked the same way (RMS only) at a small shape;
2. timing at the six benchmark scenarios (H in {96, 64} x {T = 8192; varlen [1300, 547, 2048, 963, 271, 3063];
   8 x 1024}), interleaved round-robin in one process, L2 flushed (read of 2x L2) before each launch, CUDA
   events, median of ``--repeats``: fla ``chunk_kda`` (FLA_FLASH_KDA=0, safe gate, gate / beta sigmoid / L2 norm
   in its kernels, torch.no_grad), each reference stage alone, each state-pass kernel alone, fla's
   ``chunk_gated_delta_rule_fwd_h`` on the same intermediates (the objective's baseline); then, in a second
   interleaved round, the whole pipeline (intra + the fastest state pass + output) as one timed call against
   fla's chunk_kda again (the end-to-end ratio is taken from this round).

FlashKDA (fla's CUTLASS backend of chunk_kda) needs a CUTLASS checkout and a C++ build: not timed; the
third-party figure is 1.21 ms against fla's 1.78 ms at H = 64, T = 8192 on an H200.

Prints two tables and writes ``kda_chunk_h200.json`` and ``kda_chunk_h200.md`` under ``--out``.
Usage: python experiments/kda_chunk_h200.py [--out DIR] [--repeats 10] [--variants 'bv=64;bv=128']
       python experiments/kda_chunk_h200.py --dry-run      (a CPU: front half of every kernel at every shape,
                                                           the fp32 pipeline in NumPy at a small shape)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("FLA_FLASH_KDA", "0")  # before fla is imported anywhere: FlashKDA off (not built here)

import numpy as np

from experiments.kda_check import correctness_row, kernels_of, rms_ratio, row_line, tol_units

CHECK_SHAPES = [(1, 1), (1, 65), (2, 63), (3, 1, 63, 17), (2, 5, 1, 70, 2), (1, 2048)]
BIG_CHECK = (64, *(1024,) * 8)
FLASH_KDA_NOTE = ("FlashKDA not timed (CUTLASS build); third-party figure: 1.21 ms vs fla chunk_kda 1.78 ms "
                  "at H = 64, T = 8192 on an H200")


def label(shape: tuple[int, ...]) -> str:
    lens = shape[1:]
    what = f"T={lens[0]}" if len(lens) == 1 else ("varlen" if len(set(lens)) > 1 else f"{len(lens)}x{lens[0]}")
    return f"H={shape[0]} {what}"


def dry_run(args: argparse.Namespace) -> int:
    """No GPU: the front half of every kernel at every shape, the launch rule, the fp32 pipeline (NumPy reference
    stages around the NumPy state pass) against the float64 reference at a small shape, fla's importability."""
    from evaluators.pipeline import prepare
    from targets.spec import resolve_gpu
    from workloads.dtypes import half_ulp, storage_dtype, to_float64
    from workloads.kda import KDAChunk

    gpu, wl = resolve_gpu(args.gpu), KDAChunk()
    for name, k in kernels_of(wl, args.variants).items():
        p = prepare(k, wl, gpu, wl.benchmark_shapes + CHECK_SHAPES + [BIG_CHECK])
        print(f"{name:28s} regs {p.resources.registers:3d} spills {p.resources.spill_stores_bytes:4d} B "
              f"smem {p.resources.shared_static_bytes:5d} B block {p.block} occupancy {p.occupancy.occupancy:.2f} "
              f"grids {[wl.launch_dims(s, k.launch)[0] for s in wl.benchmark_shapes[:3]]}")
    atol, rtol = wl.tolerance
    shape = CHECK_SHAPES[3]
    host = wl.make_inputs(shape, 100)
    ref = wl.reference(host)
    outs = {s.name: np.empty(s.shape, dtype=storage_dtype(s.dtype, np)) for s in wl.outputs(shape)}
    plan = wl.plan(host, outs, shape)
    plan.run_before()
    wl.emulate_state_pass(plan.buffers, shape)
    plan.run_after()
    o = to_float64(outs["o"], "bf16")
    print(f"fp32 pipeline in NumPy at {shape}: o {tol_units(o, ref['o'], atol, rtol, half_ulp(ref['o'], 'bf16')):.3f} "
          f"tolerance units (rms {rms_ratio(o, ref['o']):.2e}), state "
          f"{tol_units(host['state'].astype(np.float64), ref['state'], atol, rtol, 0.0):.3f}")
    try:
        import fla.ops.kda  # noqa: F401

        print("fla importable: chunk_kda and chunk_gated_delta_rule_fwd_h would be timed")
    except Exception as e:
        print(f"fla not importable here ({type(e).__name__}: {str(e)[:120]}): its columns would be empty")
    print(f"would time {len(wl.benchmark_shapes)} shapes x ({len(kernels_of(wl, args.variants))} state passes + "
          f"2 reference stages + fla fwd_h + the pipeline + fla chunk_kda), {args.repeats} repeats each; "
          f"{FLASH_KDA_NOTE}")
    return 0


def time_shape(wl, cp, runs: dict, shape: tuple[int, ...], flush, repeats: int) -> dict:
    """One scenario of the timing table (module docstring, step 2): µs per timed call, the fastest state pass,
    its speedup over fla's fwd_h, fla chunk_kda's time over the whole pipeline's, and the baselines' notes."""
    from evaluators.gpu.benchmark import median_us, time_interleaved
    from workloads.dtypes import storage_dtype
    from workloads.kda.baselines import fla_chunk_baselines

    inputs = wl.make_inputs(shape, 7, "normal", cp)
    outs = {s.name: cp.empty(s.shape, dtype=storage_dtype(s.dtype, cp)) for s in wl.outputs(shape)}
    bufs = {**inputs, **outs, **{b.name: cp.zeros(b.shape, dtype=np.dtype(b.dtype)) for b in wl.intermediates(shape)}}
    kbufs = {p.name: bufs[p.name] for p in wl.abi if p.kind != "scalar"}
    wl.run_stage("intra", bufs, shape, None, cp)  # the state passes' inputs, once
    timed = {n: (lambda r=r: r.kernel(kbufs, shape)) for n, r in runs.items()}
    timed["intra"] = lambda: wl.run_stage("intra", bufs, shape, None, cp)
    timed["output"] = lambda: wl.run_stage("output", bufs, shape, None, cp)
    notes: dict[str, str] = {}
    base = wl.baselines(inputs, shape, ("fla_fwd_h",), notes)
    if "fla_fwd_h" in base:
        timed["fla fwd_h"] = base["fla_fwd_h"]
    fla = fla_chunk_baselines(inputs, shape, ("fla_chunk",), notes)
    if "fla_chunk" in fla:
        timed["fla chunk_kda"] = fla["fla_chunk"]
    times = {n: median_us(v) for n, v in time_interleaved(timed, flush, warmup=2, repeats=repeats).items()}
    best = min(runs, key=lambda n: times[n])

    def pipeline() -> None:
        wl.run_stage("intra", bufs, shape, None, cp)
        runs[best].kernel(kbufs, shape)
        wl.run_stage("output", bufs, shape, None, cp)

    # second round: the whole pipeline with the fastest state pass, interleaved with fla's chunk_kda again
    second = {"pipeline": pipeline, **({"fla chunk_kda": fla["fla_chunk"]} if "fla_chunk" in fla else {})}
    again = {n: median_us(v) for n, v in time_interleaved(second, flush, warmup=2, repeats=repeats).items()}
    times["pipeline"] = again["pipeline"]
    if "fla chunk_kda" in again:
        times["fla chunk_kda (round 2)"] = again["fla chunk_kda"]
    stage = times["fla fwd_h"] / times[best] if "fla fwd_h" in times else float("nan")
    e2e = times.get("fla chunk_kda (round 2)", float("nan")) / times["pipeline"]
    return {"heads": shape[0], "lengths": list(shape[1:]), "us": times, "best_state_pass": best,
            "stage_speedup_over_fla_fwd_h": stage, "fla_chunk_over_pipeline": e2e, "notes": notes}


def write_report(out: Path, results: dict, cols: list[str], repeats: int, final: bool = False) -> None:
    """``kda_chunk_h200.json`` and ``.md`` under ``out`` from ``results`` (the correctness rows and the timing
    rows so far; written after each scenario so a run cut by its time limit keeps what it measured), with the
    geomeans over the scenarios timed (fastest state pass / fla fwd_h, fla chunk_kda / pipeline: > 1 ours faster).
    ``final``: every scenario was timed (otherwise the table says how many)."""

    def geo(xs: list[float]) -> float:
        xs = [x for x in xs if not math.isnan(x)]
        return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")

    rows = results["timing"]
    results["geomean_best_state_pass_over_fla_fwd_h"] = geo([r["stage_speedup_over_fla_fwd_h"] for r in rows])
    results["geomean_fla_chunk_over_pipeline"] = geo([r["fla_chunk_over_pipeline"] for r in rows])
    results["complete"] = final
    out.mkdir(parents=True, exist_ok=True)
    (out / "kda_chunk_h200.json").write_text(json.dumps(results, indent=1, default=str))
    md = ["| scenario | " + " | ".join(cols) + " | best state pass / fla fwd_h | fla chunk_kda / pipeline |",
          "|---" * (len(cols) + 3) + "|"]
    for r in rows:
        shape = (r["heads"], *r["lengths"])
        md.append(f"| {label(shape)} | " + " | ".join(f"{r['us'].get(c, float('nan')) / 1e3:.3f}" for c in cols)
                  + f" | {r['stage_speedup_over_fla_fwd_h']:.3f} ({r['best_state_pass']}) | "
                  f"{r['fla_chunk_over_pipeline']:.3f} |")
    md.append(f"\nTimes in ms, median of {repeats} launches, L2 flushed, {results['device']}. Geomean over "
              f"{len(rows)} scenarios{'' if final else ' (run cut before the rest)'}: best state pass / fla fwd_h "
              f"{results['geomean_best_state_pass_over_fla_fwd_h']:.3f}, fla chunk_kda / pipeline "
              f"{results['geomean_fla_chunk_over_pipeline']:.3f}. {FLASH_KDA_NOTE}.")
    (out / "kda_chunk_h200.md").write_text("\n".join(md) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="experiments/results/kda_chunk_h200")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--variants", default="bv=64;bv=128")
    ap.add_argument("--gpu", default=None, help="targets.spec GPU name (default: targets.spec.DEFAULT_GPU)")
    ap.add_argument("--skip-checks", action="store_true", help="timing only")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: see dry_run")
    args = ap.parse_args()
    if args.dry_run:
        return dry_run(args)

    import cupy as cp

    from evaluators.gpu.args import param_types
    from evaluators.gpu.benchmark import L2Flusher
    from evaluators.gpu.worker import make_launcher
    from evaluators.pipeline import prepare
    from targets.spec import resolve_gpu
    from workloads.dtypes import storage_dtype, to_device, to_float64
    from workloads.kda import KDAChunk
    from workloads.kda.baselines import fla_chunk_baselines

    gpu, wl = resolve_gpu(args.gpu), KDAChunk()
    atol, rtol = wl.tolerance
    runs, regs, mods = {}, {}, []
    for name, k in kernels_of(wl, args.variants).items():
        p = prepare(k, wl, gpu, wl.search_shapes)  # the evaluators' front half: ptxas, ABI, occupancy
        mod = cp.cuda.Module()
        mod.load(p.compiled.cubin)
        mods.append(mod)
        runs[name] = make_launcher(wl, cp, mod.get_function(k.entry), param_types(k), k.launch.to_json())
        regs[name] = p.resources.registers
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"]
    results: dict = {"gpu": gpu.name, "device": dev.decode() if isinstance(dev, bytes) else str(dev),
                     "flash_kda": FLASH_KDA_NOTE, "correctness": [], "timing": []}
    print(f"device {results['device']}; tolerance atol {atol} rtol {rtol}; {FLASH_KDA_NOTE}\n")

    cols = ["fla chunk_kda", "pipeline", "intra", "output", *runs, "fla fwd_h"]
    all_ok = True
    t_checks = time.perf_counter()
    if not args.skip_checks:
        print(f"{'state pass':24s} {'regs':>4s} {'shape':>22s} {'dist':>14s} {'o tol':>8s} {'o rms':>9s} "
              f"{'S tol':>8s} {'S rms':>9s} ok")
        for shape in [*CHECK_SHAPES, BIG_CHECK]:
            big = shape == BIG_CHECK
            for i, dist in enumerate(wl.distributions if not big else ("normal",)):
                host = ({k: cp.asnumpy(v) for k, v in wl.make_inputs(shape, 100 + i, dist, cp).items()} if big
                        else wl.make_inputs(shape, 100 + i, dist))
                pairs = wl.sample_pairs(host, 2) if big else None
                ro, rs = wl.reference_pairs(host, pairs)
                at = (slice(None),) if pairs is None else tuple(np.array(x) for x in zip(*pairs))
                rs = rs[at]
                for name, run in runs.items():
                    inputs = to_device(host, cp)
                    out = {"o": cp.full((sum(shape[1:]), shape[0], 128), 0x7FA5, dtype=storage_dtype("bf16", cp))}
                    run(inputs, out, shape)
                    o = to_float64(out["o"].get(), "bf16")
                    st = (inputs["state"] if pairs is None
                          else inputs["state"][tuple(cp.asarray(a) for a in at)]).get().astype(np.float64)
                    row = correctness_row(name, shape, dist, o, ro, st, rs, atol, rtol, pairs, max_lengths=16)
                    all_ok &= row["ok"]
                    results["correctness"].append(row)
                    print(row_line(row, shape, regs[name], 24), flush=True)
        shape = (3, 1, 63, 130)
        host = wl.make_inputs(shape, 9)
        ref = wl.reference(host)
        notes: dict[str, str] = {}
        fla = fla_chunk_baselines(to_device(host, cp), shape, ("fla_chunk",), notes)
        if "fla_chunk" in fla:
            o, s = fla["fla_chunk"]()
            o_rms = rms_ratio(o.float().squeeze(0).cpu().numpy().astype(np.float64), ref["o"])
            s_rms = rms_ratio(s.cpu().numpy().astype(np.float64), ref["state"])
            results["fla_chunk_check"] = {"shape": list(shape), "o_rms": o_rms, "state_rms": s_rms}
            print(f"fla chunk_kda at {shape}: o rms {o_rms:.2e}, state rms {s_rms:.2e} (fla's criterion < 5e-3)")
        else:
            print(f"fla chunk_kda not available: {notes}")
        results["check_seconds"] = time.perf_counter() - t_checks
        print(f"correctness rows: {results['check_seconds']:.0f} s", flush=True)
        write_report(Path(args.out), results, cols, args.repeats)

    flush = L2Flusher.for_device()
    print(f"\n{'scenario':>16s} " + " ".join(f"{c[:18]:>18s}" for c in cols) + f" {'best/fwd_h':>10s} {'fla/pipe':>9s}")
    for shape in wl.benchmark_shapes:
        t0 = time.perf_counter()
        row = time_shape(wl, cp, runs, shape, flush, args.repeats)
        row["seconds"] = time.perf_counter() - t0
        results["timing"].append(row)
        times, stage, e2e = row["us"], row["stage_speedup_over_fla_fwd_h"], row["fla_chunk_over_pipeline"]
        print(f"{label(shape):>16s} " + " ".join(f"{times.get(c, float('nan')) / 1e3:18.3f}" for c in cols)
              + f" {stage:10.3f} {e2e:9.3f}  ({row['seconds']:.0f} s)"
              + (f"  notes: {row['notes']}" if row["notes"] else ""), flush=True)
        write_report(Path(args.out), results, cols, args.repeats)  # a cut run keeps the rows it timed
        cp.get_default_memory_pool().free_all_blocks()

    write_report(Path(args.out), results, cols, args.repeats, final=True)
    g = results
    print(f"\ntimes in ms (median of {args.repeats}, L2 flushed). Geomean over {len(g['timing'])} scenarios: fastest "
          f"state pass vs fla chunk_gated_delta_rule_fwd_h {g['geomean_best_state_pass_over_fla_fwd_h']:.3f}x; whole "
          f"pipeline vs fla chunk_kda {g['geomean_fla_chunk_over_pipeline']:.3f}x (> 1: ours faster). "
          f"{FLASH_KDA_NOTE}.")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
