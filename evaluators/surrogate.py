"""A learned model of GPU time on top of the static cost model: an ensemble of small MLPs (JAX, jit-compiled) that
maps the static model's features of a kernel at a shape to the log of its GPU time, with the ensemble's spread as the
uncertainty (deep ensembles: B. Lakshminarayanan, A. Pritzel, C. Blundell, "Simple and Scalable Predictive
Uncertainty Estimation using Deep Ensembles", NeurIPS 2017).

Inputs (``feature_vector``): the log of the cost model's constant-free terms (``cost_model.TERM_NAMES``), the
log of its calibrated parts (t_dram, t_l2, t_issue, t_cta, time), ptxas resources and occupancy, PTX counts and
instruction mix (``evaluators.ptx_stats``: cache/eviction hints, approximate math, ``.maxnreg``...), the shape
(log of each dimension) and the kernel's numeric launch knobs (``knob_features``). Target: ``log(GPU µs) -
log(roofline µs)`` (``roofline_us``: a per-shape constant, so a per-shape log time); the static model's own
log time is an input. Leave-one-run-out on the recorded H200 runs (2026-12-01, experiments/static_fidelity.py)
chose this over the static model's log error as target (pooled top-50 overlap 29 -> 39 with the same
features): near the top the static model's errors are larger than the differences between kernels, and a
residual of it inherits them. Each member is trained on a bootstrap resample of the kernels (all shapes of a kernel go
together) from its own initialisation, full batch, Adam (``jax.example_libraries.optimizers``) with weight
decay, rows near the top of their shape weighing more (``top_weights``); inputs are standardised with the training set's mean and spread. At prediction, standardised inputs are
clipped to +-``Z_CLIP`` and each member's log time over the roofline to +-``MAX_LOG_CORRECTION``: far from the
training data the answer stays bounded, and the members' disagreement (the reported spread) grows.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from evaluators.cost_model import TERM_NAMES, CostConstants, predict_parts
from evaluators.ptx_stats import STAT_NAMES

_PARTS = ("t_dram", "t_l2", "t_issue", "t_cta", "time_us")
_RESOURCES = ("registers", "spill", "shared_static_bytes", "occupancy", "blocks_per_sm")
MAX_SHAPE_DIMS = 3
# Far outside the training data the network extrapolates wildly: standardised inputs are clipped to +-Z_CLIP
# and each member's log time over the roofline to +-MAX_LOG_CORRECTION (a factor e^4 ~ 55).
Z_CLIP = 6.0
MAX_LOG_CORRECTION = 4.0
# The rank term of the fit (``fit_surrogate``): its weight against the squared log error, and the softmax
# temperature in log time. Set by leave-one-run-out validation (experiments/static_fidelity.py).
# Leave-one-run-out on the two recorded H200 runs (2026-12-01): weight 0.3 at T = 0.1 lowered the pooled
# top-50 overlap from 39 to 13 and weight 1 at T = 0.05 did not help either, so the default fit has none.
RANK_WEIGHT = 0.0
RANK_TEMPERATURE = 0.05
# Rows near the top of their shape weigh more in the squared error (``top_weights``): the order that matters is
# among the fastest kernels, and the bulk of slow kernels otherwise sets the fit. Leave-one-run-out on the two
# recorded H200 runs (2026-12-01, static model v3 terms, 5 members, seeds 0-4): pooled top-50 overlap 39, 30,
# 36, 34, 41 unweighted -> 43, 36, 39, 37, 41 at weight 10, tau 0.1 (Spearman 0.93-0.94 -> 0.92-0.95); weight 3
# (tau 0.1 or 0.25) gave 40, 32, 39 on seeds 0-2. The setting was chosen on those same two runs.
TOP_WEIGHT = 10.0
TOP_TAU = 0.1


def feature_names(knob_names: Sequence[str] = ()) -> list[str]:
    """Names of ``feature_vector``'s entries, in order."""
    return ([f"term:{t}" for t in TERM_NAMES] + [f"model:{p}" for p in _PARTS] + [f"res:{r}" for r in _RESOURCES]
            + [f"ptx:{s}" for s in STAT_NAMES] + [f"shape:{i}" for i in range(MAX_SHAPE_DIMS)]
            + [f"knob:{k}" for k in knob_names])


def knob_names_of(knob_dicts: Sequence[Mapping[str, Any] | None]) -> tuple[str, ...]:
    """Sorted names of the numeric (int, float, bool) launch knobs (``LaunchConfig.knobs``) found in
    ``knob_dicts``: the knob features of a surrogate fitted on those kernels."""
    names = {k for d in knob_dicts if d for k, v in d.items() if isinstance(v, int | float | bool)}
    return tuple(sorted(names))


def knob_features(knobs: Mapping[str, Any] | None, knob_names: Sequence[str]) -> list[float]:
    """``sign(v) * log1p(|v|)`` of each named knob's value (0 when absent or not numeric): a template's knobs
    (threads, vector width, row loop trips, cache-hint choice...) name the code family a kernel comes from, which
    the PTX counts see only in part."""
    out = []
    for k in knob_names:
        v = (knobs or {}).get(k, 0)
        v = float(v) if isinstance(v, int | float | bool) else 0.0
        out.append(math.copysign(math.log1p(abs(v)), v))
    return out


def feature_vector(kernel_terms: Mapping[str, Any], shape: Sequence[int], constants: CostConstants,
                   knobs: Mapping[str, Any] | None = None, knob_names: Sequence[str] = ()
                   ) -> tuple[np.ndarray, float]:
    """(features, base µs) of one kernel at one shape from ``calibration.kernel_terms`` output (status ok), the
    base being the shape's roofline (``roofline_us``);
    ``knobs`` (the kernel's ``LaunchConfig.knobs``) give the trailing ``knob_names`` entries
    (``knob_features``). KeyError when the terms lack the shape."""
    terms = kernel_terms["terms"][json.dumps([int(v) for v in shape])]
    parts = predict_parts(terms, constants)
    res = kernel_terms["resources"]
    row = [math.log1p(max(0.0, float(terms[t]))) for t in TERM_NAMES]
    row += [math.log(max(float(parts[p]) * (1.0 if p == "time_us" else 1e6), 1e-6)) for p in _PARTS]
    row += [float(res["registers"]), float(res["spill_stores_bytes"] + res["spill_loads_bytes"]),
            float(res["shared_static_bytes"]), float(kernel_terms["occupancy"]),
            float(kernel_terms.get("blocks_per_sm", 0))]
    stats = kernel_terms.get("stats", {})
    row += [math.log1p(float(stats.get(s, 0.0))) for s in STAT_NAMES]
    dims = [math.log(max(1, int(v))) for v in shape][:MAX_SHAPE_DIMS]
    row += dims + [0.0] * (MAX_SHAPE_DIMS - len(dims))
    row += knob_features(knobs, knob_names)
    return np.asarray(row, dtype=np.float32), roofline_us(terms)


def top_weights(y: np.ndarray, shape_index: np.ndarray, weight: float, tau: float) -> np.ndarray:
    """Per-row loss weights ``1 + weight * exp(-(y - min y at the row's shape) / tau)`` (float32, shape of
    ``y``): y is the target (log time over the shape's roofline), so a row as fast as the fastest at its shape
    weighs ``1 + weight`` and one ``tau`` slower in log time (tau 0.1: about 10 %) ``1 + weight / e``.
    ValueError when the lengths differ or tau <= 0."""
    y = np.asarray(y, dtype=np.float64)
    sidx = np.asarray(shape_index)
    if y.shape != sidx.shape or tau <= 0:
        raise ValueError(f"top_weights: y {y.shape} and shape_index {sidx.shape} must match and tau > 0 ({tau})")
    best = {j: y[sidx == j].min() for j in np.unique(sidx)}
    lo = np.array([best[j] for j in sidx]) if y.size else y
    return (1.0 + weight * np.exp(-(y - lo) / tau)).astype(np.float32)


def roofline_us(terms: Mapping[str, Any]) -> float:
    """The shape's DRAM roofline in µs: the workload's compulsory bytes over the GPU's copy bandwidth (terms
    ``compulsory`` and ``copy_bps``, bytes and bytes/s). The same for every kernel at a shape: the surrogate's
    base, so its target is each kernel's log time over the roofline (a per-shape log-time target)."""
    return max(float(terms["compulsory"]) / max(float(terms["copy_bps"]), 1.0) * 1e6, 1e-6)


@dataclass
class SurrogateModel:
    """A fitted ensemble: standardisation (mean, scale), parameters (one pytree per member, stacked),
    the training summary, and the knob names its features were built with (``feature_vector``)."""

    mean: np.ndarray
    scale: np.ndarray
    params: Any
    info: dict[str, Any]
    knob_names: tuple[str, ...] = ()

    def predict(self, x: np.ndarray, base_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(predicted µs, std of the log prediction over members) for feature rows ``x`` (n, d) and their base
        µs (n,) (``feature_vector``'s second value)."""
        z = np.clip((np.asarray(x, dtype=np.float32) - self.mean) / self.scale, -Z_CLIP, Z_CLIP)
        out = np.clip(np.asarray(_ensemble_apply(self.params, z)), -MAX_LOG_CORRECTION, MAX_LOG_CORRECTION)
        mu = out.mean(axis=0)
        sd = out.std(axis=0)
        return np.exp(np.log(np.asarray(base_us)) + mu), sd


def _init(key: Any, sizes: Sequence[int]) -> list[tuple[Any, Any]]:
    import jax
    import jax.numpy as jnp

    params = []
    for a, b in itertools.pairwise(sizes):
        key, sub = jax.random.split(key)
        params.append((jax.random.normal(sub, (a, b)) * jnp.sqrt(2.0 / (a + b)), jnp.zeros((b,))))
    return params


def _apply(params: list[tuple[Any, Any]], x: Any) -> Any:
    import jax
    import jax.numpy as jnp

    h = x
    for w, b in params[:-1]:
        h = jax.nn.gelu(h @ w + b)
    w, b = params[-1]
    return jnp.squeeze(h @ w + b, -1)


_APPLY: Any = None


def _ensemble_apply(params: Any, x: Any) -> Any:
    """(members, n) predictions of every member (jit-compiled once per process)."""
    global _APPLY
    if _APPLY is None:
        import jax

        _APPLY = jax.jit(jax.vmap(_apply, in_axes=(0, None)))
    return _APPLY(params, x)


_ROW_BUCKET = 512  # rows are padded (weight 0) to a multiple of this, so one compilation serves many fits


def _train_fn() -> Any:
    """The jit-compiled training loop (built once per process; compiled once per array shape and settings)."""
    global _TRAIN
    if _TRAIN is None:
        import jax
        import jax.numpy as jnp
        from jax.example_libraries import optimizers

        def train(params: Any, z: Any, y: Any, w: Any, base: Any, onehot: Any, steps: int, lr: float,
                  weight_decay: float, rank_weight: float, temperature: float) -> Any:
            opt_init, opt_update, get_params = optimizers.adam(lr)
            # ListNet (Cao et al., ICML 2007) per shape: the GPU's and the model's softmax over -log time / T
            # of the kernels at one shape; a small T puts the weight on the fastest kernels (the top of the
            # ranking). Bootstrap weights enter as multiplicities (log w added to the logits).
            true_t = (base + y) / temperature

            def log_softmax_by_shape(logits: Any, logw: Any) -> Any:
                a = jnp.where(onehot > 0, (logits + logw)[:, None], -jnp.inf)  # (n, shapes)
                return jnp.sum(jnp.where(onehot > 0, a - jax.scipy.special.logsumexp(a, axis=0)[None, :], 0.0),
                               axis=1)

            def loss(p: Any, wm: Any) -> Any:
                pred = _apply(p, z)
                l2 = sum(jnp.sum(a ** 2) for a, _ in p)
                mse = jnp.sum(wm * (pred - y) ** 2) / jnp.sum(wm)
                logw = jnp.log(jnp.maximum(wm, 1e-30))
                p_true = jnp.exp(log_softmax_by_shape(-true_t, logw))
                rank = -jnp.sum(p_true * log_softmax_by_shape(-(base + pred) / temperature, logw)) / onehot.shape[1]
                return mse + rank_weight * rank + weight_decay * l2

            grad = jax.vmap(jax.grad(loss), in_axes=(0, 0))

            def body(i: Any, st: Any) -> Any:
                return opt_update(i, grad(get_params(st), w), st)

            return get_params(jax.lax.fori_loop(0, steps, body, opt_init(params)))

        _TRAIN = jax.jit(train, static_argnames=("steps", "lr", "weight_decay", "rank_weight", "temperature"))
    return _TRAIN


_TRAIN: Any = None


def fit_surrogate(x: np.ndarray, y_log_residual: np.ndarray, groups: np.ndarray, *, members: int = 5,
                  hidden: tuple[int, ...] = (64, 64), steps: int = 1500, lr: float = 3e-3,
                  weight_decay: float = 1e-4, seed: int = 0, shape_index: np.ndarray | None = None,
                  base_us: np.ndarray | None = None, rank_weight: float = 0.0, temperature: float = 0.05,
                  knob_names: Sequence[str] = (), top_weight: float | None = None,
                  top_tau: float | None = None) -> SurrogateModel:
    """Fit the ensemble (module docstring). x: (n, d) features; y_log_residual: (n,) log(GPU µs) - log(base
    µs) (``feature_vector``'s base: the shape's roofline); groups: (n,) kernel index of each row (bootstrap unit). With ``rank_weight`` > 0, ``shape_index`` (n,)
    (the shape of each row, ints) and ``base_us`` (n,) add ``rank_weight`` x a ListNet loss per shape on the
    predicted log time at softmax temperature ``temperature`` (in log time: 0.05 = 5 %), which weighs the
    order of the fastest kernels. knob_names: recorded with the model (``feature_vector``). With
    ``shape_index`` given, each row's squared error also weighs ``top_weights(y, shape_index, top_weight,
    top_tau)`` (defaults ``TOP_WEIGHT``, ``TOP_TAU``; ``top_weight=0`` turns it off). ValueError for fewer
    than 8 rows, or a rank loss without shape_index / base_us."""
    import jax
    import jax.numpy as jnp

    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y_log_residual, dtype=np.float32)
    n = x.shape[0]
    if n < 8:
        raise ValueError(f"fit_surrogate: {n} rows are too few to fit")
    if rank_weight > 0 and (shape_index is None or base_us is None):
        raise ValueError("fit_surrogate: rank_weight > 0 needs shape_index and base_us")
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale = np.where(scale > 1e-6, scale, 1.0).astype(np.float32)
    rng = np.random.default_rng(seed)
    uniq = np.unique(groups)
    weights = []
    for _ in range(members):
        pick = rng.choice(uniq, size=uniq.size, replace=True)
        counts = np.bincount(np.searchsorted(uniq, pick), minlength=uniq.size)
        weights.append(counts[np.searchsorted(uniq, groups)].astype(np.float32))
    top_weight = TOP_WEIGHT if top_weight is None else top_weight
    if top_weight > 0 and shape_index is not None:
        row_w = top_weights(y, np.asarray(shape_index, dtype=int), top_weight,
                            TOP_TAU if top_tau is None else top_tau)
        weights = [wb * row_w for wb in weights]
    pad = -n % _ROW_BUCKET
    z = np.pad((x - mean) / scale, ((0, pad), (0, 0)))
    yp = np.pad(y, (0, pad))
    w = np.pad(np.stack(weights), ((0, 0), (0, pad)))  # padded rows weigh nothing
    if rank_weight > 0:
        sidx = np.asarray(shape_index, dtype=int)
        onehot = np.zeros((n + pad, int(sidx.max()) + 1), dtype=np.float32)
        onehot[np.arange(n), sidx] = 1.0  # padded rows belong to no shape
        base = np.pad(np.log(np.asarray(base_us, dtype=np.float64)).astype(np.float32), (0, pad))
    else:
        onehot = np.zeros((n + pad, 1), dtype=np.float32)
        base = np.zeros(n + pad, dtype=np.float32)
    sizes = [x.shape[1], *hidden, 1]
    keys = jax.random.split(jax.random.PRNGKey(seed), members)
    params = jax.vmap(lambda k: _init(k, sizes))(keys)
    final = _train_fn()(params, jnp.asarray(z), jnp.asarray(yp), jnp.asarray(w), jnp.asarray(base),
                        jnp.asarray(onehot), steps=int(steps), lr=float(lr), weight_decay=float(weight_decay),
                        rank_weight=float(rank_weight), temperature=float(temperature))
    pred = np.asarray(_ensemble_apply(final, jnp.asarray(z[:n]))).mean(axis=0)
    info = {"members": members, "hidden": list(hidden), "steps": steps, "lr": lr, "weight_decay": weight_decay,
            "rank_weight": rank_weight, "temperature": temperature, "knobs": list(knob_names),
            "rows": int(n), "kernels": int(uniq.size),
            "train_rms_log_error": float(np.sqrt(np.mean((pred - y) ** 2)))}
    return SurrogateModel(mean.astype(np.float32), scale, final, info, tuple(knob_names))
