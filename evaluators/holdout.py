"""Leave-one-run-out validation of the CPU models against recorded GPU runs (used by
``experiments/static_fidelity.py`` and the tests).

For each recorded run R: the static model's constants and the replay surrogate are fitted on the kernels of the
other runs, minus every kernel R also measured (same identity: PTX + launch), and scored on R's kernels only. A
kernel is therefore never scored by a model fitted on it. With one run only, there is no held-out fold.

``fit_then_score`` is the other split: fitted once on a set of runs (e.g. those recorded under one version of
the gate), scored unchanged on other runs (recorded later), minus every kernel the fitted runs measured.

Scores: per kernel, ``score = -mean over shapes of log(time / reference)``, reference = a per-shape constant
(``Recording.reference_times``: the median recorded kernel), i.e. a geomean speedup in log form. The same
reference for GPU and model, so the GPU's own baseline-timing noise does not enter the ranking (and the ranking
does not depend on which constant is used).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evaluators.calibration import fit_constants, term_arrays
from evaluators.cost_model import CostConstants, predict_time_us
from evaluators.fidelity import median_relative_error, rank_metrics
from evaluators.recorded import Measured, Recording
from evaluators.surrogate import (
    RANK_TEMPERATURE,
    RANK_WEIGHT,
    SurrogateModel,
    feature_vector,
    fit_surrogate,
    knob_names_of,
)

Shape = tuple[int, ...]


@dataclass
class FoldResult:
    """One held-out run: its kernels (identities), GPU µs and model µs per shape ((n, shapes) arrays), the
    surrogate's log-std, and the constants fitted without it."""

    run: str
    identities: list[str]
    gpu_us: np.ndarray
    static_us: np.ndarray
    replay_us: np.ndarray
    replay_std: np.ndarray
    constants: CostConstants
    train_kernels: int
    fit_info: dict[str, Any] = field(default_factory=dict)


def scores(times_us: np.ndarray, reference_us: np.ndarray) -> np.ndarray:
    """Per kernel (rows of ``times_us``, (n, shapes)): ``-mean(log(time / reference))``."""
    return -np.mean(np.log(times_us / reference_us[None, :]), axis=1)


def surrogate_rows(kernels: Sequence[Measured], terms: Mapping[str, Mapping[str, Any]], shapes: Sequence[Shape],
                   constants: CostConstants, knob_names: Sequence[str] = ()
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(features (n*shapes, d), base µs (``surrogate.roofline_us``), GPU µs, kernel index) for the surrogate, kernels with ok terms only
    (callers filter first); rows are kernel-major (row i*len(shapes)+j = kernel i at shape j)."""
    xs, st, gp, grp = [], [], [], []
    for i, m in enumerate(kernels):
        for s in shapes:
            f, s_us = feature_vector(terms[m.identity], s, constants, m.row.launch.get("knobs"), knob_names)
            xs.append(f)
            st.append(s_us)
            gp.append(m.times_us[s])
            grp.append(i)
    return np.stack(xs), np.asarray(st), np.asarray(gp), np.asarray(grp)


def fit_models(train: Sequence[Measured], terms: Mapping[str, Mapping[str, Any]], shapes: Sequence[Shape], *,
               surrogate: bool = True, seed: int = 0, members: int = 5, steps: int = 1500
               ) -> tuple[CostConstants, dict[str, Any], SurrogateModel | None]:
    """Fit the static constants, then (when ``surrogate``) the surrogate on ``train``."""
    arr, meas, sidx, _ = term_arrays(train, terms, shapes)
    consts, info = fit_constants(arr, meas, sidx, seed=seed)
    model = None
    if surrogate:
        knobs = knob_names_of([m.row.launch.get("knobs") for m in train])
        x, st, gp, grp = surrogate_rows(train, terms, shapes, consts, knobs)
        model = fit_surrogate(x, np.log(gp) - np.log(st), grp, seed=seed, members=members, steps=steps,
                              shape_index=np.tile(np.arange(len(shapes)), len(train)), base_us=st,
                              rank_weight=RANK_WEIGHT, temperature=RANK_TEMPERATURE, knob_names=knobs)
    return consts, info, model


def _score(run: str, test: Sequence[Measured], terms: Mapping[str, Mapping[str, Any]], shapes: Sequence[Shape],
           consts: CostConstants, model: SurrogateModel | None, train_kernels: int, info: dict[str, Any]
           ) -> FoldResult:
    """Score ``test`` (kernels with ok terms) with fitted constants and surrogate: one ``FoldResult``."""
    gpu = np.array([[m.times_us[s] for s in shapes] for m in test])
    arr, _, _, _ = term_arrays(test, terms, shapes)
    static = np.asarray(predict_time_us(arr, consts)).reshape(len(test), len(shapes))
    if model is not None:
        x, st, _, _ = surrogate_rows(test, terms, shapes, consts, model.knob_names)
        rp, sd = model.predict(x, st)
        replay, rstd = rp.reshape(static.shape), sd.reshape(static.shape)
    else:
        replay, rstd = np.full_like(static, np.nan), np.full_like(static, np.nan)
    return FoldResult(run, [m.identity for m in test], gpu, static, replay, rstd, consts, train_kernels,
                      {**info, **({"surrogate": model.info} if model else {})})


def leave_one_run_out(rec: Recording, terms: Mapping[str, Mapping[str, Any]], *, surrogate: bool = True,
                      seed: int = 0, members: int = 5, steps: int = 1500) -> list[FoldResult]:
    """One ``FoldResult`` per run (module docstring). Kernels without ok terms (they fail ptxas or the launch
    under the static model) are left out of both sides. ValueError with fewer than two runs."""
    if len(rec.runs) < 2:
        raise ValueError("leave-one-run-out needs at least two recorded runs")
    ok = {i for i, t in terms.items() if t.get("status") == "ok"}
    out: list[FoldResult] = []
    for run in rec.runs:
        test = [m for m in rec.of_run(run) if m.identity in ok]
        held = {m.identity for m in rec.of_run(run)}
        train = [m for m in rec.kernels.values() if m.identity in ok and m.identity not in held]
        consts, info, model = fit_models(train, terms, rec.shapes, surrogate=surrogate, seed=seed,
                                         members=members, steps=steps)
        out.append(_score(run, test, terms, rec.shapes, consts, model, len(train), info))
    return out


def fit_then_score(fit: Recording, score: Sequence[Recording], terms: Mapping[str, Mapping[str, Any]], *,
                   surrogate: bool = True, seed: int = 0, members: int = 5, steps: int = 1500
                   ) -> list[FoldResult]:
    """Fit once on every kernel of ``fit`` (the constants, then the surrogate, as ``fit_models``: what the
    shipped calibration and ``evaluator=replay`` over ``fit``'s stores do), then score each run of each
    recording in ``score`` unchanged: one ``FoldResult`` per scored run, holding that run's kernels with ok
    terms minus every kernel ``fit`` measured (same identity), with the scored recording's GPU times (give
    each scored store as its own ``Recording`` so a run is scored on its own measurements).

    terms: ``kernel_terms`` by identity for every kernel of ``fit`` and ``score``. Raises ValueError when a
    scored recording was measured at other shapes than ``fit``, or a scored run has fewer than 3 kernels
    left (``rank_metrics`` needs 3)."""
    ok = {i for i, t in terms.items() if t.get("status") == "ok"}
    train = [m for m in fit.kernels.values() if m.identity in ok]
    consts, info, model = fit_models(train, terms, fit.shapes, surrogate=surrogate, seed=seed, members=members,
                                     steps=steps)
    out: list[FoldResult] = []
    for rec in score:
        if list(rec.shapes) != list(fit.shapes):
            raise ValueError(f"fit_then_score: scored runs {rec.runs} were measured at {rec.shapes}, the fitted "
                             f"ones at {fit.shapes}")
        for run in rec.runs:
            test = [m for m in rec.of_run(run) if m.identity in ok and m.identity not in fit.kernels]
            if len(test) < 3:
                raise ValueError(f"fit_then_score: run {run!r} has {len(test)} kernels the fitted runs did not "
                                 "measure; at least 3 are needed")
            out.append(_score(run, test, terms, fit.shapes, consts, model, len(train), info))
    return out


def fold_metrics(f: FoldResult, reference_us: np.ndarray, shapes: Sequence[Shape], which: str, top: int = 50
                 ) -> dict[str, Any]:
    """Metrics of one fold for ``which`` = "static" or "replay": rank_metrics on the scores, plus
    per-shape Spearman and median relative error."""
    from scipy.stats import spearmanr

    pred = f.static_us if which == "static" else f.replay_us
    m = rank_metrics(scores(f.gpu_us, reference_us), scores(pred, reference_us), top=top)
    per_shape = {}
    for j, s in enumerate(shapes):
        r = spearmanr(f.gpu_us[:, j], pred[:, j])
        per_shape["x".join(map(str, s))] = {
            "spearman": float(r.statistic), "median_rel_error": median_relative_error(f.gpu_us[:, j], pred[:, j])}
    return {**m, "per_shape": per_shape}
