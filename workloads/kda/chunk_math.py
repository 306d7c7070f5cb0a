"""The chunked (WY / UT-transform) form of the KDA forward, for any array module (NumPy, CuPy) and float dtype.

The same code is the float64 chunked reference (``kda_chunk_reference``, NumPy or CuPy) and, in float32, the
reference stages of the chunked pipeline (``workloads.kda.chunk``) and the NumPy stand-in for its evolved stage
in CPU tests. Sources: fla's ``naive_chunk_kda`` (``fla/ops/kda/naive.py``) and ``chunk_kda`` (its intra-chunk,
``chunk_gated_delta_rule_fwd_h`` and ``chunk_gla_fwd_o_gk`` passes); the UT transform of DeltaNet (Yang et al.,
"Parallelizing Linear Transformers with the Delta Rule over Sequence Length", arXiv 2406.06484) and its gated
form (Gated DeltaNet, arXiv 2412.06464); the KDA recurrence of the Kimi Linear report (arXiv 2510.26692).

Each sequence is cut into chunks of C tokens from its own start (the last one may be shorter; the chunks of all
sequences are numbered 0..NCT-1 in order, ``ChunkLayout``). In one chunk, with local tokens r = 0..C-1, q and k
L2-normalised, g the per-channel log decay (``preprocess``), b = sigmoid(beta_raw), G_r = g_0 + ... + g_r
(inclusive cumulative sum per channel) and h the state [K, V] at the chunk's start:

    A_kk[r, s] = sum_d k_rd k_sd exp(G_rd - G_sd)                  s < r   (zero elsewhere)
    A_qk[r, s] = scale sum_d q_rd k_sd exp(G_rd - G_sd)            s <= r  (zero elsewhere)
    (I + diag(b) A_kk) [w | u] = diag(b) [exp(G) * k | v]          the UT transform (unit lower triangular solve)
    kg_r = k_r exp(G_last - G_r),  qg_r = scale q_r exp(G_r),  gdecay = exp(G_last)
    v_new = u - w h                                                the chunk's delta-rule updates u_t, exactly
    h_next = diag(gdecay) h + kg^T v_new                           the inter-chunk state pass (serial in chunks)
    o = qg h + A_qk v_new

Why it equals the recurrence (``workloads.kda.reference``): unrolling S_r from h inside the chunk gives
u_r + b_r sum_{s<r} A_kk[r, s] u_s = b_r (v_r - h^T (exp(G_r) * k_r)), i.e. (I + diag(b) A_kk) U = diag(b)(V - (exp(G) * K) h),
so U = u - w h; S_r = diag(exp(G_r)) h + sum_{s<=r} (exp(G_r - G_s) * k_s) U_s^T, whose read-out is o_r and whose
value at the chunk's last token is h_next. Tests check chunked == recurrent in float64 (tests/test_kda_chunk.py).

Numerics: G falls by up to |lower_bound| per token, so exp(G_r - G_s) for r > s is in (0, 1] but exp(-G_s) alone
overflows float32 after ~18 tokens. A_kk and A_qk are therefore formed per block of ``sub`` rows against the
block's first token R (fla does the same with blocks of 16): exp(G_r - G_R) <= 1 for r in the block,
exp(G_R - G_s) <= 1 for s before it and <= exp(|lower_bound| (sub - 1)) for s inside it, finite in float32 for
|lower_bound| (sub - 1) < 88 (5 x 15 = 75 with sub = 16).

Array layouts: token-major like the operation (fla's varlen layout): [T, H, ...]; per-chunk buffers
[NCT, H, ...]; internally each chunk is padded to C tokens with zeros (q = k = v = 0, g = 0, b = 0: a padded
token changes nothing) in a [NCT, H, C, ...] layout.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType
from typing import Any

import numpy as np

from workloads.kda.reference import L2NORM_EPS, LOWER_BOUND

CHUNK = 64  # tokens per chunk (fla's chunk_kda default)
SUB = 16  # rows per block of the pairwise exponentials (see the module docstring)


@dataclass(frozen=True)
class ChunkLayout:
    """Where the chunks of a varlen batch are (host NumPy arrays; module docstring).

    lens: the sequence lengths; chunk: C; counts [N]: chunks per sequence (ceil(L_n / C)); offsets [N + 1]
    int32: prefix sums of ``counts`` from 0 (the first chunk of sequence n is ``offsets[n]``); seq [NCT]: the
    sequence of each chunk; first [NCT]: each chunk's first token; last [NCT]: its last token; index [NCT, C]:
    the token of each padded slot, T for a padding slot (a zero row appended to the token axis); slots [T]:
    the padded slot (chunk * C + position) of every token, in token order.
    """

    lens: tuple[int, ...]
    chunk: int
    counts: np.ndarray
    offsets: np.ndarray
    seq: np.ndarray
    first: np.ndarray
    last: np.ndarray
    index: np.ndarray
    slots: np.ndarray

    @property
    def n_chunks(self) -> int:
        """NCT: chunks of all sequences together."""
        return int(self.offsets[-1])

    @property
    def tokens(self) -> int:
        """T: tokens of all sequences together."""
        return int(sum(self.lens))


@lru_cache(maxsize=64)
def chunk_layout(lens: tuple[int, ...], chunk: int = CHUNK) -> ChunkLayout:
    """The ChunkLayout of sequences of lengths ``lens`` (each >= 1) cut into chunks of ``chunk`` tokens.
    ValueError for an empty batch, a length below 1 or a chunk below 1."""
    lens = tuple(int(x) for x in lens)
    if not lens or min(lens) < 1 or chunk < 1:
        raise ValueError(f"chunk_layout needs lengths >= 1 and chunk >= 1, got {lens[:8]} and {chunk}")
    counts = np.array([-(-x // chunk) for x in lens], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    starts = np.concatenate([[0], np.cumsum(lens)])
    seq = np.repeat(np.arange(len(lens)), counts)
    local = np.arange(int(offsets[-1])) - offsets[seq]
    first = starts[seq] + local * chunk
    last = np.minimum(first + chunk, starts[seq + 1]) - 1
    pos = first[:, None] + np.arange(chunk)[None, :]
    t = int(starts[-1])
    index = np.where(pos <= last[:, None], pos, t)
    slots = np.flatnonzero(index.reshape(-1) < t)
    return ChunkLayout(lens, chunk, counts, offsets, seq, first, last, index, slots)


@lru_cache(maxsize=256)
def _device_copy(lens: tuple[int, ...], chunk: int, name: str, xp: ModuleType) -> Any:
    return xp.asarray(getattr(chunk_layout(lens, chunk), name))


def on(layout: ChunkLayout, name: str, xp: ModuleType) -> Any:
    """``layout``'s array ``name`` under ``xp`` (device copies made once per layout, so a launch's stages
    enqueue no host-to-device copy)."""
    return getattr(layout, name) if xp is np else _device_copy(layout.lens, layout.chunk, name, xp)


@lru_cache(maxsize=16)
def _tri(chunk: int, k: int, dtype: str, xp: ModuleType) -> Any:
    return xp.asarray(np.tri(chunk, chunk, k, dtype=np.dtype(dtype)))


def _sigmoid(x: Any, xp: ModuleType) -> Any:
    with np.errstate(over="ignore"):  # exp(-x) overflows to inf for x << 0: sigmoid 0, as it should be
        return 1 / (1 + xp.exp(-x))


def preprocess(q: Any, k: Any, g_raw: Any, beta_raw: Any, A_log: Any, dt_bias: Any, xp: ModuleType = np,
               dtype: Any = np.float64, lower_bound: float = LOWER_BOUND) -> tuple[Any, Any, Any, Any]:
    """(q normalised, k normalised, g, b) in ``dtype`` under ``xp``: q, k / sqrt(|.|^2 + 1e-6),
    g = lower_bound * sigmoid(exp(A_log[h]) * (g_raw + dt_bias[h])), b = sigmoid(beta_raw) (the formulas of
    ``workloads.kda.reference``). q, k, g_raw [T, H, K] and beta_raw [T, H] already widened to ``dtype``;
    A_log [H]; dt_bias [H * K] or [H, K]."""
    H, K = q.shape[1], q.shape[2]
    qn = q / xp.sqrt((q * q).sum(-1, keepdims=True) + L2NORM_EPS)
    kn = k / xp.sqrt((k * k).sum(-1, keepdims=True) + L2NORM_EPS)
    a = xp.exp(xp.asarray(A_log).astype(dtype)).reshape(1, H, 1)
    bias = xp.asarray(dt_bias).astype(dtype).reshape(1, H, K)
    g = (lower_bound * _sigmoid(a * (g_raw + bias), xp)).astype(dtype)
    b = _sigmoid(beta_raw, xp).astype(dtype)
    return qn, kn, g, b


def to_chunks(x: Any, layout: ChunkLayout, xp: ModuleType) -> Any:
    """[T, H, ...] -> [NCT, H, C, ...] (padding slots zero)."""
    pad = xp.concatenate([x, xp.zeros((1, *x.shape[1:]), dtype=x.dtype)], axis=0)
    c = pad[on(layout, "index", xp)]  # [NCT, C, H, ...]
    return xp.moveaxis(c, 1, 2)


def from_chunks(c: Any, layout: ChunkLayout, xp: ModuleType) -> Any:
    """[NCT, H, C, ...] -> [T, H, ...] (padding slots dropped)."""
    flat = xp.moveaxis(c, 2, 1).reshape(layout.n_chunks * layout.chunk, *c.shape[1:2], *c.shape[3:])
    return flat[on(layout, "slots", xp)]


def _sub_block(chunk: int) -> int:
    return SUB if chunk % SUB == 0 else chunk


def intra_chunk(qn: Any, kn: Any, v: Any, g: Any, b: Any, layout: ChunkLayout, scale: float,
                xp: ModuleType = np) -> dict[str, Any]:
    """The per-chunk part (module docstring) from the preprocessed token-major arrays (qn, kn, g [T, H, K];
    v [T, H, V]; b [T, H]; one float dtype), in the chunked layout: {"kg", "w", "qg": [NCT, H, C, K];
    "u": [NCT, H, C, V]; "Aqk": [NCT, H, C, C] (lower triangle with the diagonal); "gdecay": [NCT, H, K]}."""
    dt = qn.dtype
    C = layout.chunk
    q_c, k_c, v_c, g_c = (to_chunks(a, layout, xp) for a in (qn, kn, v, g))
    b_c = to_chunks(b, layout, xp)  # [NCT, H, C]
    G = xp.cumsum(g_c, axis=2)
    g_last = G[:, :, -1, :]  # padding slots add g = 0: the value at the chunk's last token
    akk = xp.zeros((*G.shape[:2], C, C), dtype=dt)
    aqk = xp.zeros_like(akk)
    sub = _sub_block(C)
    for r0 in range(0, C, sub):
        rows, cols = slice(r0, r0 + sub), slice(0, r0 + sub)
        ref = G[:, :, r0:r0 + 1, :]
        left = xp.exp(G[:, :, rows] - ref)  # <= 1
        right = k_c[:, :, cols] * xp.exp(ref - G[:, :, cols])  # <= exp(|lower_bound| (sub - 1))
        right_t = xp.swapaxes(right, -1, -2)
        akk[:, :, rows, cols] = (k_c[:, :, rows] * left) @ right_t
        aqk[:, :, rows, cols] = (q_c[:, :, rows] * left) @ right_t
    akk = akk * _tri(C, -1, dt.name, xp)  # strictly lower
    aqk = aqk * _tri(C, 0, dt.name, xp) * dt.type(scale)  # lower with the diagonal, times scale
    m = xp.eye(C, dtype=dt) + b_c[..., :, None] * akk
    rhs = b_c[..., :, None] * xp.concatenate([xp.exp(G) * k_c, v_c], axis=-1)
    x = xp.linalg.solve(m, rhs)
    K = qn.shape[-1]
    return {"kg": k_c * xp.exp(g_last[:, :, None, :] - G), "w": x[..., :K], "u": x[..., K:],
            "qg": q_c * xp.exp(G) * dt.type(scale), "Aqk": aqk, "gdecay": xp.exp(g_last)}


def state_pass(kg: Any, w: Any, u: Any, gdecay: Any, state: Any, layout: ChunkLayout,
               xp: ModuleType = np) -> tuple[Any, Any, Any]:
    """The serial inter-chunk pass (the pipeline's evolved stage) in the chunked layout: kg, w [NCT, H, C, K];
    u [NCT, H, C, V]; gdecay [NCT, H, K]; state [N, H, K, V] (not modified). Returns (h [NCT, H, K, V]: the
    state at each chunk's start, v_new [NCT, H, C, V], the final state [N, H, K, V])."""
    s = state.astype(kg.dtype, copy=True)
    h = xp.empty((layout.n_chunks, *state.shape[1:]), dtype=kg.dtype)
    v_new = xp.empty_like(u)
    offsets = layout.offsets[:-1].astype(np.int64)
    for c in range(int(layout.counts.max())):
        seqs = np.flatnonzero(layout.counts > c)
        ids = xp.asarray(offsets[seqs] + c)
        sq = xp.asarray(seqs)
        cur = s[sq]
        h[ids] = cur
        vn = u[ids] - w[ids] @ cur
        v_new[ids] = vn
        s[sq] = gdecay[ids][..., None] * cur + xp.swapaxes(kg[ids], -1, -2) @ vn
    return h, v_new, s


def chunk_output(qg: Any, aqk: Any, h: Any, v_new: Any) -> Any:
    """o [NCT, H, C, V] = qg h + A_qk v_new per chunk (chunked layout; module docstring). NaN in h or v_new (a
    state pass that left the poison) propagates quietly."""
    with np.errstate(invalid="ignore"):
        return qg @ h + aqk @ v_new


def kda_chunk_reference(q: Any, k: Any, v: Any, g_raw: Any, beta_raw: Any, A_log: Any, dt_bias: Any,
                        cu_seqlens: Sequence[int], state: Any, scale: float | None = None, chunk: int = CHUNK,
                        xp: ModuleType = np, lower_bound: float = LOWER_BOUND) -> tuple[Any, Any]:
    """(o [T, H, V], final state [N, H, K, V]) in float64 under ``xp`` by the chunked form: the same function as
    ``workloads.kda.reference.kda_reference`` (equal in exact arithmetic; in float64 to ~1e-12, tested), with
    the arguments and layouts of that function (float arrays of any dtype, widened here; bf16 as
    ml_dtypes.bfloat16 on the host). Costs matrix products instead of a token loop: milliseconds on a GPU at
    the benchmark shapes. ValueError when cu_seqlens does not rise from 0 to T."""
    cu = [int(c) for c in (cu_seqlens.tolist() if hasattr(cu_seqlens, "tolist") else cu_seqlens)]
    T = int(q.shape[0])
    if cu[0] != 0 or cu[-1] != T or any(b_ <= a_ for a_, b_ in itertools.pairwise(cu)):
        raise ValueError(f"cu_seqlens must rise from 0 to T={T} (no empty sequence), got {cu[:8]}")
    f64 = xp.float64
    q, k, v, g_raw, beta_raw = (xp.asarray(a).astype(f64) for a in (q, k, v, g_raw, beta_raw))
    K = q.shape[-1]
    scale = K ** -0.5 if scale is None else float(scale)
    layout = chunk_layout(tuple(b_ - a_ for a_, b_ in itertools.pairwise(cu)), chunk)
    qn, kn, g, b = preprocess(q, k, g_raw, beta_raw, A_log, dt_bias, xp, np.float64, lower_bound)
    parts = intra_chunk(qn, kn, v, g, b, layout, scale, xp)
    h, v_new, s = state_pass(parts["kg"], parts["w"], parts["u"], parts["gdecay"], xp.asarray(state).astype(f64),
                             layout, xp)
    return from_chunks(chunk_output(parts["qg"], parts["Aqk"], h, v_new), layout, xp), s
