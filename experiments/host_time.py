"""Where the host time of one candidate goes, and what proposing ahead takes off the engine's thread.

Method. The RMSNorm workload, multi-task search over the 11 benchmark row lengths, the ``power`` operators
(structural rules, vectorize, hoist, template, jump, cma), MAP-Elites, the SQLite store, and the static
evaluator (ptxas + the static description; ``capacity`` threads) so that every host phase of a GPU run is present
but no GPU is needed. The PTX cache starts empty (a temporary ``PTXFORGE_CACHE``), so every new knob set pays its
nvcc instantiation as in a fresh run. Each mode runs ``--evaluations`` candidates (the first 22 are the two seeds on the 11 tasks):

- ``inline``: ``engine.ahead=0``: the child is built in the engine's thread when proposed (nvcc included);
- ``ahead``: ``engine.ahead=K`` with a process compile executor (``evaluators.compile_executor``): the next K
  proposals' instantiations run on other cores while earlier candidates are evaluated.

Per candidate (mean seconds): propose (ask + operator), apply (edit + instantiation when inline + parse),
instantiate (nvcc in the executor, off the engine's thread), wait_instantiation (the engine waiting for it),
evaluate (the evaluator's wall time: ptxas + description), tell (store row, archive, lessons, checkpoint), and the
engine thread's wall per candidate; candidates/s. The GPU-bound rate of a real run is 1 / the GPU seconds of one
candidate; the loop is host-bound when the engine thread's seconds per candidate exceed it.

Usage: ``python experiments/host_time.py [--evaluations 60] [--ahead 6] [--workers N]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

POWER_OPERATORS = ["hints", "mathops", "schedule", "unroll", "launch", "prefetch", "vectorize", "hoist",
                   "template", "jump", "cma"]


def run_mode(evaluations: int, ahead: int, workers: int | None, seed: int) -> dict[str, float]:
    """One run; returns mean seconds per candidate per phase and the rates."""
    from archive.grid import GridArchive, default_dimensions
    from archive.store import Store
    from evaluators.compile_executor import make_compile_executor
    from evaluators.static import StaticEvaluator
    from evolve.algorithms.map_elites import MapElites
    from evolve.budget import Budget
    from evolve.engine import EVAL_STATUSES, Engine, EngineSettings
    from evolve.operators.registry import build_operators
    from evolve.selection import OperatorSelector
    from evolve.tasks import build_tasks
    from workloads.registry import get_workload

    wl = get_workload("rmsnorm")
    tasks = build_tasks(wl.benchmark_shapes)
    archive = GridArchive([tasks.dimension(), *default_dimensions()])
    ops = build_operators([{"name": n} for n in POWER_OPERATORS], wl)
    evaluator = StaticEvaluator(wl)
    executor = make_compile_executor("process", workers) if ahead else None
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "store.sqlite") as store:
        eng = Engine(workload=wl, evaluator=evaluator, algorithm=MapElites(archive), archive=archive, operators=ops,
                     selector=OperatorSelector([o.name for o in ops]), store=store,
                     budget=Budget(max_evaluations=evaluations), seed=seed,
                     settings=EngineSettings(capacity=evaluator.capacity, ahead=ahead), tasks=tasks,
                     compile_executor=executor)
        t0 = time.perf_counter()
        snap = eng.run()
        wall = time.perf_counter() - t0
        rows = [r for r in store.candidates(with_ptx=False) if r.status in EVAL_STATUSES]
    if executor is not None:
        executor.shutdown()
    n = max(1, len(rows))

    def mean(key: str) -> float:
        return sum(float(r.timings.get(key, 0.0)) for r in rows) / n

    host = snap.host_seconds
    return {"candidates": len(rows), "wall_s": wall, "per_s": len(rows) / wall,
            "propose": host.get("propose", 0.0) / n, "apply": host.get("apply", 0.0) / n,
            "instantiate": mean("instantiate"), "wait_instantiation": host.get("wait_instantiation", 0.0) / n,
            "evaluate": mean("evaluate"), "tell": host.get("tell", 0.0) / n,
            "wait_evaluation": host.get("wait_evaluation", 0.0) / n,
            "engine_thread": (wall - host.get("wait_evaluation", 0.0)) / n}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--evaluations", type=int, default=60)
    ap.add_argument("--ahead", type=int, default=6)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # internal: one mode, JSON out
    a = ap.parse_args(argv)
    if a.one is not None:
        print(json.dumps(run_mode(a.evaluations, a.one, a.workers, a.seed)))
        return 0
    results = {}
    for mode, ahead in (("inline", 0), ("ahead", a.ahead)):
        # a fresh process (no in-memory caches) and an empty PTX cache per mode: nvcc runs for every new set
        with tempfile.TemporaryDirectory() as cache:
            cmd = [sys.executable, __file__, "--one", str(ahead), "--evaluations", str(a.evaluations),
                   "--seed", str(a.seed)] + (["--workers", str(a.workers)] if a.workers else [])
            proc = subprocess.run(cmd, env={**os.environ, "PTXFORGE_CACHE": cache}, capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 1
            results[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    cols = ["candidates", "per_s", "propose", "apply", "instantiate", "wait_instantiation", "evaluate", "tell",
            "engine_thread"]
    print(f"host seconds per candidate (static evaluator, {os.cpu_count()} CPUs, empty PTX cache)")
    print("| mode | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for mode, r in results.items():
        print(f"| {mode} | " + " | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
