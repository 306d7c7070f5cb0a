"""``evaluator=replay``: evaluate from recorded GPU runs instead of a GPU.

A candidate a recorded run already evaluated (same identity: canonical PTX, entry and launch; ``Kernel.identity``)
gets that run's result back exactly: status, reason, objective, per-shape measured µs, resources, occupancy and
descriptors (when the stores took their objectives against different references, e.g. runs recorded under
different gate versions, the objective is recomputed from the recorded times on one scale instead and the recorded
one kept in ``extra["recorded_objective"]``). So a search that proposes only recorded candidates (replaying a recorded run's own sequence) builds
the recorded archive exactly, and a search with the recorded run's algorithm, seed and settings, run by the same
search code, re-walks it candidate for candidate (``engine.ordered``: every later proposal depends only on the
results told so far; a change to the operators or their selection since the recording changes the walk). The stores are read in the order given; the first store that evaluated an identity
answers for it.

An unseen candidate is compiled and analysed as the static evaluator does (ptxas, occupancy, static traffic,
calibrated cost model; compile and launch failures come back as those statuses), then its time at each search
shape is predicted by the surrogate (``evaluators.surrogate``: an MLP ensemble fitted on the recorded
measurements, a correction of the static model). Such a result is an ESTIMATE: ``estimate=True``, the reason
starts with ``"estimate: replay surrogate"``, and ``extra["surrogate_log_std"]`` gives the ensemble's spread of
the log time per shape (0.1 ~ 10 % uncertainty). The objective is the geomean speedup over the recorded median
time of the workload's primary baseline (``torch`` for RMSNorm, the objective of the 2026-12-01 recordings; the
median recorded kernel when no run timed it), so recorded and estimated objectives are on one scale. The surrogate
cannot say whether an unseen kernel is correct: it is scored as if it passed the gate.

The surrogate is fitted on first use (the static terms of every recorded kernel are computed once and cached,
``evaluators.calibration.recorded_terms``; a few minutes on 2 cores the first time).
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from archive.store import CandidateRow
from evaluators.calibration import recorded_terms, terms_of_analysis
from evaluators.features import kernel_features
from evaluators.holdout import surrogate_rows
from evaluators.recorded import Recording, load_recording, open_store, resolve_store, run_name
from evaluators.static import StaticEvaluator, failure_result
from evaluators.surrogate import SurrogateModel, feature_vector, fit_surrogate, knob_names_of
from evaluators.types import EvalResult, ShapeResult, Status, geomean
from population.kernel import Kernel

_EVAL_STATUSES = {s.value for s in Status}
log = logging.getLogger(__name__)


def _check_workload(path: str, meta: dict[str, Any], workload: Any) -> None:
    """Raise ValueError when the store at ``path`` recorded another workload (name or dtype) than ``workload``:
    none of its kernels could be answered, and the surrogate would be fitted on another operation's times.
    A store whose workload cannot be rebuilt from its config is not judged."""
    from archive.export import workload_from_meta

    rec = workload_from_meta(meta)
    if rec is None:
        return
    got = (getattr(rec, "name", None), str(getattr(rec, "dtype", "")))
    want = (workload.name, str(getattr(workload, "dtype", "")))
    if got != want:
        raise ValueError(f"evaluator.stores: {path} recorded workload {got[0]} ({got[1]}), this run's is "
                         f"{want[0]} ({want[1]}); replay needs stores recorded on the run's workload")


class ReplayEvaluator:
    """``types.Evaluator`` over recorded runs (module docstring).

    workload: the ``Workload`` the runs measured; stores: recorded run stores (``.sqlite`` or ``.sqlite.xz``),
    at least one; gpu / arch / processes / cache_dir / calibration: as ``StaticEvaluator``; members / steps /
    seed: the surrogate's ensemble size, training steps and seed; terms_cache: where the recorded kernels'
    static terms are cached (default: ``evaluators.calibration``'s). Raises ValueError for no stores, a store
    without measured candidates or one recorded on another workload or dtype, FileNotFoundError for a missing
    store.
    """

    estimate = True

    def __init__(self, workload, stores: Sequence[str], gpu: Any = None, arch: str | None = None,
                 processes: int | None = None, cache_dir: str | None = None, calibration: str | None = None,
                 members: int = 5, steps: int = 1500, seed: int = 0, terms_cache: str | None = None) -> None:
        stores = [str(s) for s in (stores or [])]
        if not stores:
            raise ValueError("evaluator.stores: the replay evaluator needs at least one recorded run store")
        stores = [str(resolve_store(s)) for s in stores]
        for s in stores:
            if not Path(s).is_file():
                raise FileNotFoundError(f"evaluator.stores: {s!r} is no file")
        self.workload = workload
        self.stores = stores
        self.static = StaticEvaluator(workload, gpu=gpu, arch=arch, processes=processes, cache_dir=cache_dir,
                                      calibration=calibration)
        self.capacity = self.static.capacity
        self.gpu = self.static.gpu
        self.model_version = f"replay+{self.static.model_version}"
        self.members, self.steps, self.seed, self.terms_cache = members, steps, seed, terms_cache
        self._index: dict[str, tuple[str, CandidateRow]] = {}
        bases: set[str] = set()
        for path in stores:
            name = run_name(path)
            with open_store(path) as st:
                _check_workload(path, st.meta(), workload)
                for row in st.candidates(with_ptx=False):
                    if row.status in _EVAL_STATUSES and row.identity not in self._index:
                        self._index[row.identity] = (name, row)
                    if row.status == Status.OK and row.objective is not None and not row.metrics.get("estimate"):
                        bases.add(str(row.metrics.get("extra", {}).get("objective_baseline", "?")))
        # Recorded objectives are returned as recorded when every run took them against the workload's primary
        # baseline (the scale the surrogate's estimates use too); runs recorded against other references (a later
        # gate's best-library objective) get every objective recomputed on that one scale instead.
        self.recorded_objectives = bases <= {workload.primary_baseline}
        self.objective_baselines = sorted(bases)
        self._lock = threading.Lock()
        self._recording: Recording | None = None
        self._surrogate: SurrogateModel | None = None
        self._reference: dict[tuple[int, ...], float] | None = None
        self._reference_name = ""
        self.answered = {"recorded": 0, "surrogate": 0}
        # What the objectives mean (evolve.runinfo / the run's objective meta): one scale for recorded and
        # estimated kernels; no gate runs here (a recorded result passed its own run's gate, an estimate none).
        self.baseline = workload.primary_baseline
        self.gate_version = None
        self.objective_definition = (
            f"geomean over shapes of the speedup over the median recorded H200 time of {self.baseline} at that "
            f"shape: the recorded GPU time for a kernel a recorded run measured, else an ESTIMATE of the replay "
            f"surrogate (evaluators.replay; runs {', '.join(run_name(p) for p in stores)})")

    def __len__(self) -> int:
        """Number of distinct recorded identities."""
        return len(self._index)

    def banner(self) -> str:
        """The run banner: how many kernels are on record, and the surrogate's measured held-out fidelity."""
        from evaluators.fidelity import fidelity_line

        scale = ("" if self.recorded_objectives else
                 f" The recorded objectives were taken against {' and '.join(self.objective_baselines)}: every objective is "
                 f"recomputed from the recorded times against one reference ({self.workload.primary_baseline}).")
        return (f"Replay evaluator ({self.model_version}) over {len(self.stores)} recorded H200 run(s), "
                f"{len(self._index)} recorded kernels: a recorded kernel gets its recorded GPU result back, any "
                f"other an ESTIMATE of the surrogate fitted on the record (correctness not checked).{scale} Surrogate: "
                f"{fidelity_line('replay', self.model_version, workload=self.workload.name)}")

    # --------------------------------------------------------------------------------------------- record
    def recorded(self, kernel: Kernel) -> EvalResult | None:
        """The recorded result of ``kernel`` (by identity), None when no store evaluated it."""
        hit = self._index.get(kernel.identity)
        if hit is None:
            return None
        run, row = hit
        r = row.to_eval_result()
        r.extra = {**r.extra, "replay": {"run": run, "row": row.id}}
        if r.ok and r.shapes and not self.recorded_objectives:
            self._fit_reference()
            assert self._reference is not None
            r.extra["recorded_objective"] = r.objective
            r.objective = geomean([self._reference[tuple(x.shape)] / x.time_us for x in r.shapes])
        return r

    def _fit_reference(self) -> None:
        with self._lock:
            if self._reference is None:
                rec = self._recording or load_recording(self.stores)
                self._recording = rec
                self._reference_name, self._reference = rec.baseline_or_reference(self.workload.primary_baseline)

    # ------------------------------------------------------------------------------------------ surrogate
    def _fit(self) -> None:
        with self._lock:
            if self._surrogate is not None:
                return
            start = time.perf_counter()
            log.info("first kernel not on record: fitting the replay surrogate on %d recorded kernels "
                     "(%d members x %d steps; about a minute on 2 cores, once per run)",
                     len(self._index), self.members, self.steps)
            rec = self._recording or load_recording(self.stores)
            terms = recorded_terms(rec.kernels.values(), self.workload, gpu=self.gpu.name,
                                   processes=self.capacity, cache=self.terms_cache)
            ok = [m for m in rec.kernels.values() if terms[m.identity].get("status") == "ok"]
            consts = self.static.calibration.constants
            knobs = knob_names_of([m.row.launch.get("knobs") for m in ok])
            x, base, gp, grp = surrogate_rows(ok, terms, rec.shapes, consts, knobs)
            self._surrogate = fit_surrogate(x, np.log(gp) - np.log(base), grp, members=self.members,
                                            steps=self.steps, seed=self.seed, knob_names=knobs,
                                            shape_index=np.tile(np.arange(len(rec.shapes)), len(ok)))
            self._recording = rec
            log.info("replay surrogate fitted on %d measured kernels in %.0f s", len(ok), time.perf_counter() - start)
        self._fit_reference()

    def predict(self, kernel: Kernel) -> EvalResult:
        """The surrogate's estimate for ``kernel`` (whether or not it is on record); failures of the static
        analysis come back as their statuses."""
        start = time.perf_counter()
        shapes = [tuple(s) for s in self.workload.search_shapes]
        try:
            a = self.static.analyse(kernel, shapes)
        except Exception as e:  # failure_result re-raises anything but a rejection or an unmodellable kernel
            return failure_result(e, start, prefix="estimate: replay surrogate: ")
        self._fit()
        assert self._surrogate is not None and self._reference is not None
        kt = terms_of_analysis(a, kernel)
        consts = self.static.calibration.constants
        rows = [feature_vector(kt, s, consts, dict(kernel.launch.knobs), self._surrogate.knob_names) for s in shapes]
        pred, sd = self._surrogate.predict(np.stack([r[0] for r in rows]), np.array([r[1] for r in rows]))
        primary = self.workload.primary_baseline
        results = []
        for s, t, _ in zip(shapes, pred, sd):
            ref = self._reference[s]
            gbps = self.workload.gbps(s, float(t))
            results.append(ShapeResult(shape=s, dtype=self.workload.dtype, time_us=float(t), gbps=gbps,
                                       frac_copy=gbps / self.gpu.copy_gbps, speedups={primary: ref / float(t)},
                                       baseline_us={primary: ref}, estimate=True))
        objective = geomean([r.speedups[primary] for r in results])
        return EvalResult(
            status=Status.OK, reason=f"estimate: replay surrogate {self.model_version} (no GPU measurement)",
            objective=objective, shapes=results, resources=a.resources, occupancy=a.occupancy,
            traffic_bytes=a.traffic[shapes[0]].bytes,
            features=kernel_features(kernel, self.workload, a.resources, a.occupancy, a.traffic), estimate=True,
            eval_seconds=time.perf_counter() - start,
            extra={"objective_baseline": f"{self._reference_name} (median over the recorded runs)",
                   "model_version": self.model_version,
                   "surrogate_log_std": {str(list(s)): float(v) for s, v in zip(shapes, sd)},
                   "uncertainty": float(math.sqrt(statistics.fmean(float(v) ** 2 for v in sd)))})

    # ------------------------------------------------------------------------------------------ evaluator
    def evaluate(self, kernel: Kernel) -> EvalResult:
        """The recorded result when ``kernel`` is on record, else the surrogate's estimate. Never raises for a
        bad kernel."""
        start = time.perf_counter()
        r = self.recorded(kernel)
        if r is not None:
            with self._lock:
                self.answered["recorded"] += 1
            r.eval_seconds = time.perf_counter() - start
            return r
        with self._lock:
            self.answered["surrogate"] += 1
        return self.predict(kernel)

    def close(self) -> None:
        """Nothing to release; present for the Evaluator protocol."""

    def stats(self) -> dict[str, Any]:
        """How many evaluations were answered from the record and how many by the surrogate."""
        with self._lock:
            return dict(self.answered)
