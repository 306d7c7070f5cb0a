"""The data side of the KDA (Kimi Delta Attention) forward workloads, shared by the fused recurrent kernel (stage 1,
``workloads.kda.recurrent``) and the chunked pipeline (stage 2, ``workloads.kda.chunk``): the operation's
inputs, output, float64 reference, tolerance and the sampled audit of large shapes.

Buffers (fla's varlen layout, the batch folded into the token axis, sequences given by ``cu_seqlens``): q, k,
g [T, H, 128] bf16; v [T, H, 128] bf16; beta [T, H] bf16; A_log [H] fp32; dt_bias [H * 128] fp32; cu_seqlens
[N + 1] int32; state [N, H, 128, 128] fp32, an **inout** buffer (the initial state in, the final state out);
o [T, H, 128] bf16. A shape is ``(H, L_1, ..., L_N)``: the head count and the sequence lengths.

Checks: the gate compares every element of o and of the final state with the recurrent float64 reference at
the gate shapes; the checked timed launches compare sampled token rows of o and sampled rows of the final state
(``reference_rows``), above
CHUNKED_REFERENCE_ABOVE token-heads with the float64 chunked reference (``workloads.kda.chunk_math``, equal to
the recurrent one to ~1e-12, tests/test_kda_chunk.py) computed with the inputs' array module: milliseconds on
the GPU, where the JAX scan over every (sequence, head) takes seconds; the audit of a large shape checks sampled
(sequence, head) pairs (``reference_blocks``).

Tolerance: every element of o and of the final state within 1e-3 + 5e-3 |ref| (+ half an ulp of bf16 for o)
of the float64 reference (``workloads.kda.reference.kda_reference``, JAX on the CPU): stricter than fla's test
criterion (RMS(ref - out) / RMS(ref) < 5e-3 over a tensor), met by an fp32 recurrence (its error is ~1e-6
relative; the rest is the output's bf16 rounding).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from population.kernel import Kernel, LaunchConfig
from workloads.base import Dim3, OutputSpec, Shape
from workloads.cuda_build import build_ptx
from workloads.dtypes import from_float, to_float64
from workloads.kda.chunk_math import CHUNK, kda_chunk_reference
from workloads.kda.reference import LOWER_BOUND, kda_reference

HERE = Path(__file__).resolve().parent
D = 128  # dk = dv
VARLEN = (1300, 547, 2048, 963, 271, 3063)
# Token-heads above which ``reference_rows`` (the checked timed launches) uses the float64 chunked reference on
# the inputs' array module instead of the JAX recurrence on the CPU.
CHUNKED_REFERENCE_ABOVE = 1 << 16


def _rng(seed: int, xp: ModuleType) -> Any:
    philox = getattr(xp.random, "Philox4x3210", None) if xp is not np else None
    return xp.random.Generator(philox(seed)) if philox is not None else xp.random.default_rng(seed)


def _host(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


class KDAData:
    """The operation's data (module docstring); mixed into the KDA workloads before ``Workload``."""

    dtype = "bf16"
    # normal: the typical case; gate_extremes: g_raw = +-30 (the decay at the lower bound exp(-5), or none at
    # all: the state only grows); beta_extremes: beta_raw = +-12 (beta ~ 6e-6 or 1 - 6e-6); long_memory: g_raw =
    # -30 at every token and channel (decay exactly 1, as a learned gate holds its long-memory channels: only the
    # delta rule forgets, ~beta / 128 a token). The other three forget within ~256 tokens, so a kernel that starts
    # chunks of a long sequence from a zero state a few hundred tokens back was within tolerance under all of them
    # (red-team rt8_kda_window); under long_memory its outputs are wrong by O(1).
    distributions = ("normal", "gate_extremes", "beta_extremes", "long_memory")

    entry: str

    def options(self) -> dict[str, Any]:
        """No constructor options: D = 128 and bf16 are fixed."""
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def _kernel(self, source: str, launch: LaunchConfig, defines: Mapping[str, int] | None = None) -> Kernel:
        """The seed source ``source`` (a .cu file of this folder) compiled with ``defines``
        (``workloads.cuda_build.build_ptx``) and parsed, as the Kernel of ``entry`` launched with ``launch``.
        Raises what ``build_ptx`` and the parser raise."""
        from population.parser import parse_module

        ptx = build_ptx(HERE / source, defines)
        return Kernel(module=parse_module(ptx, filename=Path(source).with_suffix(".ptx").name), entry=self.entry,
                      launch=launch)

    def naive_seed(self, source: str) -> Kernel:
        """The naive seed ``source``: one CTA of D threads owning all D state columns (launch knob bv = D)."""
        return self._kernel(source, LaunchConfig(block=(D, 1, 1), knobs=(("bv", D),)))

    @staticmethod
    def _split(shape: Shape) -> tuple[int, tuple[int, ...]]:
        if len(shape) < 2 or any(int(x) < 1 for x in shape):
            raise ValueError(f"KDA shape is (H, L_1, ..., L_N) with every entry >= 1, got {shape}")
        return int(shape[0]), tuple(int(x) for x in shape[1:])

    def launch_dims(self, shape: Shape, launch: LaunchConfig) -> tuple[Dim3, Dim3, int]:
        """The grid both KDA kernels launch, one CTA per (V-block, head, sequence): grid (128 / bv, H, N), block
        = launch.block, the launch's dynamic shared memory (bytes). ValueError when the launch knob bv does not
        divide 128, the block is over 1024 threads, or N or H exceeds the 65535 limit of gridDim.y/z (CUDA C++
        Programming Guide, "Compute Capabilities": maximum y- and z-dimension of a grid)."""
        h, lens = self._split(shape)
        bv = launch.knob("bv", D)
        if bv < 1 or D % bv:
            raise ValueError(f"launch knob bv={bv} must divide {D}")
        if launch.threads > 1024:
            raise ValueError(f"block {launch.block} has {launch.threads} threads; the limit is 1024")
        if len(lens) > 65535 or h > 65535:
            raise ValueError(f"{len(lens)} sequences x {h} heads exceed gridDim.y/z limits (65535)")
        return (D // bv, h, len(lens)), launch.block, launch.dynamic_smem_bytes

    def make_inputs(self, shape: Shape, seed: int, distribution: str = "normal",
                    xp: ModuleType = np) -> dict[str, Any]:
        """Fresh inputs from ``seed`` (module docstring for layouts): q, k, v ~ N(0, 1); g_raw ~ N(0, 1) (or
        +-30: ``gate_extremes``; -30 everywhere: ``long_memory``); beta_raw ~ N(0, 1) (or +-12:
        ``beta_extremes``); A_log = log U(1, 16);
        dt_bias ~ N(0, 0.5); the initial state ~ 0.1 N(0, 1). bf16 tensors are ml_dtypes.bfloat16 under numpy
        and uint16 bits under CuPy. ValueError on an unknown distribution or a bad shape."""
        h, lens = self._split(shape)
        if distribution not in self.distributions:
            raise ValueError(f"unknown distribution {distribution!r}; have {self.distributions}")
        t, n = sum(lens), len(lens)
        rng = _rng(seed, xp)
        host = np.random.default_rng(seed + 1)

        def bf16(*dims: int, scale: float = 1.0) -> Any:
            return from_float(rng.standard_normal(dims, dtype=xp.float32) * xp.float32(scale), "bf16", xp)

        g = bf16(t, h, D)
        beta = bf16(t, h)
        if distribution == "gate_extremes":
            g = from_float(xp.asarray(np.where(host.random((t, h, D)) < 0.5, -30.0, 30.0).astype(np.float32)),
                           "bf16", xp)
        elif distribution == "long_memory":
            g = from_float(xp.full((t, h, D), -30.0, dtype=xp.float32), "bf16", xp)
        elif distribution == "beta_extremes":
            beta = from_float(xp.asarray(np.where(host.random((t, h)) < 0.5, -12.0, 12.0).astype(np.float32)),
                              "bf16", xp)
        cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        return {
            "q": bf16(t, h, D), "k": bf16(t, h, D), "v": bf16(t, h, D), "g": g, "beta": beta,
            "A_log": xp.asarray(np.log(host.uniform(1.0, 16.0, h)).astype(np.float32)),
            "dt_bias": xp.asarray((0.5 * host.standard_normal(h * D)).astype(np.float32)),
            "cu_seqlens": xp.asarray(cu),
            "state": rng.standard_normal((n, h, D, D), dtype=xp.float32) * xp.float32(0.1),
        }

    def outputs(self, shape: Shape) -> list[OutputSpec]:
        h, lens = self._split(shape)
        return [OutputSpec("o", (sum(lens), h, D), "bf16")]

    def reference_pairs(self, inputs: Mapping[str, Any], pairs: list[tuple[int, int]] | None
                        ) -> tuple[np.ndarray, np.ndarray]:
        """(o, final state) in float64 NumPy for the (sequence, head) ``pairs`` only (None: all; the others are
        NaN), from inputs in either representation (``kda_reference``)."""
        host = {k: _host(v) for k, v in inputs.items()}
        wide = {k: to_float64(host[k], "bf16") for k in ("q", "k", "v", "g", "beta")}
        return kda_reference(wide["q"], wide["k"], wide["v"], wide["g"], wide["beta"], host["A_log"],
                             host["dt_bias"], host["cu_seqlens"], host["state"], D ** -0.5, pairs, LOWER_BOUND)

    def reference(self, inputs: Mapping[str, Any], xp: ModuleType = np) -> dict[str, Any]:
        """Float64 ``o`` and final ``state`` (``kda_reference``: JAX on the CPU), returned in ``xp``."""
        o, s = self.reference_pairs(inputs, None)
        return {"o": xp.asarray(o), "state": xp.asarray(s)}

    def reference_rows(self, inputs: Mapping[str, Any], rows: Any, xp: ModuleType = np,
                       params: Mapping[str, float] | None = None) -> dict[str, Any]:
        """o at token ``rows`` and the final state (whole; the checked timed launches sample it): from the
        float64 chunked reference computed with ``xp`` (equal to the recurrence to ~1e-12,
        tests/test_kda_chunk.py), always when ``xp`` is not NumPy (the GPU's: milliseconds, where the JAX scan on
        the CPU over a decode batch's 2048 token-heads took about 0.8 s per checked launch, 3.4 s of audit per
        candidate on the H200 host, R26) and above CHUNKED_REFERENCE_ABOVE token-heads with NumPy; else from the
        recurrent JAX reference (``reference``)."""
        cu = _host(inputs["cu_seqlens"]).astype(np.int64)
        h = int(_host(inputs["A_log"]).shape[0])
        if xp is np and int(cu[-1]) * h <= CHUNKED_REFERENCE_ABOVE:
            ref = self.reference(inputs, xp)
            return {"o": ref["o"][rows], "state": ref["state"]}
        wide = {n: to_float64(xp.asarray(inputs[n]) if xp is not np else _host(inputs[n]), "bf16", xp)
                for n in ("q", "k", "v", "g", "beta")}
        o, s = kda_chunk_reference(wide["q"], wide["k"], wide["v"], wide["g"], wide["beta"], inputs["A_log"],
                                   inputs["dt_bias"], cu, inputs["state"], D ** -0.5, CHUNK, xp)
        return {"o": o[rows], "state": s}

    def sample_pairs(self, inputs: Mapping[str, Any], count: int) -> list[tuple[int, int]]:
        """``count`` (sequence, head) pairs drawn from a hash of the inputs' bits (so unknown to a kernel that
        cannot see the checker, and the same for the same inputs): always the longest sequence once."""
        cu = _host(inputs["cu_seqlens"]).astype(np.int64)
        n, h = len(cu) - 1, int(_host(inputs["A_log"]).shape[0])
        digest = int(np.asarray(_host(inputs["q"][:1]).view(np.uint16), dtype=np.uint64).sum()) + n * 7919 + h
        rng = np.random.default_rng(digest)
        lens = np.diff(cu)
        pairs = {(int(np.argmax(lens)), int(rng.integers(h)))}
        while len(pairs) < min(count, n * h):
            pairs.add((int(rng.integers(n)), int(rng.integers(h))))
        return sorted(pairs)

    def reference_blocks(self, inputs: Mapping[str, Any], max_elements: int, xp: ModuleType = np,
                         params: Mapping[str, float] | None = None
                         ) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
        """Every element of ``o`` when the reference is cheap (at most 2**18 token-heads), else the tokens of
        ``sample_pairs(inputs, 2)``: (index into o [T, H, V], {"o": reference of o[index]}). A sampled audit,
        not a cover of every element (the gate's shapes cover every element)."""
        cu = _host(inputs["cu_seqlens"]).astype(np.int64)
        h = int(_host(inputs["A_log"]).shape[0])
        if int(cu[-1]) * h <= 1 << 18:
            yield (), {"o": self.reference(inputs, xp)["o"]}
            return
        pairs = self.sample_pairs(inputs, 2)
        o, _ = self.reference_pairs(inputs, pairs)
        for n, hh in pairs:
            lo, hi = int(cu[n]), int(cu[n + 1])
            yield (slice(lo, hi), hh), {"o": xp.asarray(o[lo:hi, hh])}

    @property
    def tolerance(self) -> tuple[float, float]:
        return 1e-3, 5e-3

