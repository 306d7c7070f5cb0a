"""Re-verify the finalists of an RMSNorm factory run and write ``verify.json`` (the report's second input).

Finalists, read from the run's store (``<run>/store.sqlite``): the best evolved kernel (``Store.best()``), the
naive seed (``workload.seeds()[0]``) and the best template-knob kernel (the best ok row made by the
``template`` operator or the template seed; ``FALLBACK_KNOBS`` when the run has none).

Phases, each skipped ("cut") when the time left before ``--deadline-s`` is below its estimate
(``PHASE_ESTIMATE_S``), each timed, and ``verify.json`` rewritten after every phase so a run cut short still
leaves what was measured. In priority order (what the issue's targets need first):

1. ``pool_start``: a ``GPUPool`` (workers spawned, device-to-device copy bandwidth measured, the library
   baselines compiled for the search shapes, the gate warmed up).
2. ``benchmark:best``: gate on the workload's gate shapes, then the 11-shape benchmark matrix with the naive
   seed, torch eager, torch.compile (and Liger/QuACK when importable) re-timed round-robin with the kernel in
   the same worker, every benchmarked output re-checked against the float64 reference (``check_output="all"``).
3. ``heldout:best``: the gate on the held-out generality shapes (``workload.heldout_shapes``: N = 3072, 5120,
   7168, 12288, 28672 x M = 1, 199, 4096) and their times (no baselines).
4. ``sanitize:memcheck``, ``sanitize:racecheck``: ``compute-sanitizer --tool <tool>`` over
   ``experiments/sanitize_replay.py`` launching the best kernel's cubin at ``SANITIZER_SHAPES``; the
   ``ERROR SUMMARY: N errors`` line is parsed.
5. ``benchmark:template``, ``benchmark:naive``, ``heldout:template``, ``heldout:naive``: the comparison
   kernels' own runs.
6. ``sanitize:synccheck``, ``sanitize:initcheck``; ``ncu``: DRAM bytes of one launch of the best kernel at
   32768 x 4096 (``evaluators.gpu.ncu``).

``--evaluator static`` (the dry run on a machine without a GPU) replaces the pool by the static evaluator on
the same shapes: every number is an ESTIMATE (``estimate: true`` in the file and a banner on stderr), and the
sanitizer and ncu phases are recorded as skipped with the reason.

Usage: ``python experiments/rmsnorm_h200_verify.py --run RUN_DIR --out verify.json [--deadline-s 200]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluators.gpu.gate import GATE_VERSION
from evaluators.gpu.sanitizer import find_sanitizer, parse_sanitizer, tool_command
from evaluators.provenance import versions as package_versions

SCHEMA = 1
# Small shapes for the sanitizer (instrumented launches are ~100x slower): odd N (scalar tail), several
# rows per CTA not dividing M, and a row longer than the register-resident chunk count.
SANITIZER_SHAPES: list[tuple[int, int]] = [(199, 1128), (7, 4099), (3, 28672)]
SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
NCU_SHAPE = (32768, 4096)
# Template knobs with the best geomean over the 11 shapes on the H200 (GPU_NOTES.md, run 3): the comparison
# kernel when the run's store holds no template row.
FALLBACK_KNOBS = {"threads": 128, "rows_per_cta": 4, "vec": 8, "keep_in_regs": 1, "max_chunks": 8, "cache_hint": 0}
# Seconds a phase is assumed to need; a phase is cut when less than this is left before the deadline.
PHASE_ESTIMATE_S = {"sanitize": 25.0, "pool_start": 60.0, "benchmark": 45.0, "heldout": 15.0, "ncu": 40.0}


def utc_now() -> str:
    """ISO 8601 UTC time to the second."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def log(msg: str) -> None:
    """Timestamped progress line on stdout (the driver's log carries it)."""
    print(f"[{utc_now()}] verify: {msg}", flush=True)


# --------------------------------------------------------------------------------------------------- finalists
@dataclass
class Finalist:
    """A kernel to re-verify: key (``best`` | ``template`` | ``naive``), the kernel, where it came from."""

    key: str
    kernel: Any
    candidate_id: int | None
    operator: str
    search_objective: float | None
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"candidate_id": self.candidate_id, "operator": self.operator, "identity": self.kernel.identity,
                "search_objective": self.search_objective, "source": self.source,
                "launch": self.kernel.launch.to_json(), "edit_text": self.kernel.edit_text}


def select_finalists(store: Any, workload: Any) -> dict[str, Finalist]:
    """best / template / naive finalists from a run store (see the module docstring).
    ValueError when the store holds no ok row (nothing was evolved to verify)."""
    best = store.best()
    if best is None:
        raise ValueError(f"{store.path}: no candidate with status ok; nothing to verify")
    seeds = workload.seeds()
    rows = store.candidates(status="ok", with_ptx=False)
    out = {"best": Finalist("best", best.kernel(), best.id, best.operator, best.objective,
                            "store.best(): highest search objective")}
    naive_row = next((r for r in store.candidates(with_ptx=False) if r.identity == seeds[0].identity), None)
    out["naive"] = Finalist("naive", seeds[0], naive_row.id if naive_row else None, "seed",
                            naive_row.objective if naive_row else None, "workload.seeds()[0]")
    tmpl = [r for r in rows if r.operator == "template" or (r.operator == "seed" and len(seeds) > 1
                                                              and r.identity == seeds[1].identity)]
    if tmpl:
        t = max(tmpl, key=lambda r: (r.objective or 0.0, -int(r.id or 0)))
        out["template"] = Finalist("template", store.get(int(t.id)).kernel(), t.id, t.operator, t.objective,
                                   "best ok template-operator row of the run")
    else:
        out["template"] = Finalist("template", workload.instantiate(FALLBACK_KNOBS), None, "template", None,
                                   f"FALLBACK_KNOBS {FALLBACK_KNOBS} (no template row in the run)")
    return out


# ------------------------------------------------------------------------------------------------- recording
class Recorder:
    """Runs phases against a deadline and rewrites ``verify.json`` (atomically) after each one."""

    def __init__(self, out: Path, deadline: float, data: dict[str, Any]):
        self.out, self.deadline, self.data = out, deadline, data
        self.data.setdefault("phases", [])
        self.save()

    def left(self) -> float:
        """Seconds left before the deadline."""
        return self.deadline - time.monotonic()

    def save(self) -> None:
        """Write the file through a temporary name so a kill never leaves half a JSON document."""
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        os.replace(tmp, self.out)

    def run(self, name: str, estimate_s: float, fn: Callable[[float], Any], skip: str | None = None) -> Any:
        """Run ``fn(seconds_left)`` as phase ``name`` unless ``skip`` says why not or the deadline is too near;
        an exception is recorded as a failed phase (message and traceback tail), never raised."""
        rec: dict[str, Any] = {"name": name, "started_utc": utc_now(), "left_s": round(self.left(), 1)}
        result = None
        if skip:
            rec.update(status="skipped", note=skip, seconds=0.0)
        elif self.left() < estimate_s:
            rec.update(status="cut", seconds=0.0,
                       note=f"{self.left():.0f} s left before the deadline; the phase needs ~{estimate_s:.0f} s")
        else:
            log(f"phase {name} ({self.left():.0f} s left)")
            t0 = time.monotonic()
            try:
                result = fn(self.left())
                rec["status"] = "done"
            except Exception as e:
                rec.update(status="failed", note=f"{type(e).__name__}: {e}",
                           traceback=traceback.format_exc(limit=4)[-1500:])
            rec["seconds"] = round(time.monotonic() - t0, 2)
        log(f"phase {name}: {rec['status']} in {rec['seconds']:.1f} s" + (f" ({rec['note']})" if rec.get("note")
                                                                             else ""))
        self.data["phases"].append(rec)
        self.save()
        return result


# ------------------------------------------------------------------------------------------------- sanitizer
def run_sanitizer(tool: str, spec_path: Path, timeout_s: float, exe: str) -> dict[str, Any]:
    """One ``compute-sanitizer --tool <tool>`` run of the replay: errors, summary lines, exit code, replay
    output lines (one per shape, with the output check), the tail of the sanitizer's report and ``clean``
    (see below). TimeoutExpired propagates."""
    cmd = tool_command(exe, tool, spec_path)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=root, env=env)
    text = proc.stdout + proc.stderr
    out = parse_sanitizer(text)
    out.update(tool=tool, rc=proc.returncode, command=" ".join(cmd),
               replay=[json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")],
               tail=text[-2000:])
    # clean: True (0 errors, exit 0), False (errors reported), None (the tool itself could not run, e.g.
    # "Device not supported" on a sandboxed runtime: no verdict)
    if out["errors"]:
        out["clean"] = False
    elif out["errors"] == 0 and proc.returncode == 0 and all(r.get("ok") for r in out["replay"]):
        out["clean"] = True
    elif out["errors"] == 0 and out["replay"] and not all(r.get("ok") for r in out["replay"]):
        out["clean"] = False  # no memory error, but the replayed output was wrong
    else:
        out["clean"] = None
        out["note"] = "compute-sanitizer gave no verdict: " + " ".join(text.split()[-40:])[:600]
    return out


# ------------------------------------------------------------------------------------------------- evaluators
def result_json(res: Any) -> dict[str, Any]:
    """``EvalResult.to_json()`` without the bulky per-kernel fields the report does not use."""
    d = res.to_json()
    d.pop("features", None)
    return d


class StaticVerifier:
    """The static evaluator on the benchmark and held-out shapes (dry run): results are estimates."""

    estimate = True

    def __init__(self, workload_spec: dict[str, Any], gpu: str):
        from evaluators.static import StaticEvaluator
        from targets.spec import get_gpu
        from workloads.registry import build_workload

        self._evals = {}
        for which in ("benchmark", "heldout"):
            wl = build_workload(workload_spec)
            wl.search_shapes = wl.shape_list(which)  # the static evaluator estimates its workload's search shapes
            self._evals[which] = StaticEvaluator(wl, gpu=gpu, processes=1)
        self.copy_gbps = float(get_gpu(gpu).copy_gbps)
        self.device = f"{gpu} (static model, no GPU)"

    def evaluate(self, kernel: Any, which: str) -> Any:
        return self._evals[which].evaluate(kernel)

    def close(self) -> None:
        for e in self._evals.values():
            e.close()


class GPUVerifier:
    """A GPUPool used for final verification (interleaved baselines, every output re-checked)."""

    estimate = False

    def __init__(self, workload: Any, timeout_s: float, startup_timeout_s: float, repeats: int):
        from evaluators.gpu.pool import GPUPool

        self.workload = workload
        self.pool = GPUPool(workload, shapes="search", baselines="interleaved", check_output="all",
                            timeout_s=timeout_s, startup_timeout_s=startup_timeout_s, repeats=repeats,
                            seed=20261130)
        self.copy_gbps = self.pool.copy_gbps
        self.device = str(self.pool.info[0].get("device", "?"))
        self.notes = self.pool.info[0].get("notes", {})

    def evaluate(self, kernel: Any, which: str, timeout_s: float) -> Any:
        pool = self.pool
        pool.timeout_s = float(timeout_s)  # one request covers the gate plus every shape of the matrix
        if which == "benchmark":
            pool.gate_shapes = None  # the workload's gate shapes
            return pool.evaluate(kernel, shapes="benchmark", baselines="interleaved", check_output="all")
        # held-out generality: gate on those shapes, then time them (no baselines: nothing compiled for them)
        pool.gate_shapes = [tuple(s) for s in self.workload.heldout_shapes]
        try:
            return pool.evaluate(kernel, shapes="heldout", baselines="none", check_output="all")
        finally:
            pool.gate_shapes = None

    def close(self) -> None:
        self.pool.close()


def versions() -> dict[str, str]:
    """Versions of what the verification ran on."""
    return package_versions(("numpy", "cupy", "torch", "triton", "liger_kernel", "quack"))


def search_timeline(rows: list[Any], summary: dict[str, Any] | None, started: float | None,
                    ended: float | None) -> dict[str, Any]:
    """Where the search command's wall time went, from the store rows (``created`` UNIX seconds, in id order)
    and the driver's start/end UNIX times of ``python -m evolve``: ``startup_s`` (imports, config, GPU pool
    start: workers, copy bandwidth, baseline compilation, gate warm-up) = first row's creation - its
    evaluation seconds - start; ``search_s`` (the engine's own clock from summary.json, else first to last
    row); ``teardown_s`` (export, W&B finish) = end - last row; rows, evaluations/s. Missing inputs give None."""
    out: dict[str, Any] = {"rows": len(rows), "startup_s": None, "search_s": None, "teardown_s": None,
                           "total_s": None if started is None or ended is None else round(ended - started, 1)}
    if rows:
        first, last = rows[0], rows[-1]
        if started is not None:
            out["startup_s"] = round(first.created - first.eval_seconds - started, 1)
        if ended is not None:
            out["teardown_s"] = round(ended - last.created, 1)
        out["search_s"] = round(float(summary["seconds"]) if summary and "seconds" in summary
                                else last.created - first.created, 1)
        if summary and summary.get("evaluations") and out["search_s"]:
            out["evaluations_per_s"] = round(float(summary["evaluations"]) / out["search_s"], 3)
    return out


# ------------------------------------------------------------------------------------------------------ main
def verify(run_dir: Path, out: Path, deadline_s: float, evaluator: str, repeats: int = 20,
           sanitizer_tools: tuple[str, ...] = SANITIZER_TOOLS, evolve_started: float | None = None,
           evolve_ended: float | None = None) -> dict[str, Any]:
    """Run every phase (module docstring) within ``deadline_s`` seconds; returns the verify.json content.
    ValueError when ``run_dir`` holds no store or the store has no ok candidate."""
    from archive.export import workload_from_meta
    from archive.store import Store
    from evaluators.toolchain import compile_ptx

    t_start = time.monotonic()
    deadline = t_start + deadline_s
    store_path = run_dir / "store.sqlite"
    if not store_path.is_file():
        raise ValueError(f"{run_dir}: no store.sqlite (was the search run into this folder?)")
    store = Store(store_path, readonly=True)
    try:
        meta = store.meta()
        wl = workload_from_meta(meta)
        if wl is None:
            raise ValueError(f"{store_path}: the stored config names no buildable workload")
        finalists = select_finalists(store, wl)
        status_counts = store.status_counts()
        summary_path = run_dir / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
        timeline = search_timeline(store.candidates(with_ptx=False), summary, evolve_started, evolve_ended)
    finally:
        store.close()
    arch = str(((meta.get("config") or {}).get("hardware") or {}).get("arch") or "sm_90")
    gpu_name = str(((meta.get("config") or {}).get("hardware") or {}).get("name") or "h200")
    data: dict[str, Any] = {
        "schema": SCHEMA, "mode": evaluator, "estimate": evaluator == "static", "started_utc": utc_now(),
        "run_dir": str(run_dir), "deadline_s": deadline_s, "workload": wl.name, "dtype": wl.dtype,
        "arch": arch, "versions": versions(), "store_status_counts": status_counts, "gate_version": GATE_VERSION,
        "shapes": {"benchmark": [list(s) for s in wl.benchmark_shapes],
                   "heldout": [list(s) for s in wl.heldout_shapes], "sanitizer": [list(s) for s in SANITIZER_SHAPES],
                   "ncu": list(NCU_SHAPE)},
        "finalists": {k: f.to_json() for k, f in finalists.items()}, "search_timeline": timeline,
        "search_summary_present": summary is not None,
        "benchmark": {}, "heldout": {}, "sanitizer": {}, "ncu": None,
    }
    if evaluator == "static":
        print("=" * 100 + "\nDRY RUN: static evaluator, no GPU. Every time, GB/s and speedup below is an ESTIMATE; "
              "sanitizer and ncu phases are skipped.\n" + "=" * 100, file=sys.stderr, flush=True)
    rec = Recorder(out, deadline, data)
    best = finalists["best"]
    no_gpu = "no GPU: static evaluator (dry run)" if evaluator == "static" else None

    # the best kernel's cubin and replay spec for compute-sanitizer
    work = Path(tempfile.mkdtemp(prefix="ptxforge-verify-"))
    from experiments.sanitize_replay import build_spec

    cubin = work / "best.cubin"
    cubin.write_bytes(compile_ptx(best.kernel, arch).cubin)
    spec_path = work / "spec.json"
    from evaluators.gpu.sanitizer import replay_plan

    # the fixed shapes in both layouts and the small search shapes with the inputs placed as the benchmark's
    edge = [tuple(s) for s in replay_plan(wl.search_shapes, SANITIZER_SHAPES)["edge_shapes"]]
    spec_path.write_text(json.dumps(build_spec(best.kernel, wl, cubin, SANITIZER_SHAPES, edge_shapes=edge)))
    exe = find_sanitizer() if evaluator == "gpu" else None
    sanitizer_skip = no_gpu or (None if exe else "compute-sanitizer not found (PATH, CUDA_HOME, /usr/local/cuda)")
    verifier: Any = None

    def start(left: float) -> None:
        nonlocal verifier
        if evaluator == "static":
            verifier = StaticVerifier(wl.spec(), gpu_name)
        else:
            verifier = GPUVerifier(wl, timeout_s=120.0, startup_timeout_s=max(30.0, left - 10), repeats=repeats)
            data["baseline_notes"] = verifier.notes
        data["device"], data["copy_gbps"] = verifier.device, verifier.copy_gbps

    def measure(which: str, key: str) -> Callable[[float], None]:
        def fn(left: float) -> None:
            k = finalists[key].kernel
            res = (verifier.evaluate(k, which) if evaluator == "static"
                   else verifier.evaluate(k, which, timeout_s=max(20.0, left - 5)))
            data[which][key] = result_json(res)
            log(f"{which}:{key}: {res.status.value} objective={res.objective} {res.reason[:200]}")
        return fn

    def sanitize(tool: str) -> Callable[[float], None]:
        def fn(left: float) -> None:
            data["sanitizer"][tool] = run_sanitizer(tool, spec_path, max(10.0, left - 5), exe)  # type: ignore[arg-type]
        return fn

    def ncu(left: float) -> None:
        from evaluators.gpu.ncu import NcuError, measure_dram_bytes

        try:
            m = measure_dram_bytes(best.kernel, wl, NCU_SHAPE, arch=arch, timeout_s=max(10.0, left - 5))
        except NcuError as e:
            data["ncu"] = {"shape": list(NCU_SHAPE), "error": str(e)[:1500]}
            return
        data["ncu"] = {"shape": list(NCU_SHAPE), "read_bytes": m.read_bytes, "write_bytes": m.write_bytes,
                       "total_bytes": m.total_bytes, "time_us": m.time_us, "model_bytes": wl.bytes_moved(NCU_SHAPE)}

    # Priority order: what the targets need first (the best kernel's matrix with the naive seed and
    # the baselines interleaved, its held-out gate, memcheck and racecheck), then the comparison kernels' own
    # runs, the remaining sanitizer tools and ncu.
    first_tools = [t for t in sanitizer_tools if t in ("memcheck", "racecheck")]
    later_tools = [t for t in sanitizer_tools if t not in first_tools]
    est = PHASE_ESTIMATE_S
    plan: list[tuple[str, float, Callable[[float], None], str | None]] = [
        ("pool_start", est["pool_start"] if evaluator == "gpu" else 0.0, start, None),
        ("benchmark:best", est["benchmark"], measure("benchmark", "best"), None),
        ("heldout:best", est["heldout"], measure("heldout", "best"), None),
        *((f"sanitize:{t}", est["sanitize"], sanitize(t), sanitizer_skip) for t in first_tools),
        ("benchmark:template", est["benchmark"], measure("benchmark", "template"), None),
        ("benchmark:naive", est["benchmark"], measure("benchmark", "naive"), None),
        ("heldout:template", est["heldout"], measure("heldout", "template"), None),
        ("heldout:naive", est["heldout"], measure("heldout", "naive"), None),
        *((f"sanitize:{t}", est["sanitize"], sanitize(t), sanitizer_skip) for t in later_tools),
        ("ncu", est["ncu"], ncu, no_gpu),
    ]
    try:
        for name, estimate_s, fn, skip in plan:
            if verifier is None and name.split(":")[0] in ("benchmark", "heldout"):
                skip = skip or "no evaluator: the pool_start phase did not complete"
            rec.run(name, estimate_s, fn, skip=skip)
    finally:
        if verifier is not None:
            verifier.close()
        shutil.rmtree(work, ignore_errors=True)
    data["finished_utc"] = utc_now()
    data["seconds"] = round(time.monotonic() - t_start, 1)
    rec.save()
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, type=Path, help="the run dir of `python -m evolve` (store.sqlite)")
    ap.add_argument("--out", required=True, type=Path, help="where verify.json goes")
    ap.add_argument("--deadline-s", type=float, default=240.0, help="seconds this script may take in all")
    ap.add_argument("--evaluator", choices=["gpu", "static"], default="gpu",
                    help="gpu (the H200) or static (dry run without a GPU: estimates only)")
    ap.add_argument("--repeats", type=int, default=20, help="timed launches per kernel and shape")
    ap.add_argument("--sanitizer-tools", default=",".join(SANITIZER_TOOLS),
                    help=f"comma-separated compute-sanitizer tools, in order (default {','.join(SANITIZER_TOOLS)})")
    ap.add_argument("--evolve-started", type=float, default=None, help="UNIX time `python -m evolve` started")
    ap.add_argument("--evolve-ended", type=float, default=None, help="UNIX time it ended")
    args = ap.parse_args(argv)
    tools = tuple(t for t in args.sanitizer_tools.split(",") if t)
    bad = [t for t in tools if t not in SANITIZER_TOOLS]
    if bad:
        ap.error(f"--sanitizer-tools: unknown {bad}; known {list(SANITIZER_TOOLS)}")
    try:
        data = verify(args.run, args.out, args.deadline_s, args.evaluator, args.repeats, tools,
                      args.evolve_started, args.evolve_ended)
    except ValueError as e:
        print(f"rmsnorm_h200_verify: {e}", file=sys.stderr)
        return 2
    failed = [p["name"] for p in data["phases"] if p["status"] == "failed"]
    log(f"wrote {args.out} in {data['seconds']} s; phases failed: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    if __package__ in (None, ""):
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
