"""Verify the dispatch of a multi-task run: every benchmark and held-out shape timed with the kernel of its
bucket against the libraries, re-timed round-robin in one worker; writes ``verify_dispatch.json``.

The dispatch is ``<run>/best/dispatch/manifest.json`` (``archive.dispatch``); when the search was cut before its
export, it is rebuilt from the store's last engine checkpoint (the archive and the tasks in the store's
``objective`` meta). For each shape, the kernel of the bucket holding its row length is

1. gated (the workload's gate shapes for the benchmark matrix; the shape itself for a held-out shape) and
2. benchmarked with every library baseline (``--libraries``: torch eager, torch.compile, Liger, QuACK default
   and, with ``--quack-tuned``, QuACK's autotuned ``rmsnorm_fwd_tuned``) and the naive seed timed in the same
   worker, interleaved, the output re-checked after the timed launches (``check_output="all"``).

Per shape the file holds the kernel's µs, GB/s, fraction of the copy roofline, each baseline's µs, the best
library there and the speedup over it (``evaluators.objective``, ``baseline="best"``), and the libraries that did
not run (with the worker's notes saying why). Shapes are measured in priority order (the benchmark matrix, then
held-out shapes); a phase that no longer fits before ``--deadline-s`` is recorded as cut, and the file is
rewritten after every shape.

``--evaluator static`` is the dry run without a GPU: the static evaluator's estimates at the same shapes
(speedups over the naive seed under its model, labelled ``estimate``; no library columns).

Usage: ``python experiments/dispatch_verify.py --run RUN_DIR --out verify_dispatch.json [--deadline-s 240]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SCHEMA = 1
# Held-out row lengths beyond the workload's own held-out shapes: between the buckets' benchmark lengths.
EXTRA_HELDOUT: list[tuple[int, int]] = [(4096, 3000), (4096, 6144), (4096, 10240)]
LIBRARIES = ("torch", "torch_compile", "liger", "quack")


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def log(msg: str) -> None:
    print(f"[{utc_now()}] {msg}", file=sys.stderr, flush=True)


def load_dispatch(run_dir: Path) -> tuple[dict[str, Any], Any, Any]:
    """(manifest, workload, store meta) of the run; the manifest rebuilt from the last checkpoint when the
    search ended before exporting it. ValueError when neither exists or the run was not multi-task."""
    from archive.dispatch import export_dispatch, load_manifest
    from archive.export import workload_from_meta
    from archive.grid import GridArchive
    from archive.store import Store
    from evolve.tasks import TaskSet

    store_path = run_dir / "store.sqlite"
    if not store_path.is_file():
        raise ValueError(f"{run_dir}: no store.sqlite (was the search run into this folder?)")
    with Store(store_path, readonly=True) as store:
        meta = store.meta()
    wl = workload_from_meta(meta)
    if wl is None:
        raise ValueError(f"{store_path}: the stored config names no buildable workload")
    manifest_path = run_dir / "best" / "dispatch" / "manifest.json"
    if manifest_path.is_file():
        return load_manifest(manifest_path), wl, meta
    tasks_json = (meta.get("objective") or {}).get("tasks")
    if not tasks_json:
        raise ValueError(f"{store_path}: not a multi-task run (no tasks in the 'objective' meta)")
    with Store(store_path) as store:
        cp = store.checkpoint("engine")
        if cp is None:
            raise ValueError(f"{store_path}: no engine checkpoint to rebuild the dispatch from")
        archive = GridArchive.from_state(cp.state["archive"])
        log("no exported dispatch: rebuilding it from the last checkpoint")
        manifest = export_dispatch(store, archive, TaskSet.from_json(tasks_json), wl, manifest_path.parent)
    return manifest, wl, meta


def bucket_kernel(manifest: dict[str, Any], folder: Path, n: int) -> tuple[dict[str, Any], Any]:
    """(bucket, Kernel) of row length ``n``."""
    from archive.dispatch import bucket_for
    from archive.dispatch import bucket_kernel as kernel_of

    b = bucket_for(manifest, n)
    return b, kernel_of(folder, b)


def shape_entry(res: Any, bucket: dict[str, Any], spec: Any) -> dict[str, Any]:
    """One shape's record: status, the kernel's numbers, the baselines, the best library and the winner."""
    from evaluators.objective import reference_of

    d: dict[str, Any] = {"bucket": bucket["task"], "bucket_name": bucket["name"],
                         "candidate_id": bucket["candidate_id"], "status": str(res.status), "reason": res.reason,
                         "estimate": bool(res.estimate)}
    if res.shapes:
        s = res.shapes[0]
        d.update(time_us=s.time_us, gbps=s.gbps, frac_copy=s.frac_copy, baseline_us=dict(s.baseline_us))
        ref = reference_of(s.baseline_us, spec)
        if ref is not None:
            name, us, missing, fallback = ref
            d.update(best_library=name, best_library_us=us, speedup_vs_best=us / s.time_us,
                     missing_libraries=missing, fallback=fallback,
                     winner="dispatch" if s.time_us <= us else name)
    return d


class Recorder:
    def __init__(self, out: Path, data: dict[str, Any]):
        self.out, self.data = out, data

    def save(self) -> None:
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str))
        tmp.replace(self.out)


def verify(run_dir: Path, out: Path, deadline_s: float, evaluator: str, repeats: int, quack_tuned: bool,
           heldout: bool = True) -> dict[str, Any]:
    """Run the phases (module docstring) within ``deadline_s`` seconds; returns the file's content."""
    from evaluators.objective import ObjectiveSpec

    t0 = time.monotonic()
    manifest, wl, meta = load_dispatch(run_dir)
    folder = run_dir / "best" / "dispatch"
    libraries = (*LIBRARIES, "quack_tuned") if quack_tuned else LIBRARIES
    spec = ObjectiveSpec(libraries=tuple(n for n in libraries if n != "torch"),
                         fallback=("torch", "naive", "naive_seed") if evaluator == "static" else ("torch", "naive"),
                         library_inputs=str(getattr(wl, "library_inputs", "") or ""))
    heldout_shapes = [tuple(s) for s in wl.heldout_shapes] + EXTRA_HELDOUT
    data: dict[str, Any] = {
        "schema": SCHEMA, "mode": evaluator, "estimate": evaluator == "static", "started_utc": utc_now(),
        "run_dir": str(run_dir), "workload": wl.name, "dtype": wl.dtype, "objective": spec.to_json(),
        "search_objective": meta.get("objective"), "libraries": list(libraries),
        "buckets": [{k: b.get(k) for k in ("task", "name", "lo", "hi", "candidate_id", "objective", "launch",
                                            "borrowed_from", "card")} for b in manifest["buckets"]],
        "benchmark": {}, "heldout": {}, "cut": [], "errors": [],
    }
    rec = Recorder(out, data)
    if evaluator == "static":
        print("=" * 100 + "\nDRY RUN: static evaluator, no GPU. Every number below is an ESTIMATE (speedups over "
              "the naive seed under the static model; no library columns).\n" + "=" * 100, file=sys.stderr)
        from evaluators.static import StaticEvaluator

        gpu = str(((meta.get("config") or {}).get("hardware") or {}).get("name") or "h200")
        ev: Any = StaticEvaluator(wl, gpu=gpu, processes=1)
        data["device"], data["copy_gbps"] = f"{gpu} (static model, no GPU)", float(ev.gpu.copy_gbps)

        def measure(kernel: Any, shape: tuple[int, ...], gate_on_shape: bool, left: float) -> Any:
            return ev.evaluate(kernel, shapes=[shape])
    else:
        from evaluators.gpu.pool import GPUPool

        ev = GPUPool(wl, shapes=[list(s) for s in wl.benchmark_shapes], baselines="interleaved",
                     check_output="all", baseline_names=libraries, objective=spec, timeout_s=120.0,
                     startup_timeout_s=max(60.0, deadline_s - 30), repeats=repeats, seed=20261201)
        data["device"], data["copy_gbps"] = str(ev.info[0].get("device", "?")), ev.copy_gbps
        data["baseline_notes"] = ev.info[0].get("notes", {})

        def measure(kernel: Any, shape: tuple[int, ...], gate_on_shape: bool, left: float) -> Any:
            ev.timeout_s = max(20.0, min(120.0, left - 5))
            ev.gate_shapes = [shape] if gate_on_shape else None
            try:
                return ev.evaluate(kernel, shapes=[shape], baselines="interleaved", check_output="all")
            finally:
                ev.gate_shapes = None
    data["pool_start_s"] = round(time.monotonic() - t0, 1)
    log(f"evaluator ready in {data['pool_start_s']} s on {data['device']}")
    rec.save()
    phases = [("benchmark", [tuple(s) for s in wl.benchmark_shapes], False)]
    if heldout:
        phases.append(("heldout", heldout_shapes, True))
    try:
        for phase, shapes, gate_on_shape in phases:
            for shape in shapes:
                key = "x".join(map(str, shape))
                left = deadline_s - (time.monotonic() - t0)
                if left < 15:
                    data["cut"].append(f"{phase}:{key}")
                    continue
                bucket, kernel = bucket_kernel(manifest, folder, int(shape[-1]))
                try:
                    res = measure(kernel, shape, gate_on_shape, left)
                except Exception as e:
                    data["errors"].append(f"{phase}:{key}: {type(e).__name__}: {e}")
                    log(traceback.format_exc(limit=4))
                    continue
                data[phase][key] = entry = shape_entry(res, bucket, spec)
                if evaluator != "static":
                    data["baseline_notes"] = {**data.get("baseline_notes", {}),
                                              **(res.extra.get("baseline_notes") or {})}
                log(f"{phase} {key}: bucket {bucket['task']} {entry['status']} "
                    f"{entry.get('time_us', float('nan')):.1f} us x{entry.get('speedup_vs_best', float('nan')):.3f} "
                    f"vs {entry.get('best_library', '-')}")
                rec.save()
    finally:
        ev.close()
    data["finished_utc"] = utc_now()
    data["seconds"] = round(time.monotonic() - t0, 1)
    rec.save()
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="the run dir of a multi-task search")
    ap.add_argument("--out", type=Path, required=True, help="verify_dispatch.json to write")
    ap.add_argument("--deadline-s", type=float, default=240.0)
    ap.add_argument("--evaluator", choices=("gpu", "static"), default="gpu")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--quack-tuned", action="store_true", help="also time QuACK's autotuned rmsnorm_fwd_tuned")
    ap.add_argument("--no-heldout", action="store_true")
    a = ap.parse_args(argv)
    try:
        data = verify(a.run, a.out, a.deadline_s, a.evaluator, a.repeats, a.quack_tuned, heldout=not a.no_heldout)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    bad = [k for p in ("benchmark", "heldout") for k, v in data[p].items() if v["status"] != "ok"]
    return 1 if bad or data["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
