"""How well a CPU model ranks kernels the way the GPU does: the metrics, and the measured values the static and
replay evaluators print in their run banner.

Metrics (over kernels measured on the GPU and scored by a model; lower time = better):
- Spearman rank correlation and Kendall's tau-b between model and GPU (``scipy.stats``), over all kernels and
  within the GPU's top k (the k fastest by the GPU's ordering);
- top-k overlap: how many of the GPU's k best are among the model's k best (chance: k^2 / n);
- favourite rank: where the model's best kernel lands in the GPU's order (as a percentile: 0.1 = inside the
  GPU's top 10 %);
- median relative time error per shape: median over kernels of ``|model µs - GPU µs| / GPU µs``.

The measured values live in ``evaluators/fidelity.json``, written by ``experiments/static_fidelity.py --write``
from leave-one-run-out validation (a model is never scored on a run it was fitted on).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

FIDELITY_FILE = Path(__file__).with_name("fidelity.json")


def rank_metrics(gpu: Sequence[float], model: Sequence[float], *, higher_is_better: bool = True,
                 top: int = 50) -> dict[str, float]:
    """Ranking agreement of ``model`` scores with ``gpu`` scores (same kernels, same order).

    higher_is_better: True for objectives (speedups), False for times. Returns spearman, kendall (tau-b),
    spearman_top / kendall_top (within the GPU's ``top`` best), overlap_top (count of shared kernels among the
    ``top`` best of each), overlap_top10, chance_overlap_top (top^2 / n), favourite_percentile (GPU rank of the
    model's best / n, 0 = the GPU's best), n. ValueError when fewer than 3 kernels are given or the lengths
    differ."""
    from scipy.stats import kendalltau, spearmanr

    g = np.asarray(gpu, dtype=float)
    m = np.asarray(model, dtype=float)
    if g.shape != m.shape or g.size < 3:
        raise ValueError(f"rank_metrics needs two equal-length score lists of >= 3 kernels, got {g.size}, {m.size}")
    if not higher_is_better:
        g, m = -g, -m
    n = g.size
    k = min(top, n)
    g_order = np.argsort(-g, kind="stable")
    m_order = np.argsort(-m, kind="stable")
    g_top = g_order[:k]
    g_rank = np.empty(n, dtype=int)
    g_rank[g_order] = np.arange(n)

    def corr(fn, a: np.ndarray, b: np.ndarray) -> float:
        if np.ptp(a) == 0 or np.ptp(b) == 0:
            return 0.0
        r = fn(a, b)
        v = float(r.statistic if hasattr(r, "statistic") else r[0])
        return v if np.isfinite(v) else 0.0

    k10 = min(10, n)
    return {
        "n": float(n),
        "spearman": corr(spearmanr, g, m),
        "kendall": corr(kendalltau, g, m),
        "spearman_top": corr(spearmanr, g[g_top], m[g_top]) if k >= 3 else 0.0,
        "kendall_top": corr(kendalltau, g[g_top], m[g_top]) if k >= 3 else 0.0,
        "overlap_top": float(len(set(g_top.tolist()) & set(m_order[:k].tolist()))),
        "overlap_top10": float(len(set(g_order[:k10].tolist()) & set(m_order[:k10].tolist()))),
        "chance_overlap_top": k * k / n,
        "favourite_percentile": float(g_rank[m_order[0]] / n),
    }


def median_relative_error(gpu_us: Sequence[float], model_us: Sequence[float]) -> float:
    """Median of ``|model - gpu| / gpu`` (times in µs). ValueError on empty input or non-positive GPU times."""
    g = np.asarray(gpu_us, dtype=float)
    m = np.asarray(model_us, dtype=float)
    if g.size == 0 or np.any(g <= 0):
        raise ValueError("median_relative_error needs positive GPU times")
    return float(np.median(np.abs(m - g) / g))


def load_fidelity(path: str | Path | None = None) -> dict[str, Any]:
    """The recorded fidelity (``{"static": {...}, "replay": {...}}``), {} when the file is absent."""
    p = Path(path) if path else FIDELITY_FILE
    return json.loads(p.read_text()) if p.is_file() else {}


def fidelity_line(kind: str, model_version: str, path: str | Path | None = None, workload: str | None = None) -> str:
    """One sentence for a run banner: the held-out fidelity measured for ``kind`` (``"static"`` or
    ``"replay"``) at ``model_version`` on recorded runs of ``workload`` (its name; None: any), or a warning
    that none was measured for this version or this workload (a record without ``"workload"`` is RMSNorm's,
    the only workload recorded before the field existed)."""
    rec: Mapping[str, Any] = load_fidelity(path).get(kind, {})
    if not rec or rec.get("model_version") != model_version:
        return (f"No fidelity was measured for {model_version} (experiments/static_fidelity.py): how well it "
                "ranks kernels as the GPU does is unknown.")
    measured_on = rec.get("workload", "rmsnorm")
    if workload is not None and workload != measured_on:
        return (f"No fidelity was measured for workload {workload!r}: {model_version} was calibrated and "
                f"measured on recorded {measured_on} runs only, so how well it ranks {workload} kernels as the "
                "GPU does is unknown.")
    return (f"Measured on recorded H200 runs it was not fitted on ({agreement(rec)} per shape."
            f"{later_sentence(rec)} Rankings below that agreement are not evidence about the GPU.")


def agreement(rec: Mapping[str, Any]) -> str:
    """``rec``'s stores, kernel count and held-out numbers as the banner words them (from "stores; n kernels)"
    to the median time error range)."""
    h = rec["held_out"]
    errs = rec.get("median_rel_error_per_shape", {})
    err = f"{100 * min(errs.values()):.0f}-{100 * max(errs.values()):.0f}%" if errs else "n/a"
    return (f"{', '.join(rec.get('stores', []))}; {int(h['n'])} kernels): Spearman {h['spearman']:.2f} overall, "
            f"{h['spearman_top']:.2f} within the GPU's top 50, top-50 overlap {int(h['overlap_top'])}/50, its "
            f"favourite inside the GPU's top {max(1, math.ceil(100 * h['favourite_percentile'])):.0f} %, median "
            f"time error {err}")


def later_sentence(rec: Mapping[str, Any]) -> str:
    """The banner's sentence on ``rec["later_runs"]`` (runs recorded after the model was fitted and designed,
    scored unchanged: ``experiments/static_fidelity.py --write-later``), with a leading space; "" when absent."""
    later = rec.get("later_runs")
    return f" On runs recorded after it was fitted ({agreement(later)}." if later else ""
