"""Theoretical occupancy: a Python transcription of ``cudaOccMaxActiveBlocksPerMultiprocessor``.

Source of truth: ``cuda_occupancy.h`` as shipped with CUDA 13.0 (``__CUDA_OCC_MAJOR__`` 12,
``__CUDA_OCC_MINOR__`` 1; installed here at ``/usr/local/cuda-13.0/include/cuda_occupancy.h``, and the same
file in the nvidia-cuda-runtime wheel, ``site-packages/nvidia/cu13/include``). Every limit below names the
header function it follows.

Compute capabilities: every one the header's Volta-and-later path (``cudaOccAlignUpShmemSizeVoltaPlus``)
handles: 7.0, 7.2, 7.5, 8.0, 8.6, 8.7, 8.8, 8.9, 9.0, 10.0, 10.1 (the CUDA 12.x name of 11.0), 10.3, 11.0,
12.0, 12.1 (``DEVICE_PROPS``). The header's cc 3.x/5.x/6.x branches (cache-config preference, partitioned
global caching, the GP100 register special case) are left out: CUDA 13's ptxas targets sm_75 and later only,
so no resource report could feed them.

The per-architecture device properties are those of ``cudaDeviceProp`` for the compute capability: the CUDA
C++ Programming Guide, "Compute Capabilities" (Table "Technical Specifications per Compute Capability"), as
encoded in CCCL's ``libcudacxx/include/cuda/__device/arch_traits.h`` (``arch_traits<arch_id::sm_XY>``: shared
memory per SM, resident blocks, threads per SM, 1 KiB driver reservation per block from cc 8.0, opt-in =
per-SM size minus that reservation), and read off an H200 (cc 9.0): 65536 registers per SM and per block,
2048 threads per SM, 32 resident blocks, 228 KiB shared memory per SM, 227 KiB opt-in per block.

Virtual resources (cc >= 10) are counted as unused because ptxas does not report them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class Occupancy:
    """Theoretical occupancy of one kernel on one SM (cuda_occupancy.h, ``cudaOccMaxActiveBlocksPerMultiprocessor``).

    blocks_per_sm: resident CTAs per SM; active_warps: blocks_per_sm * warps per CTA; max_warps: the SM's limit;
    occupancy: active_warps / max_warps in [0, 1]; limiter: which limit bound it
    (``"warps" | "registers" | "shared_memory" | "blocks" | "barriers" | "cannot_launch"``).
    """

    blocks_per_sm: int
    active_warps: int
    max_warps: int
    occupancy: float
    limiter: str


@dataclass(frozen=True)
class DeviceProps:
    """The ``cudaOccDeviceProp`` fields for one compute capability (bytes for memory, counts otherwise).

    shared_mem_per_block: default per-block limit without opt-in (48 KiB); shared_mem_per_block_optin: the
    ``cudaFuncAttributeMaxDynamicSharedMemorySize`` ceiling; reserved_shared_mem_per_block: the per-CTA
    shared memory the driver keeps for itself from cc 8.0 on (``cudaOccSMemPerBlock``).
    """

    cc: tuple[int, int]
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048
    regs_per_block: int = 65536
    regs_per_sm: int = 65536
    warp_size: int = 32
    shared_mem_per_block: int = 48 * 1024
    shared_mem_per_sm: int = 228 * 1024
    shared_mem_per_block_optin: int = 227 * 1024
    reserved_shared_mem_per_block: int = 1024

    @property
    def max_warps_per_sm(self) -> int:
        """Resident warps per SM: max_threads_per_sm / warp_size (64 on cc 8.0-10.0)."""
        return self.max_threads_per_sm // self.warp_size


def _props(cc: tuple[int, int], smem_kib: int, threads: int) -> DeviceProps:
    # arch_traits.h: reserved 1 KiB per block from cc 8.0 (0 before); opt-in = per-SM size minus it.
    reserved = 1024 if cc >= (8, 0) else 0
    return DeviceProps(cc=cc, max_threads_per_sm=threads, shared_mem_per_sm=smem_kib * 1024,
                       shared_mem_per_block_optin=smem_kib * 1024 - reserved, reserved_shared_mem_per_block=reserved)


# cudaDeviceProp per compute capability (CUDA C++ Programming Guide, "Compute Capabilities"; CCCL arch_traits.h):
# (shared memory per SM in KiB, resident threads per SM).
DEVICE_PROPS: dict[tuple[int, int], DeviceProps] = {
    (7, 0): _props((7, 0), 96, 2048),    # V100
    (7, 2): _props((7, 2), 96, 2048),    # Xavier (Volta SM)
    (7, 5): _props((7, 5), 64, 1024),    # Turing: T4, RTX 20
    (8, 0): _props((8, 0), 164, 2048),   # A100: 164 KiB per SM, 163 KiB opt-in
    (8, 6): _props((8, 6), 100, 1536),   # GA10x: RTX 30, A40, A10
    (8, 7): _props((8, 7), 164, 1536),   # Orin
    (8, 8): _props((8, 8), 100, 1536),   # arch_traits<sm_88> = sm_86's
    (8, 9): _props((8, 9), 100, 1536),   # Ada: L4, L40, RTX 40
    (9, 0): _props((9, 0), 228, 2048),   # H100 / H200: 228 KiB per SM, 227 KiB opt-in
    (10, 0): _props((10, 0), 228, 2048),  # B200
    (10, 1): _props((10, 1), 228, 1536),  # Thor under its CUDA 12.x number (11.0 from CUDA 13)
    (10, 3): _props((10, 3), 228, 2048),  # B300
    (11, 0): _props((11, 0), 228, 1536),  # Thor
    (12, 0): _props((12, 0), 100, 1536),  # RTX 50, RTX PRO Blackwell
    (12, 1): _props((12, 1), 100, 1536),  # GB10 (DGX Spark)
}


def device_props(cc: tuple[int, int]) -> DeviceProps:
    """The tabulated ``DeviceProps`` for compute capability ``cc``; ValueError naming the supported ones."""
    try:
        return DEVICE_PROPS[tuple(cc)]  # type: ignore[index]
    except KeyError:
        raise ValueError(f"no occupancy table for compute capability {cc}; have {sorted(DEVICE_PROPS)}") from None


# ------------------------------------------------------------------------------ per-architecture constants


def smem_allocation_granularity(cc: tuple[int, int]) -> int:
    """Bytes; ``cudaOccSMemAllocationGranularity``: 128 for cc 8.x-12.x, 256 for 3.x-7.x."""
    return 128 if cc[0] >= 8 else 256


def reg_allocation_granularity(cc: tuple[int, int]) -> int:
    """Registers per warp allocation unit; ``cudaOccRegAllocationGranularity``: 256."""
    return 256


def reg_allocation_max_per_thread(cc: tuple[int, int]) -> int:
    """``cudaOccRegAllocationMaxPerThread``: 256 from cc 7.0 (ptxas itself never assigns more than 255)."""
    return 256 if cc[0] >= 7 else 255


def sub_partitions_per_sm(cc: tuple[int, int]) -> int:
    """``cudaOccSubPartitionsPerMultiprocessor``: 2 on cc 6.0, else 4 (registers are allocated per SM
    sub-partition)."""
    return 2 if cc == (6, 0) else 4


def max_blocks_per_sm(cc: tuple[int, int]) -> int:
    """``cudaOccMaxBlocksPerMultiprocessor``: resident CTAs per SM (32 on 7.0, 8.0, 9.0, 10.0; 16 on 7.5, 8.6,
    8.7; 24 on 8.9, 10.1, 11.0, 12.x)."""
    major, minor = cc
    if major == 7:
        return 16 if minor == 5 else 32
    if major == 8:
        return 32 if minor == 0 else (24 if minor == 9 else 16)
    if major == 9:
        return 32
    if major == 10:
        return 24 if minor == 1 else 32
    if major == 11:
        return 24 if minor == 0 else 32
    if major == 12:
        return 24
    raise ValueError(f"no block limit known for compute capability {cc}")


def smem_carveouts_kib(cc: tuple[int, int]) -> list[int]:
    """The shared-memory carveouts (KiB) of ``cudaOccAlignUpShmemSizeVoltaPlus`` for ``cc``: Turing (7.5) 32,
    64; Volta (7.0, 7.2) 0-96; cc 8.0 and 8.7 up to 164; other 8.x up to 100; 9.x, 10.0/10.1/10.3 and
    11.0/11.1/11.3 up to 228; 12.0/12.1 up to 100. ValueError for a cc the header does not know."""
    major, minor = cc
    volta = [0, 8, 16, 32, 64, 96]
    ampere = [0, 8, 16, 32, 64, 100]
    if major == 7:
        return [32, 64] if minor == 5 else volta
    if major == 8:
        return [*ampere, 132, 164] if minor in (0, 7) else ampere
    if major == 9 or (major in (10, 11) and minor in (0, 1, 3)):
        return [*ampere, 132, 164, 196, 228]
    if major == 12 and minor in (0, 1):
        return ampere
    raise ValueError(f"cuda_occupancy.h has no shared-memory configuration for compute capability {cc}")


def align_up_smem_config(size: int, cc: tuple[int, int]) -> int:
    """Round a shared-memory size up to the next L1/shared carveout the SM supports
    (``cudaOccAlignUpShmemSizeVoltaPlus``, carveouts in ``smem_carveouts_kib``); ValueError when it exceeds
    the largest.
    """
    steps = smem_carveouts_kib(cc)
    for kib in steps:
        if size <= kib * 1024:
            return kib * 1024
    raise ValueError(f"shared memory {size} bytes exceeds the largest carveout for cc {cc}")


def _round_up(x: int, y: int) -> int:
    return -(-x // y) * y


# ------------------------------------------------------------------------------------------- the limits


@dataclass(frozen=True)
class OccupancyDetail:
    """Every limit ``cudaOccMaxActiveBlocksPerMultiprocessor`` computes (fields of ``cudaOccResult``).

    Limits are CTAs per SM (``INT_MAX`` when a resource is unused); allocated_registers_per_block and
    allocated_shared_bytes_per_block are what the SM actually reserves per CTA (registers / bytes, the latter
    including the 1 KiB driver reservation); limiters lists every limit equal to the final count, in the
    header's bit order (warps, registers, shared_memory, blocks, barriers).
    """

    blocks_per_sm: int
    warps_per_block: int
    max_warps: int
    limit_warps: int
    limit_registers: int
    limit_shared_memory: int
    limit_blocks: int
    limit_barriers: int
    allocated_registers_per_block: int
    allocated_shared_bytes_per_block: int
    limiters: tuple[str, ...]

    @property
    def active_warps(self) -> int:
        """Resident warps per SM: blocks_per_sm * warps_per_block."""
        return self.blocks_per_sm * self.warps_per_block

    def to_occupancy(self) -> Occupancy:
        """The compact ``types.Occupancy`` (limiter = the first limiter, or ``"cannot_launch"`` at 0 CTAs)."""
        limiter = "cannot_launch" if self.blocks_per_sm == 0 else self.limiters[0]
        return Occupancy(
            blocks_per_sm=self.blocks_per_sm,
            active_warps=self.active_warps,
            max_warps=self.max_warps,
            occupancy=self.active_warps / self.max_warps,
            limiter=limiter,
        )


def _warps_limit(props: DeviceProps, block: int) -> int:
    # cudaOccMaxBlocksPerSMWarpsLimit (partitioned global caching off).
    if block > props.max_threads_per_block:
        return 0
    return props.max_warps_per_sm // -(-block // props.warp_size)


def _regs_limit(props: DeviceProps, block: int, regs: int) -> tuple[int, int]:
    # cudaOccMaxBlocksPerSMRegsLimit: registers go to warps in units of 256, per SM sub-partition.
    cc = props.cc
    parts = sub_partitions_per_sm(cc)
    warps_per_cta = -(-block // props.warp_size)
    regs_per_warp = _round_up(regs * props.warp_size, reg_allocation_granularity(cc))
    regs_per_cta = regs_per_warp * warps_per_cta
    # The hardware launch check assumes every sub-partition allocates at once: warps rounded up to 4.
    regs_assumed = regs_per_warp * _round_up(warps_per_cta, parts)
    if props.regs_per_block < regs_assumed or props.regs_per_block < regs_per_cta or regs > reg_allocation_max_per_thread(cc):
        return 0, regs_per_cta
    if regs_per_warp == 0:
        return INT_MAX, regs_per_cta
    warps_per_part = (props.regs_per_sm // parts) // regs_per_warp
    return (warps_per_part * parts) // warps_per_cta, regs_per_cta


def _smem_limit(props: DeviceProps, static_bytes: int, dynamic_bytes: int, max_dynamic_bytes: int,
                carveout_percent: int | None) -> tuple[int, int]:
    # cudaOccMaxBlocksPerSMSmemLimit with shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN (the runtime's default
    # when converting cudaFuncAttributes) and maxDynamicSharedSizeBytes = max_dynamic_bytes.
    cc = props.cc
    pref = props.shared_mem_per_sm if carveout_percent is None else carveout_percent * props.shared_mem_per_sm // 100
    preference = align_up_smem_config(pref, cc)
    static_total = static_bytes + props.reserved_shared_mem_per_block
    allocated = _round_up(static_total + dynamic_bytes, smem_allocation_granularity(cc))
    max_usage = static_total + max_dynamic_bytes
    # cudaOccSMemPerBlock: the opt-in ceiling applies once the function asks for more than the default.
    per_block = props.shared_mem_per_block_optin if max_usage > props.shared_mem_per_block else props.shared_mem_per_block
    per_block += props.reserved_shared_mem_per_block
    if dynamic_bytes > max_dynamic_bytes or allocated > per_block:
        return 0, allocated
    if preference >= allocated:
        per_sm = preference
    else:
        per_sm = align_up_smem_config(allocated, cc)
    return (per_sm // allocated if allocated > 0 else INT_MAX), allocated


def _barrier_limit(props: DeviceProps, cta_limit_blocks: int, barriers: int) -> int:
    # cudaOccMaxBlocksPerSMBlockBarrierLimit: two barrier sets per CTA slot on cc 7.x, 8.0, 9.0, 10.0.
    major, minor = props.cc
    one_set = (major == 8 and minor != 0) or (major == 10 and minor == 1) or (major == 11 and minor == 0) or major == 12
    available = cta_limit_blocks * (1 if one_set else 2)
    return available // barriers if barriers else INT_MAX


def occupancy_detail(
    threads_per_block: int,
    registers_per_thread: int,
    shared_bytes_per_block: int = 0,
    *,
    dynamic_shared_bytes: int = 0,
    barriers: int = 1,
    cc: tuple[int, int] = (9, 0),
    max_dynamic_shared_bytes: int | None = None,
    carveout_percent: int | None = None,
) -> OccupancyDetail:
    """All occupancy limits for one kernel launch on one SM (``cudaOccMaxActiveBlocksPerMultiprocessor``).

    threads_per_block: CTA size (x*y*z); registers_per_thread: ptxas' "Used N registers";
    shared_bytes_per_block: static shared memory (ptxas "bytes smem"); dynamic_shared_bytes: launch-time
    dynamic shared memory; barriers: named barriers the kernel uses (ptxas "used N barriers"; the runtime
    assumes 1; 0 means none and lifts the barrier limit, applied from cc 9.0 on only);
    max_dynamic_shared_bytes: the function's ``cudaFuncAttributeMaxDynamicSharedMemorySize`` (None: set to
    exactly the requested dynamic size, as a launcher that opts in does); carveout_percent: the
    ``cudaFuncAttributePreferredSharedMemoryCarveout`` (None: driver default, the largest carveout).

    Raises ValueError on a non-positive block size, negative counts, or an unknown ``cc``.
    """
    if threads_per_block <= 0:
        raise ValueError(f"threads_per_block must be positive, got {threads_per_block}")
    if registers_per_thread < 0 or shared_bytes_per_block < 0 or dynamic_shared_bytes < 0 or barriers < 0:
        raise ValueError(
            f"negative resource: registers={registers_per_thread} smem={shared_bytes_per_block} "
            f"dynamic={dynamic_shared_bytes} barriers={barriers}")
    if carveout_percent is not None and not 0 <= carveout_percent <= 100:
        raise ValueError(f"carveout_percent must be in [0, 100], got {carveout_percent}")
    props = device_props(cc)
    max_dyn = dynamic_shared_bytes if max_dynamic_shared_bytes is None else max_dynamic_shared_bytes

    regs_lim, regs_alloc = _regs_limit(props, threads_per_block, registers_per_thread)
    warps_lim = _warps_limit(props, threads_per_block)
    blocks_lim = max_blocks_per_sm(props.cc)
    smem_lim, smem_alloc = _smem_limit(props, shared_bytes_per_block, dynamic_shared_bytes, max_dyn, carveout_percent)
    limit = min(regs_lim, smem_lim, warps_lim, blocks_lim)
    bars_lim = INT_MAX
    if props.cc[0] >= 9 and barriers > 0:
        bars_lim = _barrier_limit(props, blocks_lim, barriers)
        limit = min(limit, bars_lim)
    named = (("warps", warps_lim), ("registers", regs_lim), ("shared_memory", smem_lim), ("blocks", blocks_lim),
             ("barriers", bars_lim))
    return OccupancyDetail(
        blocks_per_sm=limit,
        warps_per_block=-(-threads_per_block // props.warp_size),
        max_warps=props.max_warps_per_sm,
        limit_warps=warps_lim,
        limit_registers=regs_lim,
        limit_shared_memory=smem_lim,
        limit_blocks=blocks_lim,
        limit_barriers=bars_lim,
        allocated_registers_per_block=regs_alloc,
        allocated_shared_bytes_per_block=smem_alloc,
        limiters=tuple(name for name, lim in named if lim == limit),
    )


def occupancy(threads_per_block: int, registers_per_thread: int, shared_bytes_per_block: int = 0,
              **options: Any) -> Occupancy:
    """Theoretical occupancy as ``types.Occupancy``: ``occupancy_detail(...).to_occupancy()``; arguments (the
    keyword-only ``options``: dynamic_shared_bytes, barriers, cc, max_dynamic_shared_bytes, carveout_percent,
    with their defaults) and errors as in ``occupancy_detail`` (TypeError on an unknown option).

    ``shared_bytes_per_block`` is the static shared memory; pass launch-time dynamic shared memory as
    ``dynamic_shared_bytes`` (the two add up the same way, but the per-block opt-in rules see them apart).
    """
    return occupancy_detail(threads_per_block, registers_per_thread, shared_bytes_per_block, **options).to_occupancy()
