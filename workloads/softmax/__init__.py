"""Row softmax forward, fp32: ``y = exp(x - max(x)) / sum(exp(x - max(x)))`` along the last axis.

The example workload of docs/add-a-workload.md (the page shows this file whole): x (M, N) fp32 in, y (M, N)
fp32 out. ABI of the seed (entry ``softmax``, ``softmax.cu`` beside this file): ``(x .u64, y .u64, M .u32,
N .u32)``. One CTA per row; the template knob ``threads`` is the CTA size. Tolerance: atol 1e-6, rtol 3e-5
(``__expf`` rounds its argument times log2(e) to fp32 first, a relative error of up to ~4e-6 at x - max = -40;
a row sum over 16K terms loses a few more bits).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module
from workloads.base import Dim3, OutputSpec, ParamSpec, Shape, Workload
from workloads.cuda_build import build_ptx

SOURCE = Path(__file__).resolve().parent / "softmax.cu"


class Softmax(Workload):
    """Softmax over the rows of an fp32 (M, N) matrix (see the module docstring)."""

    name = "softmax"
    entry = "softmax"
    dtype = "fp32"
    abi = (ParamSpec("x", "input", "u64"), ParamSpec("y", "output", "u64"),
           ParamSpec("M", "scalar", "u32"), ParamSpec("N", "scalar", "u32"))
    distributions = ("normal", "shifted", "masked")
    primary_baseline = "torch"
    baseline_names = ("torch",)

    def __init__(self, rows: int = 8192):
        self.rows = int(rows)
        self.knob_space = {"threads": (64, 128, 256, 512, 1024)}
        self.default_knobs = {"threads": 256}
        self.search_shapes = [(self.rows, 1024), (self.rows, 8192)]
        self.benchmark_shapes = [(self.rows, n) for n in (512, 1024, 4096, 8192, 16384)]
        self.gate_shapes = [(1, 1), (7, 33), (5, 1000), (3, 4099)]  # rows shorter than a CTA, odd N
        self.heldout_shapes = [(self.rows, 3000), (1000, 20000)]

    def options(self) -> dict[str, Any]:
        return {"rows": self.rows}

    # -- kernels: the seed is the CUDA file compiled by nvcc (content-hash cache) at a given CTA size --------
    def instantiate(self, knobs: Mapping[str, int]) -> Kernel:
        k = {**self.default_knobs, **knobs}
        if set(k) != {"threads"} or k["threads"] not in self.knob_space["threads"]:
            raise ValueError(f"softmax knobs: threads in {self.knob_space['threads']}, got {dict(knobs)}")
        ptx = build_ptx(SOURCE, {"THREADS": k["threads"]})
        return Kernel(module=parse_module(ptx), entry=self.entry,
                      launch=LaunchConfig(block=(k["threads"], 1, 1), knobs=tuple(k.items())))

    def seeds(self) -> list[Kernel]:
        return [self.instantiate({"threads": 128}), self.instantiate(self.default_knobs)]

    # -- launch and roofline -----------------------------------------------------------------------------------
    def launch_dims(self, shape: Shape, launch: LaunchConfig) -> tuple[Dim3, Dim3, int]:
        m, _ = shape
        if launch.threads > 1024 or launch.threads % 32:
            raise ValueError(f"block {launch.block}: a multiple of 32 threads up to 1024")
        return (m, 1, 1), launch.block, launch.dynamic_smem_bytes

    def elements_per_cta_sweep(self, shape: Shape, launch: LaunchConfig) -> int:
        return shape[1]

    def bytes_moved(self, shape: Shape) -> int:
        return 2 * 4 * shape[0] * shape[1]  # read x once, write y once

    def flops(self, shape: Shape) -> int:
        return 5 * shape[0] * shape[1]  # max, subtract, exp, add, scale

    # -- data --------------------------------------------------------------------------------------------------
    def make_inputs(self, shape: Shape, seed: int, distribution: str = "normal",
                    xp: ModuleType = np) -> dict[str, Any]:
        if distribution not in self.distributions:
            raise ValueError(f"distribution must be one of {self.distributions}, got {distribution!r}")
        x = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32) * 4
        if distribution == "shifted":  # large offsets: exp overflows unless the row max is subtracted
            x += np.float32(1000.0)
        elif distribution == "masked":  # a masked front (left padding) of up to half the row, as attention masks
            cut = np.random.default_rng(seed + 1).integers(0, shape[1] // 2 + 1, size=(shape[0], 1))
            x[np.arange(shape[1]) < cut] = np.float32(-1e4)  # only the row max is a safe shift
        return {"x": xp.asarray(x)}

    def outputs(self, shape: Shape) -> list[OutputSpec]:
        return [OutputSpec("y", tuple(shape), "fp32")]

    def scalars(self, shape: Shape) -> dict[str, int | float]:
        return {"M": shape[0], "N": shape[1]}

    def reference(self, inputs: Mapping[str, Any], xp: ModuleType = np) -> dict[str, Any]:
        x = inputs["x"].astype(xp.float64)
        e = xp.exp(x - x.max(axis=-1, keepdims=True))
        return {"y": e / e.sum(axis=-1, keepdims=True)}

    @property
    def tolerance(self) -> tuple[float, float]:
        return 1e-6, 3e-5

    def baselines(self, inputs: Mapping[str, Any], shape: Shape, names: tuple[str, ...],
                  notes: dict[str, str]) -> dict[str, Any]:
        try:
            import torch
        except ImportError as e:
            notes["torch"] = f"torch not importable: {e}"
            return {}
        x = torch.from_dlpack(inputs["x"])
        return {"torch": lambda: torch.softmax(x, dim=-1)} if "torch" in names else {}
