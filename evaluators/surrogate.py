"""A learned correction of the static cost model: an ensemble of small MLPs (JAX, jit-compiled) that maps the
static model's features of a kernel at a shape to the log of its GPU time, with the ensemble's spread as the
uncertainty (deep ensembles: B. Lakshminarayanan, A. Pritzel, C. Blundell, "Simple and Scalable Predictive
Uncertainty Estimation using Deep Ensembles", NeurIPS 2017).

Inputs (``feature_vector``): the log of the cost model's constant-free terms (``cost_model.TERM_NAMES``), the
log of its calibrated parts (t_dram, t_l2, t_issue, t_cta, time), ptxas resources and occupancy, PTX counts
(``evaluators.ptx_stats``) and the shape (log of each dimension). Target: ``log(GPU µs) - log(static µs)``, the
static model's log error, so the network learns a correction and falls back towards the physics where it has
seen nothing similar. Each member is trained on a bootstrap resample of the kernels (all shapes of a kernel go
together) from its own initialisation, full batch, Adam (``jax.example_libraries.optimizers``) with weight
decay; inputs are standardised with the training set's mean and spread. At prediction, standardised inputs are
clipped to +-``Z_CLIP`` and each member's correction to +-``MAX_LOG_CORRECTION``: far from the training data the
answer leans on the static model, and the members' disagreement (the reported spread) grows.
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
# and each member's correction of the static model to +-MAX_LOG_CORRECTION (a factor e^3 ~ 20).
Z_CLIP = 6.0
MAX_LOG_CORRECTION = 3.0


def feature_names() -> list[str]:
    """Names of ``feature_vector``'s entries, in order."""
    return ([f"term:{t}" for t in TERM_NAMES] + [f"model:{p}" for p in _PARTS] + [f"res:{r}" for r in _RESOURCES]
            + [f"ptx:{s}" for s in STAT_NAMES] + [f"shape:{i}" for i in range(MAX_SHAPE_DIMS)])


def feature_vector(kernel_terms: Mapping[str, Any], shape: Sequence[int], constants: CostConstants
                   ) -> tuple[np.ndarray, float]:
    """(features, static µs) of one kernel at one shape from ``calibration.kernel_terms`` output (status ok).
    KeyError when the terms lack the shape."""
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
    return np.asarray(row, dtype=np.float32), float(parts["time_us"])


@dataclass
class SurrogateModel:
    """A fitted ensemble: standardisation (mean, scale), parameters (one pytree per member, stacked),
    and the training summary."""

    mean: np.ndarray
    scale: np.ndarray
    params: Any
    info: dict[str, Any]

    def predict(self, x: np.ndarray, static_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(predicted µs, std of the log prediction over members) for feature rows ``x`` (n, d) and the static
        model's µs (n,)."""
        z = np.clip((np.asarray(x, dtype=np.float32) - self.mean) / self.scale, -Z_CLIP, Z_CLIP)
        out = np.clip(np.asarray(_ensemble_apply(self.params, z)), -MAX_LOG_CORRECTION, MAX_LOG_CORRECTION)
        mu = out.mean(axis=0)
        sd = out.std(axis=0)
        return np.exp(np.log(np.asarray(static_us)) + mu), sd


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

        def train(params: Any, z: Any, y: Any, w: Any, steps: int, lr: float, weight_decay: float) -> Any:
            opt_init, opt_update, get_params = optimizers.adam(lr)

            def loss(p: Any, wm: Any) -> Any:
                pred = _apply(p, z)
                l2 = sum(jnp.sum(a ** 2) for a, _ in p)
                return jnp.sum(wm * (pred - y) ** 2) / jnp.sum(wm) + weight_decay * l2

            grad = jax.vmap(jax.grad(loss), in_axes=(0, 0))

            def body(i: Any, st: Any) -> Any:
                return opt_update(i, grad(get_params(st), w), st)

            return get_params(jax.lax.fori_loop(0, steps, body, opt_init(params)))

        _TRAIN = jax.jit(train, static_argnames=("steps", "lr", "weight_decay"))
    return _TRAIN


_TRAIN: Any = None


def fit_surrogate(x: np.ndarray, y_log_residual: np.ndarray, groups: np.ndarray, *, members: int = 5,
                  hidden: tuple[int, ...] = (64, 64), steps: int = 1500, lr: float = 3e-3,
                  weight_decay: float = 1e-4, seed: int = 0) -> SurrogateModel:
    """Fit the ensemble (module docstring). x: (n, d) features; y_log_residual: (n,) log(GPU µs) - log(static
    µs); groups: (n,) kernel index of each row (bootstrap unit). ValueError for fewer than 8 rows."""
    import jax
    import jax.numpy as jnp

    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y_log_residual, dtype=np.float32)
    n = x.shape[0]
    if n < 8:
        raise ValueError(f"fit_surrogate: {n} rows are too few to fit")
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
    pad = -n % _ROW_BUCKET
    z = np.pad((x - mean) / scale, ((0, pad), (0, 0)))
    yp = np.pad(y, (0, pad))
    w = np.pad(np.stack(weights), ((0, 0), (0, pad)))  # padded rows weigh nothing
    sizes = [x.shape[1], *hidden, 1]
    keys = jax.random.split(jax.random.PRNGKey(seed), members)
    params = jax.vmap(lambda k: _init(k, sizes))(keys)
    final = _train_fn()(params, jnp.asarray(z), jnp.asarray(yp), jnp.asarray(w), steps=int(steps), lr=float(lr),
                        weight_decay=float(weight_decay))
    pred = np.asarray(_ensemble_apply(final, jnp.asarray(z[:n]))).mean(axis=0)
    info = {"members": members, "hidden": list(hidden), "steps": steps, "lr": lr, "weight_decay": weight_decay,
            "rows": int(n), "kernels": int(uniq.size),
            "train_rms_log_error": float(np.sqrt(np.mean((pred - y) ** 2)))}
    return SurrogateModel(mean.astype(np.float32), scale, final, info)
