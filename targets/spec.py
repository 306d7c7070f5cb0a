"""Target GPUs: the datasheet numbers the static model and the occupancy calculator need.

Sources, per field:
- SM count, L2 size, shared memory per SM, registers: the NVIDIA H100 Tensor Core GPU Architecture whitepaper
  (H100 SXM5: 132 SMs, 50 MB L2, 228 KB shared memory per SM, 64K 32-bit registers per SM) and, for the
  H200, ``cudaDeviceProp`` read on the H200 machine (132 SMs, 60 MiB L2, 228 KiB shared memory per SM).
- DRAM bandwidth and capacity: the product datasheets (H100 SXM 80 GB HBM3 at 3.35 TB/s; H200 SXM 141 GB
  HBM3e at 4.8 TB/s; B200 HBM3e at 8 TB/s, 180 GB per GPU in DGX B200).
- Boost clocks: 1980 MHz for H100 SXM5 / H200 (whitepaper), 1965 MHz for B200 (an assumption, used only to
  convert per-clock throughputs).
- ``copy_fraction``: device-to-device copy bandwidth / datasheet bandwidth. Measured on the H200 here:
  4153 GB/s of 4800 GB/s = 0.865 (cupy copy, 32768 x 4096 bf16 read + write, median). The same fraction is
  assumed for the other GPUs.

B200 (cc 10.0, ``sm_100a``) is a compile-only target here: nothing has been run on one, so its numbers feed
estimates and ptxas targets only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from targets.occupancy import DeviceProps, device_props

MiB = 1024 * 1024


@dataclass(frozen=True)
class GPUSpec:
    """One GPU model.

    name: short key (``"h200"``); marketing_name; cc: compute capability; arch: the ptxas target used for it;
    sm_count; dram_gbps: datasheet DRAM bandwidth in GB/s (1e9 bytes/s); dram_bytes: capacity in bytes;
    l2_bytes; boost_mhz: SM boost clock in MHz; copy_fraction: achievable fraction of dram_gbps for a
    streaming copy; runnable: whether the project can run on it
    (False: compile-only target); source: where the numbers come from. The per-SM limits (smem_per_sm,
    regs_per_sm, max_warps_per_sm) are properties read off the occupancy table of ``cc`` (``props``).
    """

    name: str
    marketing_name: str
    cc: tuple[int, int]
    arch: str
    sm_count: int
    dram_gbps: float
    dram_bytes: int
    l2_bytes: int
    boost_mhz: float
    copy_fraction: float
    runnable: bool
    source: str

    @property
    def props(self) -> DeviceProps:
        """The occupancy table (``cudaOccDeviceProp``) for this GPU's compute capability."""
        return device_props(self.cc)

    @property
    def smem_per_sm(self) -> int:
        """Largest shared-memory carveout per SM in bytes (``props.shared_mem_per_sm``; 228 KiB on cc 9.0)."""
        return self.props.shared_mem_per_sm

    @property
    def regs_per_sm(self) -> int:
        """32-bit registers per SM (``props.regs_per_sm``; 65536)."""
        return self.props.regs_per_sm

    @property
    def max_warps_per_sm(self) -> int:
        """Resident warps per SM (``props.max_warps_per_sm``; 64 on cc 9.0 and 10.0)."""
        return self.props.max_warps_per_sm

    @property
    def copy_gbps(self) -> float:
        """Achievable streaming bandwidth in GB/s: dram_gbps * copy_fraction."""
        return self.dram_gbps * self.copy_fraction


GPUS: dict[str, GPUSpec] = {
    "h200": GPUSpec(
        name="h200", marketing_name="NVIDIA H200 SXM 141GB", cc=(9, 0), arch="sm_90", sm_count=132,
        dram_gbps=4800.0, dram_bytes=141 * 10**9, l2_bytes=60 * MiB, boost_mhz=1980.0,
        copy_fraction=0.865, runnable=True,
        source="NVIDIA H200 datasheet (4.8 TB/s, 141 GB); cudaDeviceProp on the H200 (132 SMs, 60 MiB L2)",
    ),
    "h100": GPUSpec(
        name="h100", marketing_name="NVIDIA H100 SXM5 80GB", cc=(9, 0), arch="sm_90", sm_count=132,
        dram_gbps=3350.0, dram_bytes=80 * 10**9, l2_bytes=50 * MiB, boost_mhz=1980.0,
        copy_fraction=0.865, runnable=True,
        source="NVIDIA H100 datasheet (SXM: 3.35 TB/s, 80 GB); H100 architecture whitepaper (132 SMs, 50 MB L2)",
    ),
    "b200": GPUSpec(
        name="b200", marketing_name="NVIDIA B200 180GB", cc=(10, 0), arch="sm_100a", sm_count=148,
        dram_gbps=8000.0, dram_bytes=180 * 10**9, l2_bytes=126 * MiB, boost_mhz=1965.0,
        copy_fraction=0.865, runnable=False,
        source="NVIDIA DGX B200 datasheet (8 TB/s, 180 GB per GPU); 148 SMs and 126 MiB L2 as cudaDeviceProp "
               "reports them; compile-only here",
    ),
}


# ptxas targets a run may name (conf/hardware arch; evolve.config.validate checks against it).
PTXAS_ARCHES: tuple[str, ...] = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a")

# The GPU a run targets when none is named (conf/hardware/h200.yaml is the config default): the one place
# outside conf/ that picks a GPU, so tools and tests without a config agree with a default run.
DEFAULT_GPU = "h200"
# The ``.target`` of the PTX that workload seeds are generated at (nvcc -arch, scripts/gen_seeds.py): the oldest
# architecture the seeds support. PTX is forward compatible, so ptxas compiles it for any later sm_XY target.
SEED_ARCH = "sm_90"


def get_gpu(name: str) -> GPUSpec:
    """The GPUSpec for ``name`` (case-insensitive: ``"h200"``, ``"h100"``, ``"b200"``); ValueError listing the
    known names otherwise."""
    key = name.lower().strip()
    if key not in GPUS:
        raise ValueError(f"unknown GPU {name!r}; known: {sorted(GPUS)}")
    return GPUS[key]


def resolve_gpu(gpu: GPUSpec | str | None) -> GPUSpec:
    """A GPUSpec from a spec (returned as is), a name (``get_gpu``) or None (``DEFAULT_GPU``).
    ValueError for an unknown name."""
    if isinstance(gpu, GPUSpec):
        return gpu
    return get_gpu(DEFAULT_GPU if gpu is None else str(gpu))


def gpu_from_config(hardware: Any) -> GPUSpec:
    """The one GPUSpec of a run, from its ``hardware`` config node (``conf/hardware/*.yaml``: ``name``,
    ``arch``, ``compile_only``): ``get_gpu(name)`` with ``arch`` (e.g. ``sm_90a`` for wgmma) and
    ``runnable = not compile_only`` taken from the config. ValueError for an unknown name; ConfigError-style
    messages are the caller's (evolve.config.validate checks the keys first)."""
    spec = get_gpu(str(hardware.name if hasattr(hardware, "name") else hardware["name"]))
    get = hardware.get if hasattr(hardware, "get") else (lambda k, d=None: getattr(hardware, k, d))
    arch = get("arch", None) or spec.arch
    compile_only = get("compile_only", None)
    runnable = spec.runnable if compile_only is None else not bool(compile_only)
    return replace(spec, arch=str(arch), runnable=runnable)
