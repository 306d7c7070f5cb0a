"""Scaling over GPUs under the Ray backend: the same work with 1 and with 2 evaluation actors.

Two measurements, each with 1 actor and then with 2 (one local Ray cluster over the machine's GPUs):

1. evaluator: ``--candidates`` distinct RMSNorm template variants (nvcc before the clock, as in
   ``experiments/gpu_throughput.py``) evaluated through ``RayEvaluator.evaluate`` from ``capacity`` threads:
   ptxas as Ray tasks, gate, benchmark on the search shapes. No cache hits (the compile cache is cleared,
   every PTX differs).
2. search: ``python -m evolve``'s run (``evolve.app.run``) with ``evaluator=ray``, MAP-Elites, the rules
   operators (``--override`` changes that), unordered tells, for ``--search-seconds``; candidates/s = evaluations / search seconds (``evals_per_s``).

Prints a table (candidates/s, speed-up of 2 actors over 1) and writes it to ``$OUT/ray_scaling.md`` and
``ray_scaling.json``. Target (issue 16): 2 actors >= 1.8x 1 actor in the search. ``--kind static`` runs the same
on CPU actors with the static evaluator (a dry run of the script; no GPU numbers).

Usage (2-GPU machine, Ray unpacked by ``scripts/fetch_ray_wheel.sh unpack``):
``python experiments/ray_scaling.py [--candidates 32] [--search-seconds 90]`` (about 6 minutes), or
``bash scripts/gpu_tests.sh ray`` (the Ray gpu tests, then this).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONF = str(Path(__file__).resolve().parents[1] / "conf")
SEARCH_SHAPES = [[4096, 1024], [2048, 8192]]


def evaluator_rate(kind: str, actors: int, kernels: list, depth: int, actor_cpus: float | None) -> dict:
    """Candidates/s of RayEvaluator over ``kernels`` with ``actors`` actors (start-up not timed)."""
    from evaluators.ray import RayEvaluator
    from evaluators.toolchain import clear_cache
    from workloads.rmsnorm import RMSNorm

    opts = {"shapes": SEARCH_SHAPES, "baseline_names": ["torch"]} if kind == "gpu" else {}
    t0 = time.perf_counter()
    with RayEvaluator(RMSNorm("bf16"), kind=kind, actors=actors, depth=depth, actor_cpus=actor_cpus,
                      options=opts) as ev:
        start_s = time.perf_counter() - t0
        with ThreadPoolExecutor(ev.capacity) as pool:  # warm-up, not timed: Ray starts the compile-task workers
            list(pool.map(ev.evaluate, RMSNorm("bf16").seeds() * ev.capacity))
        clear_cache()
        t1 = time.perf_counter()
        with ThreadPoolExecutor(ev.capacity) as pool:
            results = list(pool.map(ev.evaluate, kernels))
        secs = time.perf_counter() - t1
        where = sorted({f"{a['host']}:{a['gpu']}:{a.get('cuda_visible_devices')}" for a in ev.actors})
    statuses: dict[str, int] = {}
    for r in results:
        statuses[str(r.status)] = statuses.get(str(r.status), 0) + 1
    return {"actors": actors, "candidates": len(kernels), "seconds": secs, "rate": len(kernels) / secs,
            "start_seconds": start_s, "statuses": statuses, "where": where}


def search_rate(kind: str, actors: int, seconds: float, depth: int, actor_cpus: float | None,
                extra: list[str]) -> dict:
    """evals/s of a search of ``seconds`` with ``actors`` actors (evolve.app.run, Ray backend)."""
    from hydra import compose, initialize_config_dir

    from evolve.app import run
    from evolve.config import register

    run_dir = Path(tempfile.mkdtemp(prefix=f"ray-scaling-{actors}-"))
    register()
    overrides = [f"run_dir={run_dir}", "evaluator=ray", f"evaluator.kind={kind}", f"evaluator.ray.actors={actors}",
                 f"evaluator.ray.depth={depth}",
                 f"evaluator.ray.actor_cpus={'null' if actor_cpus is None else actor_cpus}", "logger=none", "engine.progress=false", "knowledge=none",
                 "engine.export=false", "budget.evaluations=null", f"budget.seconds={seconds}", "engine.ordered=false",
                 *extra]
    if kind == "gpu":
        overrides += ["+evaluator.options.shapes=[[4096,1024],[2048,8192]]"]
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    t0 = time.perf_counter()
    summary = run(cfg)
    return {"actors": actors, "evaluations": summary["evaluations"], "seconds": summary["seconds"],
            "rate": summary["evals_per_s"], "wall_seconds": time.perf_counter() - t0,
            "best_objective": summary.get("best_objective"), "valid_rate": summary["valid_rate"],
            "run_dir": str(run_dir)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=["gpu", "static"], default="gpu")
    ap.add_argument("--candidates", type=int, default=32)
    ap.add_argument("--search-seconds", type=float, default=90.0)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--actors", default="1,2", help="actor counts to compare, comma-separated")
    ap.add_argument("--actor-cpus", type=float, default=None,
                    help="CPUs each actor reserves (default: 0 for gpu, 1 for static; 0 lets a small host's "
                         "CPUs compile)")
    ap.add_argument("--skip-search", action="store_true")
    ap.add_argument("--override", action="append", default=["mutator=rules"],
                    help="Hydra overrides of the search (repeatable; default mutator=rules: no nvcc on the host)")
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    args = ap.parse_args()

    from evaluators.ray import connect

    counts = [int(x) for x in args.actors.split(",")]
    from evaluators.gpu.devices import gpu_count

    resources = connect(None, num_gpus=gpu_count() if args.kind == "gpu" else 0)
    if args.kind == "gpu" and int(resources.get("GPU", 0)) < max(counts):
        print(f"need {max(counts)} GPUs, the local Ray cluster has {resources.get('GPU', 0)}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_throughput import candidates

    from workloads.rmsnorm import RMSNorm

    t0 = time.perf_counter()
    kernels = candidates(RMSNorm("bf16"), args.candidates * len(counts), 0)
    print(f"instantiated {len(kernels)} variants in {time.perf_counter() - t0:.1f} s (nvcc, not timed)")
    ev_rows = [evaluator_rate(args.kind, n, kernels[i * args.candidates:(i + 1) * args.candidates], args.depth,
                              args.actor_cpus)
               for i, n in enumerate(counts)]
    search_rows = [] if args.skip_search else [search_rate(args.kind, n, args.search_seconds, args.depth, args.actor_cpus, args.override)
                                               for n in counts]

    lines = [f"# Ray backend scaling ({args.kind} actors), {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
             "", f"Ray cluster: {json.dumps({k: v for k, v in resources.items() if k in ('CPU', 'GPU')})}; "
             f"depth {args.depth} per actor.", "",
             "| measurement | actors | candidates | seconds | candidates/s | vs 1 actor | where / statuses |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for name, rows in (("evaluator", ev_rows), ("search", search_rows)):
        base = rows[0]["rate"] if rows else 0
        for r in rows:
            n = r.get("candidates", r.get("evaluations"))
            extra = ", ".join(r["where"]) + f"; {r['statuses']}" if name == "evaluator" else \
                f"best {r['best_objective']}, valid {r['valid_rate']:.2f}"
            lines.append(f"| {name} | {r['actors']} | {n} | {r['seconds']:.1f} | {r['rate']:.2f} | "
                         f"{r['rate'] / base:.2f}x | {extra} |")
    if len(search_rows) >= 2:
        ok = search_rows[-1]["rate"] >= 1.8 * search_rows[0]["rate"]
        lines += ["", f"Target 2 actors >= 1.8x 1 actor in the search: {'met' if ok else 'NOT met'} "
                      f"({search_rows[-1]['rate'] / search_rows[0]['rate']:.2f}x)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "ray_scaling.md").write_text(text)
        (Path(args.out) / "ray_scaling.json").write_text(json.dumps({"evaluator": ev_rows, "search": search_rows},
                                                                    indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
