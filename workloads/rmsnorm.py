"""RMSNorm forward: ``y = x * rsqrt(mean(x^2, axis=-1) + eps) * w``.

x: (M, N) in bf16, fp16 or fp32; w: (N,) float32; eps = 1e-6 (the gate passes 1e-6, 1e-5 or 1e-3, drawn per
check: a kernel must use the eps it is given); y: (M, N) in x's dtype.
ABI of every seed (entry ``rmsnorm``): ``(x .u64, w .u64, y .u64, M .u32, N .u32, eps .f32)``; nvcc declares
``int`` parameters as ``.u32`` in PTX, and signed/unsigned 32-bit are interchangeable for packing.
Shapes follow the matrix QuACK publishes for its RMSNorm benchmark (M = 32768, N = 256 .. 65536, plus
16384 x 131072 and 8192 x 262144). Tolerances are the stricter of the published ones (QuACK / Liger test
suites): bf16 atol 3e-2, fp16 atol 1e-2, fp32 atol 1e-4, rtol 1e-3 for all.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from population.kernel import Kernel, LaunchConfig
from workloads import rmsnorm_check
from workloads.base import Dim3, OutputSpec, ParamSpec, Shape, Workload
from workloads.cuda_build import SEEDS_DIR, build_ptx
from workloads.dtypes import ELEMENT_BYTES, check_dtype, from_float, to_float64

EPS = 1e-6
ENTRY = "rmsnorm"
DTYPE_MACRO = {"bf16": 0, "fp16": 1, "fp32": 2}
TOLERANCES = {"bf16": (3e-2, 1e-3), "fp16": (1e-2, 1e-3), "fp32": (1e-4, 1e-3)}

# Knob -> preprocessor macro of rmsnorm_template.cu (see that file for what each does).
KNOB_MACROS = {"threads": "THREADS", "rows_per_cta": "ROWS_PER_CTA", "vec": "VEC", "keep_in_regs": "KEEP_IN_REGS",
               "max_chunks": "MAX_CHUNKS", "cache_hint": "CACHE_HINT", "row_iters": "ROW_ITERS",
               "w_regs": "W_REGS", "cluster": "CLUSTER", "min_blocks": "MIN_BLOCKS", "smem_stages": "SMEM_STAGES",
               "cluster_push": "CLUSTER_PUSH"}

# Shared memory per CTA on sm_90: 227 KiB usable by one CTA (CUDA C Programming Guide, compute capability 9.0
# table, "maximum amount of shared memory per thread block"), less a margin for the template's static arrays
# (at most 2 x 32 x 32 floats of warp partials and the cluster slots, about 8.5 KiB).
MAX_DYNAMIC_SMEM = 227 * 1024 - 9 * 1024
# One shared-memory staging slot: a 16-byte cp.async copy (cp.async.cg copies 16 bytes only).
STAGE_SLOT_BYTES = 16

# Recommended template knob sets for bf16 x / fp32 w, by the largest N each serves (rows of up to that many
# elements): the fastest of experiments/rmsnorm_baselines.py's variants at each benchmark shape, measured on an
# H200 (2026-11-30, experiments/results/rmsnorm_baselines_bf16.md; % of the 4258 GB/s device-to-device copy in
# the comments). Every set holds the whole row in registers (max_chunks * 8 * threads-per-row * cluster >= N)
# with 16-byte accesses; small N takes several rows per CTA (16/32-lane row groups), large N a thread-block
# cluster per row (distributed shared memory for the partial sums). Same table in seeds/rmsnorm_template.cu.
TUNED_KNOBS: dict[int, dict[str, int]] = {
    256: {"threads": 256, "rows_per_cta": 16, "max_chunks": 4, "row_iters": 4},  # 63%
    512: {"threads": 256, "rows_per_cta": 16, "max_chunks": 4, "row_iters": 4},  # 79%
    1024: {"threads": 128, "rows_per_cta": 4, "max_chunks": 8},  # 93%
    2048: {"threads": 128, "rows_per_cta": 4, "max_chunks": 8},  # 98%
    4096: {"threads": 256, "rows_per_cta": 1, "max_chunks": 4},  # 97%
    8192: {"threads": 256, "rows_per_cta": 1, "max_chunks": 4},  # 98%
    16384: {"threads": 512, "rows_per_cta": 1, "max_chunks": 4},  # 98%
    32768: {"threads": 512, "rows_per_cta": 1, "max_chunks": 8},  # 98%
    65536: {"threads": 256, "cluster": 4, "max_chunks": 8},  # 84%
    131072: {"threads": 512, "cluster": 4, "max_chunks": 8},  # 81%
    262144: {"threads": 512, "cluster": 8, "max_chunks": 8},  # 76%
}


# Candidate sets of the shared-memory staging path (smem_stages, cluster_push) for long rows, bf16 x, by the row
# length each is made for (capacity max_chunks * 8 * threads * cluster = N, or N/2 for a 2-CTA cluster at 32768):
# experiments/rmsnorm_baselines.py --long-rows times them beside TUNED_KNOBS. Modelled on
# QuACK 0.6.x's long-row configuration (256 threads, one row per CTA, cluster 4 at 64K and 8 at 128K, x staged
# in shared memory by cp.async, the cluster sum pushed through st.async + mbarrier); each shape also gets the
# single changes (push alone, staging alone) that say which part pays, and a double-buffered row loop.
# Dynamic shared memory smem_stages * max_chunks * threads * 16 bytes: 32 KiB (6 CTAs per SM by shared memory),
# 64 KiB (3 per SM). Measured on an H200 (2026-12-03, GPU_NOTES.md R56): the best of them 85.3 / 82.4 / 76.7 %
# of copy at N 65536 / 131072 / 262144 against TUNED_KNOBS' 84.8 / 81.1 / 76.7 %: no gain, so TUNED_KNOBS stays.
LONG_ROW_CANDIDATES: dict[int, list[dict[str, int]]] = {
    16384: [{"threads": 256, "max_chunks": 8, "smem_stages": 1},
            {"threads": 256, "max_chunks": 8, "smem_stages": 2, "row_iters": 4}],
    32768: [{"threads": 256, "max_chunks": 16, "smem_stages": 1},
            {"threads": 256, "cluster": 2, "max_chunks": 8, "smem_stages": 1, "cluster_push": 1}],
    65536: [{"threads": 256, "cluster": 4, "max_chunks": 8, "smem_stages": 1, "cluster_push": 1},
            {"threads": 256, "cluster": 4, "max_chunks": 8, "smem_stages": 2, "row_iters": 4, "cluster_push": 1},
            {"threads": 256, "cluster": 4, "max_chunks": 8, "cluster_push": 1},
            {"threads": 256, "cluster": 4, "max_chunks": 8, "smem_stages": 1}],
    131072: [{"threads": 256, "cluster": 8, "max_chunks": 8, "smem_stages": 1, "cluster_push": 1},
             {"threads": 256, "cluster": 8, "max_chunks": 8, "smem_stages": 2, "row_iters": 4, "cluster_push": 1},
             {"threads": 512, "cluster": 4, "max_chunks": 8, "smem_stages": 1, "cluster_push": 1}],
    262144: [{"threads": 512, "cluster": 8, "max_chunks": 8, "smem_stages": 1, "cluster_push": 1},
             {"threads": 256, "cluster": 8, "max_chunks": 16, "smem_stages": 1, "cluster_push": 1},
             {"threads": 1024, "cluster": 8, "max_chunks": 4, "smem_stages": 1, "cluster_push": 1}],
}


# Candidate sets that hold this thread's slice of w in registers (w_regs 1), for long rows: loaded before the row's
# x loads, so its L2 round trips overlap them. Without it the template reads w chunk by chunk in the store loop,
# where ptxas reuses one register set for every chunk (the SASS of the 65536 TUNED_KNOBS set: LDG w, LDG w, STG y,
# eight times over, each pair waiting on the last): at N <= 32768 w hits L1 and that series is short; a cluster's
# CTAs hold different quarters or eighths of a longer w, which misses L1 and pays MAX_CHUNKS L2 round trips in series
# per row. A register slice of w costs MAX_CHUNKS * 8 registers, so these sets take narrower slices (cluster 8,
# max_chunks 4); with row_iters > 1 w is also read once per CTA instead of once per row. ptxas registers (sm_90,
# 2026-12-08): 74 at 65536 (cluster 8, 256 threads), 84 with row_iters 4, 64 staged.
WREG_CANDIDATES: dict[int, list[dict[str, int]]] = {
    65536: [{"threads": 256, "cluster": 8, "max_chunks": 4, "w_regs": 1},
            {"threads": 256, "cluster": 8, "max_chunks": 4, "w_regs": 1, "row_iters": 4},
            {"threads": 256, "cluster": 8, "max_chunks": 4, "w_regs": 1, "row_iters": 4, "cluster_push": 1},
            {"threads": 256, "cluster": 4, "max_chunks": 8, "w_regs": 1},
            {"threads": 512, "cluster": 4, "max_chunks": 4, "w_regs": 1, "row_iters": 2},
            {"threads": 256, "cluster": 4, "max_chunks": 8, "w_regs": 1, "smem_stages": 1, "cluster_push": 1},
            {"threads": 256, "cluster": 8, "max_chunks": 4, "w_regs": 1, "smem_stages": 2, "cluster_push": 1,
             "row_iters": 4}],
    131072: [{"threads": 512, "cluster": 8, "max_chunks": 4, "w_regs": 1},
             {"threads": 512, "cluster": 8, "max_chunks": 4, "w_regs": 1, "row_iters": 4},
             {"threads": 512, "cluster": 8, "max_chunks": 4, "w_regs": 1, "row_iters": 4, "cluster_push": 1},
             {"threads": 256, "cluster": 8, "max_chunks": 8, "w_regs": 1, "smem_stages": 1, "cluster_push": 1},
             {"threads": 512, "cluster": 8, "max_chunks": 4, "w_regs": 1, "smem_stages": 2, "cluster_push": 1,
              "row_iters": 4}],
    262144: [{"threads": 512, "cluster": 8, "max_chunks": 8, "w_regs": 1},
             {"threads": 1024, "cluster": 8, "max_chunks": 4, "w_regs": 1, "smem_stages": 1, "cluster_push": 1},
             {"threads": 512, "cluster": 8, "max_chunks": 8, "w_regs": 1, "smem_stages": 1, "cluster_push": 1},
             {"threads": 512, "cluster": 8, "max_chunks": 8, "w_regs": 1, "smem_stages": 2, "cluster_push": 1,
              "row_iters": 2}],
}

# Candidate sets for short rows, where the best library leads (torch.compile at N 256-1024, GPU_NOTES.md R30: the
# TUNED_KNOBS sets at 0.91 / 0.93 / 0.96 of it). A 32768-row problem of 16-64 MiB is a few microseconds of traffic,
# so launch and tail latency weigh: these issue every load of a CTA up front with no row loop (row_iters 1) and
# narrower lane groups (8 or 16 threads a row), so the grid is one or two waves of CTAs whose loads all fly at once.
SHORT_ROW_CANDIDATES: dict[int, list[dict[str, int]]] = {
    256: [{"threads": 256, "rows_per_cta": 32, "max_chunks": 4},
          {"threads": 256, "rows_per_cta": 32, "max_chunks": 4, "cache_hint": 1},
          {"threads": 512, "rows_per_cta": 64, "max_chunks": 4},
          {"threads": 128, "rows_per_cta": 16, "max_chunks": 4},
          {"threads": 256, "rows_per_cta": 16, "max_chunks": 2}],
    512: [{"threads": 256, "rows_per_cta": 16, "max_chunks": 4},
          {"threads": 256, "rows_per_cta": 32, "max_chunks": 8},
          {"threads": 512, "rows_per_cta": 32, "max_chunks": 4},
          {"threads": 256, "rows_per_cta": 16, "max_chunks": 4, "cache_hint": 1}],
    1024: [{"threads": 256, "rows_per_cta": 8, "max_chunks": 4},
           {"threads": 256, "rows_per_cta": 16, "max_chunks": 8},
           {"threads": 512, "rows_per_cta": 32, "max_chunks": 8},
           {"threads": 128, "rows_per_cta": 4, "max_chunks": 8, "cache_hint": 1}],
}

def tuned_knobs(n: int) -> dict[str, int]:
    """The TUNED_KNOBS entry for row length ``n`` (elements): the set of the smallest bound >= n, or the
    largest set (cluster 8; rows beyond it use the re-read path) past 262144. ValueError for n < 1."""
    if n < 1:
        raise ValueError(f"row length must be >= 1, got {n}")
    return dict(next((v for b, v in sorted(TUNED_KNOBS.items()) if n <= b), TUNED_KNOBS[max(TUNED_KNOBS)]))


def stage_bytes(knobs: Mapping[str, int]) -> int:
    """Dynamic shared memory (bytes per CTA) of the template's staging buffer: smem_stages * max_chunks *
    threads * 16 (one 16-byte slot per chunk, thread and stage: rmsnorm_template.cu ``stage_buf``); 0 when
    smem_stages is 0 or absent (max_chunks 8 and threads 256 when absent, the defaults)."""
    return (int(knobs.get("smem_stages", 0)) * int(knobs.get("max_chunks", 8)) * int(knobs.get("threads", 256))
            * STAGE_SLOT_BYTES)


BENCHMARK_SHAPES: list[Shape] = [(32768, n) for n in (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)] + [
    (16384, 131072), (8192, 262144)]
# Small N, the middle, a long row held in registers and a row too long for them: where the knobs trade off.
SEARCH_SHAPES: list[Shape] = [(32768, 512), (32768, 4096), (32768, 16384), (16384, 131072)]
# M that fills no CTA evenly, N that is no multiple of 256 threads x 8 elements, odd N (misaligned rows:
# the scalar fallback), one long row, the full benchmark M with a large N, and the regime of the largest search
# shape (M >= 8192 with N >= 65536: thread-block clusters per row), with N no multiple of a cluster's span.
GATE_SHAPES: list[Shape] = [(m, n) for m in (1, 7, 199) for n in (192, 760, 1128)] + [
    (199, 1001), (5, 4099), (3, 262144), (32768, 8192), (8192, 65544)]
HELDOUT_SHAPES: list[Shape] = [(m, n) for m in (1, 199, 4096) for n in (3072, 5120, 7168, 12288, 28672)]
# Past 2^31 elements (the largest benchmark shapes hold exactly 2^31): 257 rows of 131072 beyond 16384 x 131072, a
# bf16 x of 4 GiB + 64.25 MiB, where a 32-bit element index wraps (evaluators/gpu/index_check.py). 257 = 256 + 1:
# the rows past element 2^31 fill whole CTAs of any power-of-two row count up to 256 and leave one tail row, so a
# kernel whose remainder path alone indexes in 64 bits wraps on the main path (red-team rt_index_tail64: at
# 16385 x 131072, gate rules version 7, the one row past 2^31 was a tail row for every such kernel).
INDEX_SHAPES: tuple[Shape, ...] = ((16641, 131072),)
# The sanitizer replay's fixed shapes (evaluators.gpu.sanitizer; instrumented launches are ~100x slower): odd N
# (scalar tail), several rows per CTA not dividing M, and a row longer than the register-resident chunk count.
SANITIZER_SHAPES: list[Shape] = [(199, 1128), (7, 4099), (3, 28672)]

# eps values the gate draws per check (a kernel that ignores eps is wrong at the larger ones on "tiny" rows).
EPS_DRAWS = (1e-6, 1e-5, 1e-3)
# Scale of the "tiny" distribution: mean(x^2) ~ 1e-6, the size of eps, so eps changes the result.
TINY_SCALE = 1e-3

# Scale of the "large" distribution: large enough to overflow a naive fp16 sum of squares, small enough that
# the float32 sum of squares of a 262144-element row stays finite (fp16 max 65504).
LARGE_SCALE = {"bf16": 1e6, "fp16": 1e3, "fp32": 1e6}


def _generator(seed: int, xp: ModuleType) -> Any:
    """A seeded random Generator for ``xp``: numpy's default; on CuPy a Philox4x32-10 generator, whose
    per-state set-up is a counter assignment (cuRAND's default XORWOW runs a skip-ahead per state, about 0.7 ms
    on an H200 for each generator, which the gate creates per check)."""
    philox = getattr(xp.random, "Philox4x3210", None) if xp is not np else None
    return xp.random.Generator(philox(seed)) if philox is not None else xp.random.default_rng(seed)


@dataclass
class _HostDraws:
    """The host-drawn part of one ``RMSNorm.make_inputs``: x's scale (large, tiny), the rows kept (zero_rows: the
    others are 0), NaN positions (rows, cols) and Inf positions with their signed values (nonfinite), w's factors
    (0, -1 or 1 per element)."""

    scale: float | None = None
    keep: np.ndarray | None = None
    nan: tuple[np.ndarray, np.ndarray] | None = None
    inf: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    w_scale: np.ndarray = field(default_factory=lambda: np.ones(0, dtype=np.float32))


def _seed_file(kind: str, dtype: str) -> str:
    return f"rmsnorm_{kind}.ptx" if dtype == "bf16" else f"rmsnorm_{kind}_{dtype}.ptx"


class RMSNorm(Workload):
    """RMSNorm forward for one x dtype (``"bf16"`` default, ``"fp16"``, ``"fp32"``); see the module docstring.

    Knobs (template macros): threads (threads per CTA), rows_per_cta (threads per row = threads / rows_per_cta:
    8, 16 or a multiple of 32), vec (elements per vector access), keep_in_regs (0/1), max_chunks (vector chunks
    per thread held in registers), cache_hint (0 plain, 1 ld.global.nc + st.global.cs, 2 ld.global.cs on the
    last read + st.global.cs), row_iters (row loop: rows_per_cta * row_iters rows per CTA), w_regs (0/1: w held
    in registers across the row loop), cluster (1/2/4/8 CTAs per row, distributed shared memory for the sum),
    min_blocks (0, or the second ``__launch_bounds__`` argument), smem_stages (0: the row slice in registers;
    1/2: staged in dynamic shared memory by 16-byte cp.async copies, 2 double-buffered over the row loop),
    cluster_push (0: cluster barrier + remote loads; 1: st.async pushes completing an mbarrier, cluster > 1 only).
    TUNED_KNOBS: recommended sets per N range.
    Launch rule: block = launch.block, grid = cluster * ceil(M / (rows_per_cta * row_iters)) CTAs (knobs 1 if
    absent), so the grid is a multiple of the compile-time cluster size; dynamic shared memory
    smem_stages * max_chunks * threads * 16 bytes (``stage_bytes``).
    """

    name = "rmsnorm"
    entry = ENTRY
    abi = (ParamSpec("x", "input", "u64"), ParamSpec("w", "input", "u64"), ParamSpec("y", "output", "u64"),
           ParamSpec("M", "scalar", "u32"), ParamSpec("N", "scalar", "u32"), ParamSpec("eps", "scalar", "f32"))
    distributions = ("normal", "large", "zero_rows", "tiny", "nonfinite")
    nonfinite_distributions = ("nonfinite",)
    index_shapes = INDEX_SHAPES
    scalar_draws = {"eps": EPS_DRAWS}
    primary_baseline = "torch"
    baseline_names = ("torch", "torch_compile", "liger", "quack")
    # the contenders of the "best" objective: eager torch is a column, not a contender (torch.compile of the same
    # function is at least as fast); QuACK's autotuned path is timed when asked for (rmsnorm_baselines)
    libraries = ("torch_compile", "liger", "quack", "quack_tuned")
    uses_atomics = False

    def __init__(self, dtype: str = "bf16", eps: float = EPS, baseline_weight: str = "workload"):
        from workloads.rmsnorm_baselines import check_baseline_weight

        self.dtype = check_dtype(dtype)
        self.eps = float(eps)
        # how the library baselines get w: "workload" (fp32, like for like) or "x" (cast to x's dtype, the
        # definition before 2026-12-08): workloads.rmsnorm_baselines
        self.baseline_weight = check_baseline_weight(baseline_weight)
        self.elt = ELEMENT_BYTES[self.dtype]
        self.search_shapes = list(SEARCH_SHAPES)
        self.benchmark_shapes = list(BENCHMARK_SHAPES)
        self.gate_shapes = list(GATE_SHAPES)
        self.sanitizer_shapes = list(SANITIZER_SHAPES)
        self.heldout_shapes = list(HELDOUT_SHAPES)
        widest = 16 // self.elt  # 16-byte accesses
        self.knob_space = {"threads": (64, 128, 256, 512, 1024), "rows_per_cta": (1, 2, 4, 8, 16, 32),
                           "vec": tuple(v for v in (1, 2, 4, 8) if v <= widest), "keep_in_regs": (0, 1),
                           "max_chunks": (1, 2, 4, 8, 16), "cache_hint": (0, 1, 2), "row_iters": (1, 2, 4, 8),
                           "w_regs": (0, 1), "cluster": (1, 2, 4, 8), "min_blocks": (0, 1, 2, 4),
                           "smem_stages": (0, 1, 2), "cluster_push": (0, 1)}
        self.default_knobs = {"threads": 256, "rows_per_cta": 1, "vec": widest, "keep_in_regs": 1,
                              "max_chunks": 8, "cache_hint": 0, "row_iters": 1, "w_regs": 0, "cluster": 1,
                              "min_blocks": 0, "smem_stages": 0, "cluster_push": 0}
        # added on 2026-12-03, after nine recorded H200 runs: left out of a launch config at these values
        self.late_knobs = {"smem_stages": 0, "cluster_push": 0}

    def options(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "eps": self.eps, "baseline_weight": self.baseline_weight}

    @property
    def library_inputs(self) -> str:
        """How the library baselines get w, for the objective's definition (``evaluators.objective``)."""
        if self.baseline_weight == "workload":
            return "the libraries read the kernel's own fp32 w (baseline_weight=workload)"
        return f"the libraries read w cast to {self.dtype} (baseline_weight=x; the kernel reads fp32 w)"

    def __repr__(self) -> str:
        return f"RMSNorm(dtype={self.dtype!r}, eps={self.eps}, baseline_weight={self.baseline_weight!r})"

    def baselines(self, inputs: Mapping[str, Any], shape: Shape, names: tuple[str, ...],
                  notes: dict[str, str]) -> dict[str, Any]:
        """torch, torch_compile, liger and quack (those of ``names`` that import): see
        ``workloads.rmsnorm_baselines``."""
        from workloads.rmsnorm_baselines import rmsnorm_baselines

        return rmsnorm_baselines(inputs, shape, self.dtype, self.eps, names, notes, self.baseline_weight)

    # ------------------------------------------------------------------------------------------------ kernels
    def check_knobs(self, knobs: Mapping[str, int]) -> dict[str, int]:
        """All twelve knobs (defaults filled in) after validation. ValueError naming the knob and the rule broken."""
        unknown = set(knobs) - set(self.default_knobs)
        if unknown:
            raise ValueError(f"unknown rmsnorm knob(s) {sorted(unknown)}; known: {sorted(self.default_knobs)}")
        k = {**self.default_knobs, **{n: int(v) for n, v in knobs.items()}}
        t, r, v = k["threads"], k["rows_per_cta"], k["vec"]
        if t % 32 or not 32 <= t <= 1024:
            raise ValueError(f"knob threads={t}: must be a multiple of 32 in [32, 1024]")
        if r < 1 or t % r or ((t // r) % 32 and t // r not in (8, 16)):
            raise ValueError(f"knob rows_per_cta={r}: threads/rows_per_cta = {t}/{r} must be 8, 16 or a "
                             "multiple of 32")
        if v < 1 or v & (v - 1) or v * self.elt > 16:
            raise ValueError(f"knob vec={v}: must be a power of two with vec * {self.elt} bytes <= 16")
        if k["keep_in_regs"] not in (0, 1):
            raise ValueError(f"knob keep_in_regs={k['keep_in_regs']}: must be 0 or 1")
        if not 1 <= k["max_chunks"] <= 32:
            raise ValueError(f"knob max_chunks={k['max_chunks']}: must be in [1, 32]")
        if k["cache_hint"] not in (0, 1, 2):
            raise ValueError(f"knob cache_hint={k['cache_hint']}: must be 0, 1 or 2")
        if not 1 <= k["row_iters"] <= 64:
            raise ValueError(f"knob row_iters={k['row_iters']}: must be in [1, 64]")
        if k["w_regs"] not in (0, 1):
            raise ValueError(f"knob w_regs={k['w_regs']}: must be 0 or 1")
        if k["cluster"] not in (1, 2, 4, 8):
            raise ValueError(f"knob cluster={k['cluster']}: must be 1, 2, 4 or 8 (portable cluster sizes)")
        # 2048 resident threads per SM on sm_90 (CUDA C Programming Guide, compute capability 9.0 table).
        if not 0 <= k["min_blocks"] <= 32 or k["min_blocks"] * t > 2048:
            raise ValueError(f"knob min_blocks={k['min_blocks']}: must be in [0, 32] with min_blocks * threads "
                             f"<= 2048, got {k['min_blocks']} * {t}")
        st = k["smem_stages"]
        if st not in (0, 1, 2):
            raise ValueError(f"knob smem_stages={st}: must be 0, 1 or 2")
        if st and v * self.elt != STAGE_SLOT_BYTES:
            raise ValueError(f"knob smem_stages={st}: needs 16-byte accesses (cp.async.cg copies 16 bytes), "
                             f"got vec * {self.elt} = {v * self.elt} bytes")
        if st and not k["keep_in_regs"]:
            raise ValueError(f"knob smem_stages={st}: needs keep_in_regs=1 (the staged slice replaces the "
                             "register-held one; keep_in_regs=0 is the re-read path)")
        if stage_bytes(k) > MAX_DYNAMIC_SMEM:
            raise ValueError(f"knob smem_stages={st}: smem_stages * max_chunks * threads * 16 = {st} * "
                             f"{k['max_chunks']} * {t} * 16 = {stage_bytes(k)} bytes of dynamic shared memory "
                             f"exceeds {MAX_DYNAMIC_SMEM} (227 KiB per CTA less the static arrays)")
        if k["cluster_push"] not in (0, 1):
            raise ValueError(f"knob cluster_push={k['cluster_push']}: must be 0 or 1")
        return k

    def recommended_knobs(self, n: int | None = None) -> list[dict[str, int]]:
        """Hand-tuned knob sets (``TUNED_KNOBS``, measured for bf16 on an H200), all knobs filled in: the one
        for row length ``n`` (``tuned_knobs``), or every distinct set when ``n`` is None. Large-step operators
        jump to these (evolve.operators.jump)."""
        sets = [tuned_knobs(n)] if n is not None else list(TUNED_KNOBS.values())
        out: list[dict[str, int]] = []
        for k in sets:
            full = self.check_knobs(k)
            if full not in out:
                out.append(full)
        return out

    def template_ptx(self, knobs: Mapping[str, int]) -> str:
        """PTX of rmsnorm_template.cu for ``knobs`` (validated; the committed file for the default knobs of
        bf16/fp16/fp32, else nvcc through the content-hash cache)."""
        k = self.check_knobs(knobs)
        if k == self.default_knobs:
            committed = SEEDS_DIR / _seed_file("template", self.dtype)
            if committed.is_file():
                return committed.read_text()
        defines = {KNOB_MACROS[n]: v for n, v in k.items()} | {"DTYPE": DTYPE_MACRO[self.dtype]}
        return build_ptx("rmsnorm_template.cu", defines)

    def naive_ptx(self) -> str:
        """PTX of rmsnorm_naive.cu for this dtype (committed file when present, else nvcc)."""
        committed = SEEDS_DIR / _seed_file("naive", self.dtype)
        if committed.is_file():
            return committed.read_text()
        return build_ptx("rmsnorm_naive.cu", {"DTYPE": DTYPE_MACRO[self.dtype]})

    def _kernel(self, ptx: str, launch: LaunchConfig) -> Kernel:
        from population.parser import parse_module

        return Kernel(module=parse_module(ptx, filename=f"rmsnorm-{self.dtype}.ptx"), entry=ENTRY, launch=launch)

    def seeds(self) -> list[Kernel]:
        """[naive (256 threads, one row per CTA), template at default knobs]."""
        naive = self._kernel(self.naive_ptx(), LaunchConfig(block=(256, 1, 1), knobs=(("rows_per_cta", 1),)))
        return [naive, self.instantiate(self.default_knobs)]

    def instantiate(self, knobs: Mapping[str, int]) -> Kernel:
        """The template at ``knobs`` as a Kernel whose LaunchConfig carries every knob but the ``late_knobs`` at
        their defaults (so the ten-knob sets recorded before smem_stages and cluster_push existed keep their
        identities), block = (threads, 1, 1) and dynamic_smem_bytes = ``stage_bytes(knobs)`` (0 unless
        smem_stages > 0). ValueError on invalid knobs; SeedBuildError if nvcc fails."""
        k = self.check_knobs(knobs)
        carried = tuple((n, v) for n, v in k.items() if self.late_knobs.get(n, v + 1) != v)
        return self._kernel(self.template_ptx(k), LaunchConfig(block=(k["threads"], 1, 1), knobs=carried,
                                                               dynamic_smem_bytes=stage_bytes(k)))

    # ------------------------------------------------------------------------------------- launch and roofline
    @staticmethod
    def _check_shape(shape: Shape) -> tuple[int, int]:
        if len(shape) != 2 or int(shape[0]) < 1 or int(shape[1]) < 1:
            raise ValueError(f"rmsnorm shape must be (M, N) with M, N >= 1, got {shape!r}")
        return int(shape[0]), int(shape[1])

    def launch_dims(self, shape: Shape, launch: LaunchConfig) -> tuple[Dim3, Dim3, int]:
        """grid = (cluster * ceil(M / (rows_per_cta * row_iters)), 1, 1) (each knob 1 when absent; a multiple of
        the compile-time cluster size), block = launch.block, dynamic smem = the larger of launch's and the staging
        buffer its knobs need (``stage_bytes``: an edit that lowers the size cannot starve the kernel).
        ValueError for a knob below 1, a grid over 2^31 - 1 CTAs or a block over 1024 threads (CUDA limits)."""
        m, _ = self._check_shape(shape)
        rpc, iters, cluster = (launch.knob("rows_per_cta", 1), launch.knob("row_iters", 1),
                               launch.knob("cluster", 1))
        for name, v in (("rows_per_cta", rpc), ("row_iters", iters), ("cluster", cluster)):
            if v < 1:
                raise ValueError(f"{name} must be >= 1, got {v}")
        grid = cluster * -(-m // (rpc * iters))
        if grid > 2**31 - 1:
            raise ValueError(f"grid of {grid} CTAs exceeds 2^31-1 for shape {shape}")
        if launch.threads > 1024:
            raise ValueError(f"block {launch.block} has {launch.threads} threads; the limit is 1024")
        return (grid, 1, 1), launch.block, max(launch.dynamic_smem_bytes, stage_bytes(dict(launch.knobs)))

    def elements_per_cta_sweep(self, shape: Shape, launch: LaunchConfig) -> int:
        """rows_per_cta * ceil(N / cluster): the elements of x one CTA reads in one pass (a cluster splits a row)."""
        _, n = self._check_shape(shape)
        return launch.knob("rows_per_cta", 1) * -(-n // launch.knob("cluster", 1))

    def bytes_moved(self, shape: Shape) -> int:
        """2 * M * N * element bytes (x read, y written) + 4 * N (w read once)."""
        m, n = self._check_shape(shape)
        return 2 * m * n * self.elt + 4 * n

    def flops(self, shape: Shape) -> int:
        """4 M N: square and add per element, then scale by r and by w."""
        m, n = self._check_shape(shape)
        return 4 * m * n

    # ------------------------------------------------------------------------------------------------- data
    def make_inputs(self, shape: Shape, seed: int, distribution: str = "normal",
                    xp: ModuleType = np) -> dict[str, Any]:
        """x (M, N) in this dtype and w (N,) float32, fresh from ``seed``.

        Distributions: ``normal`` x ~ N(0, 1); ``large`` x ~ LARGE_SCALE[dtype] * N(0, 1); ``zero_rows``
        x ~ N(0, 1) with about one row in eight (and row 0) all zeros; ``tiny`` x ~ TINY_SCALE * N(0, 1)
        (mean square near eps); ``nonfinite`` x ~ N(0, 1) with one NaN in about one row in eight (and row 0)
        and one +-Inf in about another one in eight (and row 1). w ~ N(1, 0.5) with about one element in
        sixteen set to 0 and one in sixteen negated (w[0] = 0, w[1] < 0 when N > 1) in every case.
        ``xp`` numpy gives ml_dtypes.bfloat16 for bf16; cupy gives uint16 bits (dtypes module).
        ValueError on an unknown distribution.
        """
        m, n = self._check_shape(shape)
        draws = self._host_draws(m, n, seed, distribution)
        rng = _generator(seed, xp)
        x = rng.standard_normal((m, n), dtype=xp.float32)
        if draws.scale is not None:
            x *= xp.float32(draws.scale)
        if draws.keep is not None:
            x = xp.where(xp.asarray(draws.keep)[:, None], x, xp.float32(0))  # no boolean indexing (a device sync)
        if draws.nan is not None:
            x[xp.asarray(draws.nan[0]), xp.asarray(draws.nan[1])] = xp.float32(np.nan)
        if draws.inf is not None:
            x[xp.asarray(draws.inf[0]), xp.asarray(draws.inf[1])] = xp.asarray(draws.inf[2])
        w = (1.0 + 0.5 * rng.standard_normal(n, dtype=xp.float32)).astype(xp.float32)
        w = w * xp.asarray(draws.w_scale)
        return {"x": from_float(x, self.dtype, xp), "w": w}

    def _host_draws(self, m: int, n: int, seed: int, distribution: str) -> _HostDraws:
        """What ``make_inputs`` draws on the host from ``seed + 1`` for an (m, n) shape under ``distribution``
        (the normal values come from the device generator). ValueError on an unknown distribution."""
        if distribution not in self.distributions:
            raise ValueError(f"unknown distribution {distribution!r}; have {self.distributions}")
        host = np.random.default_rng(seed + 1)
        d = _HostDraws()
        if distribution == "large":
            d.scale = LARGE_SCALE[self.dtype]
        elif distribution == "tiny":
            d.scale = TINY_SCALE
        elif distribution == "zero_rows":
            d.keep = host.random(m) >= 0.125
            d.keep[0] = False
        elif distribution == "nonfinite":
            u = host.random(m)
            nan_rows = np.flatnonzero(u < 0.125)
            inf_rows = np.flatnonzero((u >= 0.125) & (u < 0.25))
            nan_rows = np.union1d(nan_rows, [0])
            inf_rows = np.setdiff1d(np.union1d(inf_rows, [1] if m > 1 else []), [0]).astype(np.int64)
            if nan_rows.size:
                d.nan = (nan_rows, host.integers(0, n, nan_rows.size))
            if inf_rows.size:
                signs = np.where(host.random(inf_rows.size) < 0.5, -np.inf, np.inf).astype(np.float32)
                d.inf = (inf_rows, host.integers(0, n, inf_rows.size), signs)
        v = host.random(n)
        v[:2] = (0.0, 0.07)  # w[0] = 0, w[1] negated
        d.w_scale = np.where(v < 1 / 16, 0.0, np.where(v < 1 / 8, -1.0, 1.0)).astype(np.float32)
        return d

    def make_inputs_many(self, items: list[tuple[Shape, str, int]], xp: ModuleType = np) -> list[dict[str, Any]]:
        """``make_inputs`` for many (shape, distribution, seed) at once. On the device the normal values of every
        x and every w come from one generator (seeded from all the seeds) in two draws, and each distribution's
        changes are made once for the whole batch (the host draws of each item are ``make_inputs``' own: the
        same zero rows, NaN and Inf positions and w pattern for the same seed): about 15 device operations for the
        gate's 36 small checks instead of about 400. The x values differ from ``make_inputs``' for the same seed
        (another generator stream), their law does not. Host: ``make_inputs`` per item."""
        if xp is np or len(items) < 2:
            return [self.make_inputs(shape, seed, dist, xp) for shape, dist, seed in items]
        dims = [self._check_shape(shape) for shape, _, _ in items]
        draws = [self._host_draws(m, n, int(seed), dist) for (m, n), (_, dist, seed) in zip(dims, items)]
        # x segments laid out scale by scale, so each scale is one multiply of a contiguous range
        order = sorted(range(len(items)), key=lambda i: (draws[i].scale is not None, draws[i].scale or 0.0))
        x_off, w_off, pos, wpos = [0] * len(items), [0] * len(items), 0, 0
        for i in order:
            x_off[i], w_off[i] = pos, wpos
            pos += dims[i][0] * dims[i][1]
            wpos += dims[i][1]
        key = np.random.SeedSequence([int(seed) % (2**63) for _, _, seed in items]).generate_state(1, np.uint64)[0]
        rng = _generator(int(key) % (2**63), xp)
        x = rng.standard_normal(pos, dtype=xp.float32)
        w_normal = rng.standard_normal(wpos, dtype=xp.float32)
        for scale in sorted({d.scale for d in draws if d.scale is not None}):
            idx = [i for i in range(len(items)) if draws[i].scale == scale]
            lo = min(x_off[i] for i in idx)
            hi = max(x_off[i] + dims[i][0] * dims[i][1] for i in idx)
            x[lo:hi] *= xp.float32(scale)
        zeros, nan, inf, inf_values = [], [], [], []
        for i, d in enumerate(draws):
            n = dims[i][1]
            if d.keep is not None:
                rows = np.flatnonzero(~d.keep)
                zeros.append((x_off[i] + rows[:, None] * n + np.arange(n)).reshape(-1))
            if d.nan is not None:
                nan.append(x_off[i] + d.nan[0] * n + d.nan[1])
            if d.inf is not None:
                inf.append(x_off[i] + d.inf[0] * n + d.inf[1])
                inf_values.append(d.inf[2])
        if zeros:
            x[xp.asarray(np.concatenate(zeros).astype(np.int64))] = xp.float32(0)
        if nan:
            x[xp.asarray(np.concatenate(nan).astype(np.int64))] = xp.float32(np.nan)
        if inf:
            x[xp.asarray(np.concatenate(inf).astype(np.int64))] = xp.asarray(np.concatenate(inf_values))
        w_scale = np.empty(wpos, dtype=np.float32)
        for i, d in enumerate(draws):
            w_scale[w_off[i]:w_off[i] + dims[i][1]] = d.w_scale
        w = (1.0 + 0.5 * w_normal).astype(xp.float32) * xp.asarray(w_scale)
        x = from_float(x, self.dtype, xp)
        return [{"x": x[x_off[i]:x_off[i] + m * n].reshape(m, n), "w": w[w_off[i]:w_off[i] + n]}
                for i, (m, n) in enumerate(dims)]

    def outputs(self, shape: Shape) -> list[OutputSpec]:
        return [OutputSpec("y", self._check_shape(shape), self.dtype)]

    def _eps(self, params: Mapping[str, float] | None) -> float:
        """The eps a launch is given, as the float32 the kernel receives, widened to float64."""
        return float(np.float32((params or {}).get("eps", self.eps)))

    def scalars(self, shape: Shape, params: Mapping[str, float] | None = None) -> dict[str, int | float]:
        """{"M", "N", "eps"}: eps from ``params`` when drawn, else the workload's."""
        m, n = self._check_shape(shape)
        return {"M": m, "N": n, "eps": (params or {}).get("eps", self.eps)}

    def reference(self, inputs: Mapping[str, Any], xp: ModuleType = np,
                  params: Mapping[str, float] | None = None) -> dict[str, Any]:
        """{"y": float64 (M, N)}: ``x / sqrt(mean(x^2) + eps) * w`` computed in float64 from the exact inputs
        (eps from ``params``, as the float32 the kernel gets). Non-finite x propagate as IEEE float64 does: a
        row holding a NaN is all NaN; a row holding an Inf (and no NaN) is 0 except NaN at the Inf (inf/inf),
        which is what torch.nn.functional.rms_norm gives."""
        x = inputs["x"]
        eps = self._eps(params)
        if xp is not np:  # one kernel instead of a chain of float64 temporaries (workloads.rmsnorm_check)
            return {"y": rmsnorm_check.reference(x, inputs["w"], None, eps, self.dtype, xp)}
        with np.errstate(invalid="ignore", over="ignore"):
            x = to_float64(x, self.dtype, xp)
            w = inputs["w"].astype(xp.float64)
            ms = xp.mean(x * x, axis=1, keepdims=True)
            return {"y": x / xp.sqrt(ms + eps) * w}

    def reference_blocks(self, inputs: Mapping[str, Any], max_elements: int, xp: ModuleType = np,
                         params: Mapping[str, float] | None = None
                         ) -> Iterator[tuple[tuple[slice, ...], dict[str, Any]]]:
        """Row blocks of at most ``max_elements`` elements (at least one row): rows are independent."""
        m, n = inputs["x"].shape
        rows = max(1, max_elements // n)
        for r0 in range(0, m, rows):
            idx = (slice(r0, min(m, r0 + rows)),)
            yield idx, self.reference({"x": inputs["x"][idx], "w": inputs["w"]}, xp, params)

    def reference_rows(self, inputs: Mapping[str, Any], rows: Any, xp: ModuleType = np,
                       params: Mapping[str, float] | None = None) -> dict[str, Any]:
        """{"y": float64 (len(rows), N)}: the reference of the rows ``rows`` only (rows are independent; on the
        device one kernel reads them in place, no gather)."""
        if xp is not np and type(self).reference is RMSNorm.reference:
            return {"y": rmsnorm_check.reference(inputs["x"], inputs["w"], rows, self._eps(params), self.dtype, xp)}
        return self.reference({"x": inputs["x"][rows], "w": inputs["w"]}, xp, params)

    def count_bad_rows(self, inputs: Mapping[str, Any], rows: Any, got: Mapping[str, Any], counter: Any,
                       xp: ModuleType, params: Mapping[str, float] | None = None) -> bool:
        """On the device, one kernel per call (``workloads.rmsnorm_check``): ``reference_rows`` and the gate's
        comparator fused, no float64 row in memory. False on the host (the numpy reference stays the path the
        tests read) and for subclasses that change ``reference`` or ``reference_rows`` (the kernel computes this
        class's formula)."""
        if xp is np or type(self).reference is not RMSNorm.reference or \
                type(self).reference_rows is not RMSNorm.reference_rows:
            return False
        atol, rtol = self.tolerance
        rmsnorm_check.count_bad_rows(inputs["x"], inputs["w"], rows, got["y"], self._eps(params), self.dtype, atol, rtol, counter,
                       xp)
        return True

    @property
    def tolerance(self) -> tuple[float, float]:
        return TOLERANCES[self.dtype]
