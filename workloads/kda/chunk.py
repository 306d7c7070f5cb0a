"""KDA (Kimi Delta Attention) chunked prefill forward: a pipeline of three stages, of which the search evolves the
serial inter-chunk state pass (``workloads.pipeline`` says how a pipeline plugs into the Workload API).

The operation is stage 1's (``workloads.kda.data``: the same inputs, output o, inout state, float64 reference,
tolerance and distributions). Its chunked (WY / UT-transform) form is ``workloads.kda.chunk_math``, chunks of 64
tokens per sequence as in fla's ``chunk_kda``:

1. ``intra`` (reference, float32 on the device: CuPy; NumPy on the host): L2 norms, the safe gate, beta, the
   in-chunk cumulative decay, the UT transform -> the intermediates kg, w [T, H, 128], u [T, H, 128], gdecay
   [NCT, H, 128] (the chunk's total decay), chunk_offsets [N + 1] for the evolved kernel, and qg [T, H, 128],
   Aqk [T, H, 64] for the output stage;
2. ``state_pass`` (**evolved**, entry ``kda_chunk_state``): per (sequence, head) the chunks in order,
   h[c] = S; v_new = u - w S; S = diag(gdecay[c]) S + kg^T v_new; the state buffer in (initial) and out (final);
3. ``output`` (reference): o = qg h + Aqk v_new per chunk, rounded to bf16.

ABI of the evolved kernel: ``(kg, w, u, gdecay, cu_seqlens, chunk_offsets, state, h, v_new .u64, N, H, T,
NCT .u32)``: every buffer fp32 but the int32 cu_seqlens / chunk_offsets; NCT = the number of chunks of all
sequences. Launch: grid (128 / bv, H, N), block = launch.block, the launch knob ``bv`` the state columns one
CTA owns. Seeds: ``kda_chunk_naive.cu`` (bv = 128, the state and v_new in local arrays) and the template
``kda_chunk_template.cu`` (knobs bv, min_blocks; the state column in registers).

Shapes ``(H, L_1, ..., L_N)``: benchmark = the issue's six prefill scenarios (H in {96, 64} x {8192; varlen
[1300, 547, 2048, 963, 271, 3063]; 8 x 1024}); search = 8 x 1024 at H = 64 and the varlen batch at H = 96;
gate = odd lengths (1, 17, 63, 97), chunk edges (64, 65, 129), one head, varlen with a length-1 sequence and a
2048-token sequence (fp32 drift of the state); held-out T in {4096, 12288}.

Timing (``workloads.pipeline``): the benchmark times the state pass alone; its roofline (``bytes_moved``,
``flops``) and library baseline are the stage's: ``fla_fwd_h``, fla's ``chunk_gated_delta_rule_fwd_h`` on the
same intermediates. The whole pipeline against fla's ``chunk_kda`` is ``experiments/kda_chunk_h200.py``.

Checks (``workloads.kda.data``): the gate judges o and the final state of the whole pipeline against the
recurrent float64 JAX reference (every element at the gate shapes); checked timed launches at the search shapes
compare sampled rows of o with the float64 chunked reference on the GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np

from population.kernel import Kernel, LaunchConfig
from workloads.base import ParamSpec, Shape
from workloads.dtypes import from_float
from workloads.kda.chunk_math import (
    CHUNK,
    ChunkLayout,
    chunk_layout,
    chunk_output,
    from_chunks,
    intra_chunk,
    on,
    preprocess,
    state_pass,
    to_chunks,
)
from workloads.kda.data import VARLEN, D, KDAData
from workloads.pipeline import Intermediate, PipelineWorkload, Stage

BENCHMARK_SHAPES: list[Shape] = [s for h in (96, 64) for s in [(h, 8192), (h, *VARLEN), (h, *(1024,) * 8)]]
SEARCH_SHAPES: list[Shape] = [(64, *(1024,) * 8), (96, *VARLEN)]
GATE_SHAPES: list[Shape] = [(1, 1), (1, 17), (2, 63), (1, 64), (1, 65), (1, 97), (2, 129), (3, 1, 63, 17),
                            (2, 5, 1, 70, 2), (1, 2048)]
HELDOUT_SHAPES: list[Shape] = [(64, 4096), (96, 12288)]
KNOB_MACROS = {"bv": "BV", "min_blocks": "MIN_BLOCKS"}


def _f32(a: Any, xp: ModuleType) -> Any:
    """A bf16 tensor (ml_dtypes on the host, uint16 bits under CuPy) or a float array as float32."""
    if a.dtype == np.uint16:
        return (a.astype(xp.uint32) << 16).view(xp.float32)
    return a.astype(xp.float32)


class KDAChunk(KDAData, PipelineWorkload):
    """KDA chunked prefill forward, a three-stage pipeline evolving the inter-chunk state pass (module docstring).
    No options (D = 128, chunks of 64, bf16 in and out, fp32 intermediates)."""

    name = "kda_chunk"
    entry = "kda_chunk_state"
    elt = 4  # the evolved stage streams fp32
    chunk = CHUNK
    abi = (ParamSpec("kg", "input", "u64"), ParamSpec("w", "input", "u64"), ParamSpec("u", "input", "u64"),
           ParamSpec("gdecay", "input", "u64"), ParamSpec("cu_seqlens", "input", "u64"),
           ParamSpec("chunk_offsets", "input", "u64"), ParamSpec("state", "inout", "u64"),
           ParamSpec("h", "output", "u64"), ParamSpec("v_new", "output", "u64"),
           ParamSpec("N", "scalar", "u32"), ParamSpec("H", "scalar", "u32"), ParamSpec("T", "scalar", "u32"),
           ParamSpec("NCT", "scalar", "u32"))
    stages = (
        Stage("intra", reads=("q", "k", "v", "g", "beta", "A_log", "dt_bias"),
              writes=("kg", "w", "u", "gdecay", "chunk_offsets", "qg", "Aqk")),
        Stage("state_pass", reads=("kg", "w", "u", "gdecay", "cu_seqlens", "chunk_offsets", "state"),
              writes=("h", "v_new", "state"), evolved=True),
        Stage("output", reads=("qg", "Aqk", "h", "v_new"), writes=("o",)),
    )
    primary_baseline = "fla_fwd_h"
    baseline_names = ("fla_fwd_h",)
    uses_atomics = False

    def __init__(self) -> None:
        self.search_shapes = list(SEARCH_SHAPES)
        self.benchmark_shapes = list(BENCHMARK_SHAPES)
        self.gate_shapes = list(GATE_SHAPES)
        # small: an instrumented launch holds the GPU's timing lock throughout (evaluators.gpu.sanitizer)
        self.sanitizer_shapes = [(1, 17), (2, 129), (3, 1, 63, 17)]
        self.heldout_shapes = list(HELDOUT_SHAPES)
        self.knob_space = {"bv": (16, 32, 64, 128), "min_blocks": (1, 2, 4)}
        self.default_knobs = {"bv": 32, "min_blocks": 1}

    # ------------------------------------------------------------------------------------------------ kernels
    def instantiate(self, knobs: Mapping[str, int]) -> Kernel:
        """The template (``kda_chunk_template.cu``) for ``knobs`` (missing ones default); block = (bv, 1, 1),
        the launch knob ``bv`` carried. ValueError on an invalid knob."""
        k = self.check_knobs(knobs)
        return self._kernel("kda_chunk_template.cu", LaunchConfig(block=(k["bv"], 1, 1), knobs=tuple(k.items())),
                            {KNOB_MACROS[n]: v for n, v in k.items()})

    def seeds(self) -> list[Kernel]:
        """[the naive seed (bv = 128), the template at the default knobs]."""
        return [self.naive_seed("kda_chunk_naive.cu"), self.instantiate(self.default_knobs)]

    # ------------------------------------------------------------------------------------ launch and roofline
    # launch_dims: KDAData's (one CTA per V-block, head and sequence)
    def layout(self, shape: Shape) -> ChunkLayout:
        """The chunk layout of ``shape``'s sequences (``chunk_math.chunk_layout``, cached)."""
        return chunk_layout(self._split(shape)[1], self.chunk)

    def elements_per_cta_sweep(self, shape: Shape, launch: LaunchConfig) -> int:
        """Elements one CTA streams over its longest sequence: kg and w rows (128 each) and its bv columns of u
        and v_new per token; its h block and the decay per chunk; its state block twice."""
        _, lens = self._split(shape)
        bv = launch.knob("bv", D)
        longest = max(lens)
        return longest * (2 * D + 2 * bv) + -(-longest // self.chunk) * (D * bv + D) + 2 * D * bv

    def bytes_moved(self, shape: Shape) -> int:
        """The state pass's fewest DRAM bytes (fp32): kg, w, u read and v_new written once per token and head,
        gdecay read and h written once per chunk and head, the state read and written, cu_seqlens and
        chunk_offsets read."""
        h, lens = self._split(shape)
        t, n, nct = sum(lens), len(lens), self.layout(shape).n_chunks
        return 4 * (t * h * 4 * D + nct * h * (D + D * D) + 2 * n * h * D * D + 2 * (n + 1))

    def flops(self, shape: Shape) -> int:
        """Per token and head: w S and kg^T v_new over the 128 x 128 state (2 x 2 K V); per chunk and head the
        decay (K V)."""
        h, lens = self._split(shape)
        return sum(lens) * h * 4 * D * D + self.layout(shape).n_chunks * h * D * D

    def scalars(self, shape: Shape) -> dict[str, int | float]:
        h, lens = self._split(shape)
        return {"N": len(lens), "H": h, "T": sum(lens), "NCT": self.layout(shape).n_chunks}

    # ------------------------------------------------------------------------------------- pipeline stages
    def intermediates(self, shape: Shape) -> list[Intermediate]:
        h, lens = self._split(shape)
        t, n, nct = sum(lens), len(lens), self.layout(shape).n_chunks
        f = "float32"
        return [Intermediate("kg", (t, h, D), f), Intermediate("w", (t, h, D), f), Intermediate("u", (t, h, D), f),
                Intermediate("gdecay", (nct, h, D), f), Intermediate("chunk_offsets", (n + 1,), "int32"),
                Intermediate("qg", (t, h, D), f), Intermediate("Aqk", (t, h, self.chunk), f),
                Intermediate("h", (nct, h, D, D), f), Intermediate("v_new", (t, h, D), f)]

    def run_stage(self, stage: str, buffers: Mapping[str, Any], shape: Shape,
                  params: Mapping[str, float] | None, xp: ModuleType) -> None:
        """``intra`` or ``output`` (module docstring) in float32 with ``xp``; ValueError for another name."""
        lay = self.layout(shape)
        if stage == "intra":
            f = {n: _f32(buffers[n], xp) for n in ("q", "k", "v", "g", "beta")}
            qn, kn, g, b = preprocess(f["q"], f["k"], f["g"], f["beta"], buffers["A_log"], buffers["dt_bias"], xp,
                                      np.float32)
            parts = intra_chunk(qn, kn, f["v"], g, b, lay, D ** -0.5, xp)
            for n in ("kg", "w", "u", "qg"):
                buffers[n][...] = from_chunks(parts[n], lay, xp)
            buffers["Aqk"][...] = from_chunks(parts["Aqk"], lay, xp)
            buffers["gdecay"][...] = parts["gdecay"]
            buffers["chunk_offsets"][...] = on(lay, "offsets", xp)
        elif stage == "output":
            qg, aqk, vn = (to_chunks(buffers[n], lay, xp) for n in ("qg", "Aqk", "v_new"))
            o = from_chunks(chunk_output(qg, aqk, buffers["h"], vn), lay, xp)
            buffers["o"][...] = from_float(o, "bf16", xp)
        else:
            raise ValueError(f"kda_chunk: {stage!r} is not a reference stage (have intra, output)")

    def emulate_state_pass(self, buffers: Mapping[str, Any], shape: Shape, xp: ModuleType = np) -> None:
        """The evolved stage computed with ``chunk_math.state_pass`` in float32 on ``buffers`` (a plan's): what
        a correct kernel does, for CPU tests and as a stand-in where no GPU is."""
        lay = self.layout(shape)
        kg, w, u = (to_chunks(buffers[n], lay, xp) for n in ("kg", "w", "u"))
        h, vn, s = state_pass(kg, w, u, buffers["gdecay"], buffers["state"], lay, xp)
        buffers["h"][...] = h
        buffers["v_new"][...] = from_chunks(vn, lay, xp)
        buffers["state"][...] = s

    # ---------------------------------------------------------------------------------------------- baselines
    def baselines(self, inputs: Mapping[str, Any], shape: Shape, names: tuple[str, ...],
                  notes: dict[str, str]) -> dict[str, Any]:
        """``fla_fwd_h``: fla's inter-chunk kernel (``chunk_gated_delta_rule_fwd_h``, PyPI fla-core, Triton) on
        the intermediates the ``intra`` stage computes from ``inputs`` (once, here, untimed); see
        ``workloads.kda.baselines``."""
        from workloads.kda.baselines import fla_state_pass_baselines

        return fla_state_pass_baselines(self, inputs, shape, names, notes)
