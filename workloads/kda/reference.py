"""Float64 references of the KDA (Kimi Delta Attention) forward recurrence.

Per sequence n and head h, with state S in R^{K x V} (initial value S0[n, h]) and, for each token t:

    q_t <- q_t / sqrt(|q_t|^2 + 1e-6),  k_t <- k_t / sqrt(|k_t|^2 + 1e-6)          (L2 norm in the kernel)
    g_t  = lower_bound * sigmoid(exp(A_log[h]) * (g_raw_t + dt_bias[h]))            (the "safe" gate, per channel)
    b_t  = sigmoid(beta_raw_t)
    S'   = Diag(exp(g_t)) S                                                          (decay)
    u_t  = b_t (v_t - S'^T k_t)                                                      (delta-rule prediction error)
    S    = S' + k_t u_t^T                                                            (update)
    o_t  = S^T (scale q_t),  scale = 1 / sqrt(K)                                     (read-out)

Sources: the Kimi Linear technical report (arXiv 2510.26692, the KDA recurrence and its gate), fla's
``fla/ops/kda/naive.py`` (naive recurrent KDA) and ``fused_recurrent_kda`` with ``use_qk_l2norm_in_kernel``,
``use_gate_in_kernel``, ``use_beta_sigmoid_in_kernel`` and ``lower_bound`` (the form FlashKDA implements);
the 1e-6 inside the square root is fla's ``l2norm`` epsilon.

``kda_reference`` runs the token loop as ``jax.lax.scan`` in float64 on the CPU (x64 enabled; ``JAX_PLATFORMS``
defaults to ``cpu`` so it never takes GPU memory from CuPy and torch), vmapped over heads and over the
sequences of one length bucket (lengths padded to a power of two with tokens that leave the state unchanged:
k = q = 0, b = 0, g = 0), so JAX compiles a handful of programs, not one per length. ``kda_reference_loop`` is
the same math as plain NumPy loops, the independent check of the JAX one on tiny shapes.

Array layouts (fla's varlen layout, batch folded into the token axis): q, k, g_raw [T, H, K]; v [T, H, V];
beta_raw [T, H]; A_log [H]; dt_bias [H * K]; cu_seqlens [N + 1] (int, prefix sums of the sequence lengths
from 0); state [N, H, K, V]. Outputs: o [T, H, V] and the final state [N, H, K, V], float64.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

LOWER_BOUND = -5.0
L2NORM_EPS = 1e-6


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow warning for |x| large


def preprocess(q: np.ndarray, k: np.ndarray, g_raw: np.ndarray, beta_raw: np.ndarray, A_log: np.ndarray,
               dt_bias: np.ndarray, lower_bound: float = LOWER_BOUND) -> tuple[np.ndarray, ...]:
    """(q normalised, k normalised, g (log decay), b) in float64: the per-token, per-head parts of the recurrence
    that do not depend on the state. Shapes as the module docstring; dt_bias may be [H * K] or [H, K]."""
    q, k, g_raw = (np.asarray(a, dtype=np.float64) for a in (q, k, g_raw))
    H, K = q.shape[1], q.shape[2]
    qn = q / np.sqrt((q * q).sum(-1, keepdims=True) + L2NORM_EPS)
    kn = k / np.sqrt((k * k).sum(-1, keepdims=True) + L2NORM_EPS)
    a = np.exp(np.asarray(A_log, dtype=np.float64)).reshape(1, H, 1)
    bias = np.asarray(dt_bias, dtype=np.float64).reshape(1, H, K)
    g = lower_bound * _sigmoid(a * (g_raw + bias))
    b = _sigmoid(np.asarray(beta_raw, dtype=np.float64))
    return qn, kn, g, b


@cache
def _jax() -> Any:
    """jax with float64 on the CPU (configured once, before first use)."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    jax.config.update("jax_enable_x64", True)
    return jax


@cache
def _scan_fn() -> Any:
    """A jitted fn(q, k, v, g, b, S0, scale) -> (o, S) over [B, L, ...] (B = sequences x heads of one bucket)."""
    jax = _jax()
    jnp = jax.numpy

    def one(q, k, v, g, b, s0, scale):  # q, k, g [L, K]; v [L, V]; b [L]; s0 [K, V]
        def step(s, x):
            qt, kt, vt, gt, bt = x
            s = jnp.exp(gt)[:, None] * s
            u = bt * (vt - kt @ s)
            s = s + jnp.outer(kt, u)
            return s, (scale * qt) @ s

        s, o = jax.lax.scan(step, s0, (q, k, v, g, b))
        return o, s

    return jax.jit(jax.vmap(one, in_axes=(0, 0, 0, 0, 0, 0, None)))


def _bucket(length: int) -> int:
    return 1 << max(0, int(length) - 1).bit_length()


def kda_reference(q: Any, k: Any, v: Any, g_raw: Any, beta_raw: Any, A_log: Any, dt_bias: Any,
                  cu_seqlens: Sequence[int], state: Any, scale: float | None = None,
                  pairs: Sequence[tuple[int, int]] | None = None,
                  lower_bound: float = LOWER_BOUND) -> tuple[np.ndarray, np.ndarray]:
    """(o [T, H, V], final state [N, H, K, V]) in float64, computed with ``jax.lax.scan`` on the CPU.

    Inputs are NumPy arrays (any float dtype, bf16 included: values are widened exactly) in the layouts of the
    module docstring; scale: None for 1/sqrt(K). pairs: only these (sequence, head) pairs (the rest of ``o`` and
    of the state is NaN): the audit of a large shape checks a sample. Raises ValueError when cu_seqlens does not
    start at 0, decreases or does not end at T.
    """
    cu = [int(c) for c in cu_seqlens]
    T, H, K = np.shape(q)
    V = np.shape(v)[-1]
    if cu[0] != 0 or cu[-1] != T or any(b < a for a, b in itertools.pairwise(cu)):
        raise ValueError(f"cu_seqlens must rise from 0 to T={T}, got {cu[:8]}{'...' if len(cu) > 8 else ''}")
    N = len(cu) - 1
    scale = K ** -0.5 if scale is None else float(scale)
    qn, kn, g, b = preprocess(q, k, g_raw, beta_raw, A_log, dt_bias, lower_bound)
    v64 = np.asarray(v, dtype=np.float64)
    s0 = np.asarray(state, dtype=np.float64)
    want = [(n, h) for n in range(N) for h in range(H)] if pairs is None else [tuple(p) for p in pairs]
    o = np.full((T, H, V), np.nan)
    s_out = np.full((N, H, K, V), np.nan)
    buckets: dict[int, list[tuple[int, int]]] = {}
    for n, h in want:
        buckets.setdefault(_bucket(cu[n + 1] - cu[n]), []).append((n, h))
    fn = _scan_fn()
    for L, items in sorted(buckets.items()):
        B = len(items)
        xq, xk, xg = (np.zeros((B, L, K)) for _ in range(3))
        xv, xb = np.zeros((B, L, V)), np.zeros((B, L))
        xs = np.empty((B, K, V))
        for i, (n, h) in enumerate(items):
            lo, hi = cu[n], cu[n + 1]
            xq[i, :hi - lo], xk[i, :hi - lo], xg[i, :hi - lo] = qn[lo:hi, h], kn[lo:hi, h], g[lo:hi, h]
            xv[i, :hi - lo], xb[i, :hi - lo] = v64[lo:hi, h], b[lo:hi, h]
            xs[i] = s0[n, h]
        oo, ss = (np.asarray(a) for a in fn(xq, xk, xv, xg, xb, xs, scale))
        for i, (n, h) in enumerate(items):
            lo, hi = cu[n], cu[n + 1]
            o[lo:hi, h] = oo[i, :hi - lo]
            s_out[n, h] = ss[i]
    return o, s_out


def kda_reference_loop(q: Any, k: Any, v: Any, g_raw: Any, beta_raw: Any, A_log: Any, dt_bias: Any,
                       cu_seqlens: Sequence[int], state: Any, scale: float | None = None,
                       lower_bound: float = LOWER_BOUND) -> tuple[np.ndarray, np.ndarray]:
    """The recurrence of the module docstring as plain NumPy loops over sequences, heads, tokens and state
    elements, float64; for tiny shapes only (the independent check of ``kda_reference``)."""
    q, k, v, g_raw, beta_raw = (np.asarray(a, dtype=np.float64) for a in (q, k, v, g_raw, beta_raw))
    T, H, K = q.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else float(scale)
    bias = np.asarray(dt_bias, dtype=np.float64).reshape(H, K)
    o = np.zeros((T, H, V))
    s_out = np.array(state, dtype=np.float64)
    for n in range(len(cu_seqlens) - 1):
        for h in range(H):
            S = s_out[n, h]
            a = np.exp(float(A_log[h]))
            for t in range(int(cu_seqlens[n]), int(cu_seqlens[n + 1])):
                qn = q[t, h] / np.sqrt(sum(x * x for x in q[t, h]) + L2NORM_EPS)
                kn = k[t, h] / np.sqrt(sum(x * x for x in k[t, h]) + L2NORM_EPS)
                bt = 1.0 / (1.0 + np.exp(-beta_raw[t, h]))
                for i in range(K):
                    gi = lower_bound / (1.0 + np.exp(-a * (g_raw[t, h, i] + bias[h, i])))
                    S[i, :] *= np.exp(gi)
                u = np.array([bt * (v[t, h, j] - sum(S[i, j] * kn[i] for i in range(K))) for j in range(V)])
                for i in range(K):
                    for j in range(V):
                        S[i, j] += kn[i] * u[j]
                for j in range(V):
                    o[t, h, j] = sum(S[i, j] * scale * qn[i] for i in range(K))
    return o, s_out
