"""Fit the static cost model's constants (``evaluators.cost_model.CostConstants``) to recorded GPU times.

The constant-free terms of every recorded kernel at every shape are computed once (ptxas + occupancy + static
traffic, ``kernel_terms``; cached on disk by kernel identity and by a hash of the model's source, so a change
to the traffic or cost code recomputes them), then the constants are fitted by bounded nonlinear least
squares (``scipy.optimize.least_squares``, trust-region reflective) on the log of the time:
``residual = log(predicted µs) - log(measured µs)`` over every (kernel, shape), each shape weighted equally.
Log residuals make the fit care about relative error, which is what ranks kernels. Parameters are fitted in a
unit box mapped linearly onto ``cost_model.BOUNDS`` (so every constant stays physically plausible); the fit
restarts from a few starting points and keeps the best.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import multiprocessing
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from evaluators.cost_model import BOUNDS, TERM_NAMES, CostConstants, predict_time_us
from evaluators.recorded import PROJECT_ROOT, Measured, Recording, cache_dir
from targets.spec import DEFAULT_GPU

Shape = tuple[int, ...]
_SOURCES = ("traffic.py", "uniform.py", "ptx_stats.py")
# Terms of the recorded kernels computed by the shipped code (``terms-<workload>-<gpu>-<terms_version>.json.gz``),
# so a fresh checkout needs no ptxas pass over every recorded kernel; any code change makes them stale (unused).
SHIPPED_TERMS = PROJECT_ROOT / "experiments" / "data"


def terms_version() -> str:
    """Hash (16 hex) of the code the terms depend on: the traffic, uniform-value and PTX-count modules, and the
    functions that turn an analysis into terms (``features.kernel_traffic``, the static evaluator's analysis,
    ``cost_model.shape_terms``; not the constants or the time formula), so a cached term computed by other
    code is not reused and a change of the constants' bounds or the time formula reuses them."""
    import inspect

    from evaluators import cost_model, features, static

    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in _SOURCES:
        h.update((here / name).read_bytes())
    for fn in (features.kernel_traffic, cost_model.shape_terms, static.StaticEvaluator._analyse,
               static.estimate_shape, static.cluster_size):
        h.update(inspect.getsource(fn).encode())
    return h.hexdigest()[:16]


def kernel_terms(evaluator: Any, kernel: Any) -> dict[str, Any]:
    """``{"status": "ok", "terms": {shape str: terms}, "resources": {...}, "occupancy": float,
    "stats": ptx_stats}`` for one kernel under a ``StaticEvaluator``, or ``{"status": <failure>, "reason": ...}``
    when it does not compile or launch there. Never raises for a bad kernel."""
    try:
        a = evaluator.analyse(kernel)
    except Exception as e:  # compile error, launch rule, zero occupancy: recorded, not fatal
        return {"status": type(e).__name__, "reason": str(e)[:300]}
    return terms_of_analysis(a, kernel)


def terms_of_analysis(a: Any, kernel: Any) -> dict[str, Any]:
    """``kernel_terms``' ok result from a ``StaticEvaluator.analyse`` result."""
    from evaluators.ptx_stats import ptx_stats

    return {"status": "ok",
            "terms": {json.dumps(list(s)): est.terms for s, est in a.estimates.items()},
            "resources": a.resources.to_json(),
            "occupancy": a.occupancy.occupancy,
            "blocks_per_sm": a.occupancy.blocks_per_sm,
            "stats": ptx_stats(kernel)}


_WORKER: dict[str, Any] = {}


def _init_worker(workload_spec: dict[str, Any], gpu: str) -> None:
    from evaluators.static import StaticEvaluator
    from workloads.registry import get_workload

    wl = get_workload(workload_spec["name"], **workload_spec["options"])
    _WORKER["ev"] = StaticEvaluator(wl, gpu=gpu, processes=1, calibration=None)


def _work(item: tuple[str, str, str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    from population.kernel import Kernel, LaunchConfig
    from population.parser import parse_module

    identity, ptx, entry, launch = item
    k = Kernel(module=parse_module(ptx, filename=f"recorded-{identity[:12]}"), entry=entry,
               launch=LaunchConfig.from_json(launch))
    return identity, kernel_terms(_WORKER["ev"], k)


def recorded_terms(kernels: Iterable[Measured], workload: Any, *, gpu: str = DEFAULT_GPU, processes: int | None = None,
                   cache: str | Path | None = None,
                   progress: Callable[[int, int], None] | None = None) -> dict[str, dict[str, Any]]:
    """``kernel_terms`` of every kernel, by identity, computed in ``processes`` worker processes (default: the
    CPU count) and cached in ``cache`` (default ``<recorded cache>/terms-<workload>-<gpu>-<terms_version>.json``,
    seeded from the shipped ``experiments/data/<same name>.gz`` when it matches this code).
    workload: the ``Workload`` the kernels were measured for."""
    kernels = list(kernels)
    spec = {"name": workload.name, "options": workload.options()}
    name = f"terms-{workload.name}-{gpu}-{terms_version()}.json"
    path = Path(cache) if cache else cache_dir() / name
    shipped = SHIPPED_TERMS / f"{name}.gz"
    if path.is_file():
        done: dict[str, dict[str, Any]] = json.loads(path.read_text())
    elif cache is None and shipped.is_file():  # terms shipped with the recorded runs, for this very code
        with gzip.open(shipped, "rt") as f:
            done = json.load(f)
    else:
        done = {}
    todo = [(m.identity, m.row.ptx, m.row.entry, m.row.launch) for m in kernels if m.identity not in done]
    if todo:
        n = max(1, min(processes or os.cpu_count() or 1, len(todo)))
        if n == 1:
            _init_worker(spec, gpu)
            results = map(_work, todo)
            pool = None
        else:  # spawn, not fork: the parent may already run JAX's threads
            pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"),
                                       initializer=_init_worker, initargs=(spec, gpu))
            results = pool.map(_work, todo, chunksize=4)
        try:
            for i, (ident, res) in enumerate(results):
                done[ident] = res
                if progress is not None:
                    progress(i + 1, len(todo))
                if (i + 1) % CHECKPOINT_EVERY == 0:  # a kill mid-way keeps what was computed
                    _write_terms(path, done)
        finally:
            if pool is not None:
                pool.shutdown()
        _write_terms(path, done)
    return {m.identity: done[m.identity] for m in kernels}


# Kernels between two writes of the terms cache (a kernel takes ~0.45 s of ptxas + traffic on one core: 1651 in
# 367 s on 2 cores, 2026-12-02).
CHECKPOINT_EVERY = 100


def _write_terms(path: Path, done: Mapping[str, Any]) -> None:
    """Write the cache atomically (temporary file, then rename): a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(done))
    tmp.replace(path)


def term_arrays(kernels: Sequence[Measured], terms: Mapping[str, Mapping[str, Any]], shapes: Sequence[Shape]
                ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, list[str]]:
    """Stack the terms of every (kernel, shape) whose terms are ok: (terms name -> array, measured µs array,
    shape index array, identities of the kernels used, in order)."""
    cols: dict[str, list[float]] = {k: [] for k in TERM_NAMES}
    meas: list[float] = []
    shape_idx: list[int] = []
    used: list[str] = []
    for m in kernels:
        t = terms.get(m.identity)
        if not t or t.get("status") != "ok":
            continue
        used.append(m.identity)
        for j, s in enumerate(shapes):
            st = t["terms"][json.dumps(list(s))]
            for k in TERM_NAMES:
                cols[k].append(float(st[k]))
            meas.append(m.times_us[s])
            shape_idx.append(j)
    return {k: np.asarray(v) for k, v in cols.items()}, np.asarray(meas), np.asarray(shape_idx), used


_NAMES = [f.name for f in fields(CostConstants)]


def _from_unit(u: np.ndarray) -> CostConstants:
    return CostConstants(**{n: BOUNDS[n][0] + float(x) * (BOUNDS[n][1] - BOUNDS[n][0]) for n, x in zip(_NAMES, u)})


def _to_unit(c: CostConstants) -> np.ndarray:
    return np.array([(getattr(c, n) - BOUNDS[n][0]) / (BOUNDS[n][1] - BOUNDS[n][0]) for n in _NAMES]).clip(0, 1)


def fit_constants(terms: Mapping[str, np.ndarray], measured_us: np.ndarray, shape_idx: np.ndarray, *,
                  start: CostConstants | None = None, restarts: int = 4, seed: int = 0
                  ) -> tuple[CostConstants, dict[str, float]]:
    """Least-squares fit of the constants (module docstring). Returns (constants, info) with info's
    ``rms_log_error`` (root mean square of the log residual) and ``median_rel_error``. ValueError on an empty fit
    set or non-positive measured times."""
    from scipy.optimize import least_squares

    if measured_us.size == 0:
        raise ValueError("fit_constants: nothing to fit (no kernel with terms)")
    if np.any(measured_us <= 0):
        raise ValueError("fit_constants: measured times must be positive")
    logm = np.log(measured_us)
    counts = np.bincount(shape_idx)
    weight = 1.0 / np.sqrt(counts[shape_idx] / counts.mean())

    def resid(u: np.ndarray) -> np.ndarray:
        pred = predict_time_us(terms, _from_unit(u))
        return (np.log(np.maximum(pred, 1e-6)) - logm) * weight

    rng = np.random.default_rng(seed)
    starts = [_to_unit(start or CostConstants())] + [rng.uniform(0.05, 0.95, len(_NAMES)) for _ in range(restarts)]
    best = None
    for u0 in starts:
        r = least_squares(resid, u0, bounds=(0.0, 1.0), method="trf", x_scale=0.1, max_nfev=400)
        if best is None or r.cost < best.cost:
            best = r
    c = _from_unit(best.x)
    pred = predict_time_us(terms, c)
    rel = np.abs(pred - measured_us) / measured_us
    return c, {"rms_log_error": float(np.sqrt(np.mean((np.log(pred) - logm) ** 2))),
               "median_rel_error": float(np.median(rel)), "points": int(measured_us.size)}


def recording_arrays(rec: Recording, terms: Mapping[str, Mapping[str, Any]], runs: Sequence[str] | None = None,
                     exclude: set[str] | None = None):
    """``term_arrays`` over the kernels of ``runs`` (default all), minus identities in ``exclude``."""
    runs = list(runs or rec.runs)
    ks = [m for m in rec.kernels.values() if any(r in runs for r in m.runs) and m.identity not in (exclude or set())]
    return term_arrays(ks, terms, rec.shapes)
