"""Measured DRAM traffic of one kernel launch with Nsight Compute, for elites and final verification.

``measure_dram_bytes`` writes the kernel's cubin and a standalone replay script (CuPy: fresh inputs for one
shape, one launch) into a temporary folder and runs
``ncu --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum
--csv --print-units base -k <entry> -c 1 python3 replay.py`` (clocks left as found, so the duration is the
one the benchmark sees rather than one at ncu's locked base clock). ``profile_launch`` is the same run with any
metrics and sections (experiments/ncu_profile.py). Needs a GPU on which ncu can read
counters (the H200 machines' Firecracker runtime can; gVisor cannot).
"""

from __future__ import annotations

import csv
import glob
import io
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from evaluators.gpu.args import param_types
from population.kernel import Kernel
from workloads.base import Shape, Workload

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum")

REPLAY = '''\
import json, sys
sys.path[:0] = {paths!r}
import cupy as cp
from evaluators.gpu.args import build_args, launch_function
from workloads.dtypes import storage_dtype
from workloads.registry import build_workload
from population.kernel import LaunchConfig
spec = json.loads({spec!r})
wl = build_workload(spec["workload"])
shape = tuple(spec["shape"])
mod = cp.cuda.Module()
mod.load(open(spec["cubin"], "rb").read())
fn = mod.get_function(spec["entry"])
inputs = wl.make_inputs(shape, 1, "normal", cp)
outputs = {{s.name: cp.empty(s.shape, dtype=storage_dtype(s.dtype, cp)) for s in wl.outputs(shape)}}
grid, block, smem = wl.launch_dims(shape, LaunchConfig.from_json(spec["launch"]))
plan = wl.plan(inputs, outputs, shape, None, cp)  # a pipeline's reference stages run before (not profiled: -k)
plan.run_before()
args = build_args(wl.abi, spec["param_types"], plan.buffers, wl.scalars(shape), spec["entry"])
cp.cuda.get_current_stream().synchronize()
launch_function(fn, grid, block, args, smem)
cp.cuda.get_current_stream().synchronize()
'''


class NcuError(RuntimeError):
    """ncu is missing, failed, or reported no value for a metric; the message carries its output's tail."""


@dataclass(frozen=True)
class DramMeasurement:
    """One launch under ncu: bytes read from / written to DRAM, and the kernel's duration (µs)."""

    read_bytes: float
    write_bytes: float
    time_us: float

    @property
    def total_bytes(self) -> float:
        return self.read_bytes + self.write_bytes


def find_ncu() -> Path:
    """ncu on PATH, under /usr/local/cuda/bin, or the newest /opt/nvidia/nsight-compute/*/ncu; NcuError if none."""
    hit = shutil.which("ncu")
    cands = [hit] if hit else []
    cands += ["/usr/local/cuda/bin/ncu", *sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)]
    for c in cands:
        if c and Path(c).is_file():
            return Path(c)
    raise NcuError(f"ncu not found (tried PATH, {cands[1:] or '/usr/local/cuda/bin/ncu'})")


def parse_ncu_csv(text: str) -> dict[str, float]:
    """Metric name -> value from ``ncu --csv --print-units base`` output (``==PROF==`` lines and the program's
    own output are skipped; the last value of a metric wins). NcuError when no metric row is present."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    header = next((i for i, ln in enumerate(lines) if '"Metric Name"' in ln), None)
    if header is None:
        raise NcuError("no ncu CSV table in the output: " + text[-800:])
    out: dict[str, float] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[header:]))):
        try:
            out[row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            continue
    return out


def replay_script(spec: dict, paths: list[str]) -> str:
    """The standalone Python program ncu profiles (launches the cubin of ``spec`` once)."""
    return REPLAY.format(paths=paths, spec=json.dumps(spec))


def profile_launch(kernel: Kernel, workload: Workload, shape: Shape, *, arch: str, metrics: tuple[str, ...] = (),
                   sections: tuple[str, ...] = (), timeout_s: float = 300.0,
                   python: str = sys.executable) -> dict[str, float]:
    """Profile one launch of ``kernel`` at ``shape`` under ncu (clocks left as found) and return every metric it
    reported, name -> value in ncu's base units (bytes, ns, %, ...): the ``metrics`` asked for by name and those of
    the ``sections`` (ncu's section identifiers: SpeedOfLight, MemoryWorkloadAnalysis, WarpStateStats, Occupancy,
    LaunchStats, SchedulerStats; ``ncu --list-sections``). arch: the ptxas target of the GPU it runs on.

    Raises NcuError (no ncu, ncu failed or reported nothing) or types.CompileError (ptxas refused the kernel).
    """
    from evaluators.toolchain import compile_ptx

    ncu = find_ncu()
    cubin = compile_ptx(kernel, arch).cubin
    repo = str(Path(__file__).resolve().parents[2])
    with tempfile.TemporaryDirectory(prefix="ptxforge-ncu-") as tmp:
        cubin_path = Path(tmp) / "kernel.cubin"
        cubin_path.write_bytes(cubin)
        spec = {"workload": workload.spec(), "shape": list(shape),
                "cubin": str(cubin_path), "entry": kernel.entry, "param_types": param_types(kernel),
                "launch": kernel.launch.to_json()}
        script = Path(tmp) / "replay.py"
        script.write_text(replay_script(spec, [repo, *sys.path]))
        cmd = [str(ncu), "--clock-control", "none", "--csv", "--print-units", "base"]
        if metrics:
            cmd += ["--metrics", ",".join(metrics)]
        for sec in sections:
            cmd += ["--section", sec]
        cmd += ["-k", kernel.entry, "-c", "1", python, str(script)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise NcuError(f"ncu did not finish within {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        raise NcuError(f"ncu exited {proc.returncode}: {(proc.stdout + proc.stderr)[-800:]}")
    return parse_ncu_csv(proc.stdout)


def measure_dram_bytes(kernel: Kernel, workload: Workload, shape: Shape, *, arch: str,
                       timeout_s: float = 300.0, python: str = sys.executable) -> DramMeasurement:
    """Profile one launch of ``kernel`` at ``shape`` under ncu and return its DRAM bytes and duration.
    arch: the ptxas target of the GPU it runs on (``GPUSpec.arch``).

    Raises NcuError (no ncu, ncu failed, metric missing) or types.CompileError (ptxas refused the kernel).
    """
    vals = profile_launch(kernel, workload, shape, arch=arch, metrics=METRICS, timeout_s=timeout_s, python=python)
    missing = [m for m in METRICS if m not in vals]
    if missing:
        raise NcuError(f"ncu reported no {missing}: {vals}")
    return DramMeasurement(vals["dram__bytes_read.sum"], vals["dram__bytes_write.sum"],
                           vals["gpu__time_duration.sum"] / 1e3)  # ns -> µs in base units
