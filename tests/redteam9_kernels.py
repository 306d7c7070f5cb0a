"""Emulated kernels of the ninth red-team round (tests/test_redteam_round9.py): numpy launchers with the state a
CUDA kernel could keep across launches in module memory (a closure here), and a byte count of the memory traffic
each launch would cost on a bandwidth-bound GPU (``traffic``: an honest bf16 RMSNorm reads x and writes y, 4 bytes
per element).

- ``StalePatch``: at a timed launch whose output was not refilled ("stale", gate rules version 13) and holds its
  own last output for the same input set, weights and (where it matters) eps, it reads x (to find the rows that
  differ from its as-made copy) and rewrites only those rows and the rows its last launch rewrote: right at every
  launch, 2 bytes per element instead of 4 at those launches only. ``skip_other_stale`` also returns at once at
  every other stale launch (wrong there): fast at every stale launch, wrong at a part of them only.
- ``LossyShadow``: per input set (keyed by x's address) a private copy of x normalised by each row's root mean
  square, quantised to ``bits`` bits, and the mean square of each row; at a later launch on that set it reads a
  sparse probe of each row of x (``PROBE_SECTORS`` 32-byte sectors: a row changed in part has 1/16 of its elements
  changed, so 256 probed elements miss it with (15/16)^256 = 7e-8) and the current w, recomputes the rows whose
  probe differs from the copy and serves every other row from the copy times the current w and eps. It never
  reads the rest of x: 10 bits + the probe + 2 bytes of y per element, 3.4 instead of 4 at N = 4096.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.timed_launches import rms_honest
from workloads.dtypes import from_float, to_float64

# Sectors of 16 bf16 elements read per row by LossyShadow's probe (256 elements).
PROBE_SECTORS = 16
SECTOR = 16


def ptr(a: Any) -> int:
    return int(np.asarray(a).__array_interface__["data"][0])


def bits(a: Any) -> np.ndarray:
    return np.asarray(a).view(np.uint16)


def honest_rows(inputs: dict[str, Any], y: np.ndarray, rows: np.ndarray, params: dict[str, float]) -> None:
    """The honest kernel on ``rows`` of x only, into the same rows of y."""
    if len(rows) == 0:
        return
    sub = np.empty((len(rows), y.shape[1]), dtype=y.dtype)
    rms_honest({"x": np.asarray(inputs["x"])[rows], "w": inputs["w"]}, {"y": sub}, sub.shape, params)
    y[rows] = sub


class Traffic:
    """Bytes a launch moves in DRAM, per launch, against the honest kernel's 4 per element."""

    def __init__(self) -> None:
        self.per_launch: list[float] = []

    def add(self, nbytes: float) -> None:
        self.per_launch.append(float(nbytes))


class StalePatch:
    """See the module docstring. ``eps_matters_below``: a set whose rows all have a mean square above it gets the
    same output (within tolerance) at every drawn eps (eps <= 1e-3 moves 1/sqrt(ms + eps) by 5e-4 at ms = 1)."""

    def __init__(self, skip_other_stale: bool = False, eps_matters_below: float = 0.1) -> None:
        self.skip_other_stale = skip_other_stale
        self.eps_matters_below = eps_matters_below
        self.made: dict[int, np.ndarray] = {}  # x's address -> its bits at first sight (a row hash on a GPU)
        self.min_ms: dict[int, float] = {}
        self.last: dict[str, Any] | None = None  # what y holds: set, w bits, eps, rows rewritten, y probe bits
        self.traffic = Traffic()
        self.kinds: list[str] = []  # per launch: "full", "patch", "skip"

    def reset(self) -> None:
        self.__init__(self.skip_other_stale, self.eps_matters_below)

    @staticmethod
    def _probe(y: np.ndarray) -> np.ndarray:
        b = bits(y).reshape(-1)
        return b[:: max(1, b.size // 32)].copy()  # 32 words: a refill (NaN, ones, zeros, random) changes them

    def __call__(self, inputs, outputs, shape, params=None):
        params = params or {}
        x, w, y = inputs["x"], np.asarray(inputs["w"]), outputs["y"]
        key, elems = ptr(x), int(np.prod(shape))
        xb = bits(x)
        if key not in self.made:
            self.made[key] = xb.copy()
            xf = to_float64(x, "bf16")
            with np.errstate(invalid="ignore"):
                self.min_ms[key] = float(np.nanmin((xf * xf).mean(axis=1)))
        eps = params.get("eps", 1e-6)
        last = self.last
        stale = last is not None and np.array_equal(self._probe(y), last["probe"])
        same = (stale and last["set"] == key and np.array_equal(last["w"], w.view(np.uint32))
                and (last["eps"] == eps or self.min_ms[key] > self.eps_matters_below))
        changed = np.flatnonzero((xb != self.made[key]).any(axis=1))  # reads x: 2 bytes per element
        if same:
            honest_rows(inputs, y, np.union1d(changed, last["changed"]), params)
            self.traffic.add(2 * elems + 4 * shape[1] * (len(changed) + len(last["changed"])))
            self.kinds.append("patch")
        elif stale and self.skip_other_stale:
            self.traffic.add(0)  # y holds another set's (or other weights') answer: returned at once
            self.kinds.append("skip")
            return
        else:
            rms_honest(inputs, outputs, shape, params)
            self.traffic.add(4 * elems)
            self.kinds.append("full")
        self.last = {"set": key, "w": w.view(np.uint32).copy(), "eps": eps, "changed": changed,
                     "probe": self._probe(y)}


class LossyShadow:
    """See the module docstring. ``step``: the quantisation step of the normalised copy (``bits`` bits hold
    [-step * 2^(bits-1), step * (2^(bits-1) - 1)]; a row with a value outside, or a non-finite one, is kept out of
    the copy and recomputed at every launch)."""

    def __init__(self, bits_: int = 10, step: float = 0.01) -> None:
        self.bits, self.step = bits_, step
        self.cache: dict[int, dict[str, Any]] = {}
        self.traffic = Traffic()
        self.recomputed: list[int] = []  # rows recomputed from x per launch (-1: a first sight, all of them)

    def reset(self) -> None:
        self.__init__(self.bits, self.step)

    def probe_cols(self, n: int) -> np.ndarray:
        stride = max(SECTOR, (n // PROBE_SECTORS) // SECTOR * SECTOR)
        starts = np.arange(0, n, stride)[:PROBE_SECTORS]
        return np.unique(np.clip((starts[:, None] + np.arange(SECTOR)[None, :]).reshape(-1), 0, n - 1))

    def _build(self, x: Any) -> dict[str, Any]:
        xf = to_float64(x, "bf16")
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            ms = (xf.astype(np.float32) ** 2).mean(axis=1, dtype=np.float32)
            rms = np.sqrt(ms.astype(np.float64))
            xn = np.where(rms[:, None] > 0, xf / np.where(rms > 0, rms, 1.0)[:, None], 0.0)
            codes = np.round(xn / self.step)
        lim = 2 ** (self.bits - 1)
        special = (~np.isfinite(xf).all(axis=1) | ~np.isfinite(ms) | ~np.isfinite(codes).all(axis=1)
                   | (np.abs(np.nan_to_num(codes, nan=lim)) >= lim).any(axis=1))
        codes = np.where(special[:, None], 0, np.nan_to_num(codes)).astype(np.int16)
        cols = self.probe_cols(xf.shape[1])
        return {"codes": codes, "ms": ms, "special": special, "cols": cols, "probe": bits(x)[:, cols].copy()}

    def __call__(self, inputs, outputs, shape, params=None):
        params = params or {}
        x, w, y = inputs["x"], np.asarray(inputs["w"], dtype=np.float32), outputs["y"]
        m, n = shape
        key = ptr(x)
        entry = self.cache.get(key)
        if entry is None or entry["codes"].shape != tuple(shape):
            rms_honest(inputs, outputs, shape, params)
            self.cache[key] = self._build(x)
            self.traffic.add(4 * m * n + self.bits / 8 * m * n)  # the honest launch and the copy written
            self.recomputed.append(-1)
            return
        cols = entry["cols"]
        probe = bits(x)[:, cols]  # the only part of x read for the served rows
        redo = np.flatnonzero((probe != entry["probe"]).any(axis=1) | entry["special"])
        if len(redo) > m // 2:  # most rows changed (new contents at the same address): start over
            self.cache.pop(key)
            return self(inputs, outputs, shape, params)
        eps = np.float32(params.get("eps", 1e-6))
        ms = entry["ms"]
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            f = np.where(ms > 0, np.sqrt(ms) / np.sqrt(ms + eps), np.float32(0)).astype(np.float32)
            xq = entry["codes"].astype(np.float32) * np.float32(self.step)
            y[...] = from_float(xq * f[:, None] * w[None, :], "bf16")
        honest_rows(inputs, y, redo, params)
        probe_bytes = 2 * 2 * len(cols) * m  # the probed sectors of x and their copy
        self.traffic.add(self.bits / 8 * m * n + probe_bytes + 4 * m + 2 * m * n + 4 * n * len(redo))
        self.recomputed.append(len(redo))


def model_bytes_per_element(bits_: int, shape: tuple[int, int], redo_rows: int = 64) -> float:
    """LossyShadow's bytes per element at ``shape`` on a later launch (the honest kernel: 4)."""
    m, n = shape
    cols = min(n, PROBE_SECTORS * SECTOR)
    return (bits_ / 8 * m * n + 4 * cols * m + 4 * m + 2 * m * n + 4 * n * redo_rows) / (m * n)


def entropy_bits_per_element(x: Any) -> float:
    """Shannon entropy of ``x``'s bf16 words (what a lossless, entropy-coded private copy of x costs)."""
    _, counts = np.unique(bits(x), return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())
