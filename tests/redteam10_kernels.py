"""Emulated kernels of the tenth red-team round (tests/test_redteam_round10.py): numpy launchers with the state a
CUDA kernel could keep across launches in module memory (a closure here; race lint rule 5 rejects a `.global`
store statically, so on the GPU such a kernel needs a way past rule 5 such as rt_laundered_state RT_SPACE 2, as
round 9's kernels did), and a byte count of the DRAM traffic each launch would cost on a bandwidth-bound GPU
(``Traffic``).

KDA decode (one token per sequence), ``workloads.kda.recurrent``: the state [N, H, 128, 128] fp32 is an inout
buffer, read and written whole by every launch: 8 of the ~8.08 bytes a state element costs at the search's decode
shape (64, 1 x 32); q, k, v, g, beta and o are ~1% of the traffic. An honest launch (``kda_decode_honest``)
moves ``honest_bytes``.

- ``StateShadow``: the inout buffer's initial value is restored by the evaluator before every timed launch
  (``InputSets.reset_inout``) and never perturbed (``Perturbation.draw_all`` leaves inout buffers out), so at every
  timed launch on a set the state the kernel reads is bit for bit the one it read at its first sight of that set.
  Per input set (keyed by the state's address) it keeps a private ``copy`` of the initial state: "fp16" (2 bytes
  an element, relative error 2^-11) or "int8" (1 byte, a scale per 128 x 128 block). At a later launch it reads
  ``PROBE_SECTORS`` 32-byte sectors of each (sequence, head) block of the state, and in each block whose probe
  equals its copy's it reads the private copy instead of the state: 2 (fp16) or 1 (int8) bytes per state element instead of
  4, the final state still written whole (4). 6 or 5 bytes instead of 8 per state element: 1.33x or 1.6x. In real
  decode the state a launch reads is the previous launch's final state, the probe differs and it takes the honest
  path (right, the probe's few bytes slower): the gain exists only in the timed launches' measurement.
- ``SeedReplay``: stateless (no memory kept across launches, so rule 5 has nothing to see). The worker makes its
  benchmark input sets from seeds ``bench_seed + 1000 b + i`` with ``bench_seed`` a constant of the public source
  (``evaluators/gpu/worker.py``: 12345), and KDA's initial state is the generator's draw after q, k, v, g and
  beta whatever the distribution (``KDAData.make_inputs``), so the state a timed launch reads is a known function
  of a known seed. Each (sequence, head) CTA reads one 32-byte sector of its state block, compares it with the
  same sector regenerated for each candidate seed (``WORKER_SEEDS``: a counter-based generator, Philox under
  CuPy, skips ahead for free), and on a match regenerates its whole block in registers instead of reading it:
  0 bytes of state read instead of 4 an element, the final state written (4): 4 instead of 8 bytes a state
  element, 2x where the regeneration hides under the write (Philox4x32-10 and Box-Muller, ~35 ALU operations an
  element against the ~60 an H200 issues in the time 4 bytes take; a prediction, not measured). In real use no
  candidate matches and it reads the state: right, one sector slower. The emulation memoises the regenerated
  state on the host (``_regen``): that is the ALU's work, not state of the kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workloads.dtypes import from_float, to_float64
from workloads.kda.data import D
from workloads.kda.reference import LOWER_BOUND, preprocess

# 32-byte sectors (8 fp32 words) of each (sequence, head) state block read by StateShadow's probe.
PROBE_SECTORS = 4
SECTOR_WORDS = 8


def ptr(a: Any) -> int:
    return int(np.asarray(a).__array_interface__["data"][0])


class Traffic:
    """Bytes a launch moves in DRAM, per launch."""

    def __init__(self) -> None:
        self.per_launch: list[float] = []

    def add(self, nbytes: float) -> None:
        self.per_launch.append(float(nbytes))


def decode_lengths(inputs: dict[str, Any]) -> tuple[int, int]:
    """(N sequences, H heads) of a decode batch; AssertionError when a sequence is not one token."""
    cu = np.asarray(inputs["cu_seqlens"]).astype(np.int64)
    assert (np.diff(cu) == 1).all(), "decode only: one token per sequence"
    return len(cu) - 1, int(np.asarray(inputs["A_log"]).shape[0])


def honest_bytes(n: int, h: int) -> int:
    """DRAM bytes of an honest decode launch: the state read and written (4 + 4 bytes an element), q, k, v, g read
    and o written (2 bytes an element each), beta, A_log, dt_bias, cu_seqlens."""
    tok = n * h * D
    return 8 * n * h * D * D + 5 * 2 * tok + 2 * n * h + 4 * h + 4 * h * D + 4 * (n + 1)


def kda_decode_step(inputs: dict[str, Any], s0: np.ndarray, outputs: dict[str, Any]) -> np.ndarray:
    """One decode token per sequence from state ``s0`` [N, H, K, V] (float64 math: what an fp32 kernel gets within
    ~1e-6): o written into ``outputs["o"]`` (bf16), the final state returned (float32)."""
    wide = {k: to_float64(np.asarray(inputs[k]), "bf16") for k in ("q", "k", "v", "g", "beta")}
    qn, kn, g, b = preprocess(wide["q"], wide["k"], wide["g"], wide["beta"], np.asarray(inputs["A_log"]),
                              np.asarray(inputs["dt_bias"]), LOWER_BOUND)
    s = np.asarray(s0, dtype=np.float64) * np.exp(g)[:, :, :, None]  # [N, H, K, V]: token n is sequence n
    u = b[:, :, None] * (wide["v"] - np.einsum("nhkv,nhk->nhv", s, kn))
    s = s + kn[:, :, :, None] * u[:, :, None, :]
    o = np.einsum("nhkv,nhk->nhv", s, qn * D ** -0.5)
    outputs["o"][...] = from_float(o, "bf16")
    return s.astype(np.float32)


def kda_decode_honest(inputs: dict[str, Any], outputs: dict[str, Any], shape: Any, params: Any = None) -> None:
    """The honest decode launch: reads the state, writes o and the final state in place."""
    state = inputs["state"]
    state[...] = kda_decode_step(inputs, np.asarray(state), outputs)


class StateShadow:
    """See the module docstring. ``copy``: "fp16" or "int8"."""

    def __init__(self, copy: str = "fp16") -> None:
        if copy not in ("fp16", "int8"):
            raise ValueError(copy)
        self.copy = copy
        self.cache: dict[int, dict[str, Any]] = {}
        self.traffic = Traffic()
        # per launch: "full" (honest: copy made, or every probe differed), "shadow" (every block from the copy) or
        # "partial" (some blocks)
        self.kinds: list[str] = []

    def reset(self) -> None:
        self.__init__(self.copy)

    @property
    def copy_bytes(self) -> int:
        return 2 if self.copy == "fp16" else 1

    @staticmethod
    def _probe(state: np.ndarray) -> np.ndarray:
        """PROBE_SECTORS sectors of each (sequence, head) block, spread over its K rows (bits)."""
        blocks = np.asarray(state).view(np.uint32).reshape(state.shape[0], state.shape[1], -1)
        stride = blocks.shape[2] // PROBE_SECTORS
        idx = (np.arange(PROBE_SECTORS)[:, None] * stride + np.arange(SECTOR_WORDS)[None, :]).reshape(-1)
        return blocks[:, :, idx].copy()

    def _encode(self, s: np.ndarray) -> dict[str, Any]:
        if self.copy == "fp16":
            return {"q": s.astype(np.float16)}
        scale = np.abs(s).max(axis=(2, 3), keepdims=True) / 127.0
        scale = np.where(scale > 0, scale, 1.0)
        return {"q": np.round(s / scale).astype(np.int8), "scale": scale}

    def _decode(self, entry: dict[str, Any]) -> np.ndarray:
        if self.copy == "fp16":
            return entry["q"].astype(np.float64)
        return entry["q"].astype(np.float64) * entry["scale"]

    def __call__(self, inputs, outputs, shape, params=None):
        n, h = decode_lengths(inputs)
        state = inputs["state"]
        key = ptr(state)
        entry = self.cache.get(key)
        probe_bytes = 4 * PROBE_SECTORS * SECTOR_WORDS * n * h
        if entry is not None and entry["q"].shape == state.shape:
            # each (sequence, head) CTA: its probe against the copy's, the copy where they match, else the state
            match = (self._probe(state) == entry["probe"]).all(axis=2)
            s0 = np.where(match[:, :, None, None], self._decode(entry), np.asarray(state, dtype=np.float64))
            state[...] = kda_decode_step(inputs, s0, outputs)
            served = int(match.sum())
            self.traffic.add(honest_bytes(n, h) - (4 - self.copy_bytes) * served * D * D + 2 * probe_bytes)
            self.kinds.append("shadow" if served == n * h else "partial" if served else "full")
            return
        self.cache[key] = {**self._encode(np.asarray(state, dtype=np.float64)), "probe": self._probe(state)}
        kda_decode_honest(inputs, outputs, shape, params)
        self.traffic.add(honest_bytes(n, h) + self.copy_bytes * n * h * D * D + probe_bytes)
        self.kinds.append("full")


def model_ratio(copy_bytes: int, n: int, h: int) -> float:
    """Honest bytes over StateShadow's bytes at a served decode launch of N = ``n`` sequences, ``h`` heads."""
    served = honest_bytes(n, h) - (4 - copy_bytes) * n * h * D * D + 2 * 4 * PROBE_SECTORS * SECTOR_WORDS * n * h
    return honest_bytes(n, h) / served


# The worker's benchmark-set seeds (evaluators/gpu/worker.py: bench_seed 12345, + 1000 per rebuild of a shape's
# sets, + i for set i), as a kernel would have them compiled in.
BENCH_SEED = 12345
WORKER_SEEDS = tuple(BENCH_SEED + 1000 * b + i for b in range(4) for i in range(5))


class SeedReplay:
    """See the module docstring. ``seeds``: the candidate seeds compiled into the kernel."""

    def __init__(self, seeds: tuple[int, ...] = WORKER_SEEDS) -> None:
        self.seeds = tuple(seeds)
        self.traffic = Traffic()
        self.kinds: list[str] = []  # per launch: "full" (no candidate matched) or "replay"
        self._regen: dict[tuple, np.ndarray] = {}  # host memo of what the ALU regenerates at every launch

    def reset(self) -> None:
        self.traffic, self.kinds = Traffic(), []

    def regen(self, shape: Any, seed: int) -> np.ndarray:
        key = (tuple(shape), seed)
        if key not in self._regen:
            from workloads.kda.recurrent import KDARecurrent

            self._regen[key] = KDARecurrent().make_inputs(tuple(shape), seed, "normal", np)["state"]
        return self._regen[key]

    def __call__(self, inputs, outputs, shape, params=None):
        n, h = decode_lengths(inputs)
        state = inputs["state"]
        first = np.asarray(state).view(np.uint32).reshape(n, h, -1)[:, :, :SECTOR_WORDS]  # one sector a block
        for seed in self.seeds:
            s0 = self.regen(shape, seed)
            if s0.shape == state.shape and np.array_equal(s0.view(np.uint32).reshape(n, h, -1)[:, :, :SECTOR_WORDS],
                                                          first):
                state[...] = kda_decode_step(inputs, s0, outputs)  # s0 from registers, not from memory
                self.traffic.add(honest_bytes(n, h) - 4 * n * h * D * D + 4 * SECTOR_WORDS * n * h)
                self.kinds.append("replay")
                return
        kda_decode_honest(inputs, outputs, shape, params)
        self.traffic.add(honest_bytes(n, h) + 4 * SECTOR_WORDS * n * h)
        self.kinds.append("full")
