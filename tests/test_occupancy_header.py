"""targets.occupancy against cuda_occupancy.h itself: a C++ harness (tests/data/occupancy/occ_harness.cpp)
built with g++ against the installed CUDA's header runs ``cudaOccMaxActiveBlocksPerMultiprocessor`` for every
compute capability in ``DEVICE_PROPS`` over a grid of block sizes, register counts, static and dynamic shared
memory and barrier counts; every limit and allocation must match the Python transcription."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from targets.occupancy import (
    DEVICE_PROPS,
    INT_MAX,
    device_props,
    occupancy,
    occupancy_detail,
    smem_carveouts_kib,
)

HARNESS = Path(__file__).parent / "data" / "occupancy" / "occ_harness.cpp"


def occupancy_header() -> Path | None:
    """cuda_occupancy.h of the installed CUDA: $CUDA_HOME, /usr/local/cuda*, or the nvidia-cuda-runtime wheel."""
    dirs = [Path(os.environ[v]) / "include" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    dirs += sorted(Path("/usr/local").glob("cuda*/include"), reverse=True)
    dirs += [Path(p) / "nvidia" / "cu13" / "include" for p in sys.path if p]
    return next((d / "cuda_occupancy.h" for d in dirs if (d / "cuda_occupancy.h").is_file()), None)


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    header = occupancy_header()
    if header is None or shutil.which("g++") is None:
        pytest.skip("needs g++ and cuda_occupancy.h (CUDA toolkit or the nvidia-cuda-runtime wheel)")
    assert "#define __CUDA_OCC_MAJOR__ 12" in header.read_text()
    exe = tmp_path_factory.mktemp("occ") / "occ"
    subprocess.run(["g++", "-O1", f"-I{header.parent}", str(HARNESS), "-o", str(exe)], check=True)
    return exe


def test_every_compute_capability_matches_the_header(harness: Path) -> None:
    cases = []
    for cc, props in sorted(DEVICE_PROPS.items()):
        for block, regs, static, dyn, bars in itertools.product(
                (32, 96, 128, 256, 384, 512, 1024), (16, 32, 40, 64, 128, 255), (0, 1000, 16384),
                (0, 20000, 48 * 1024, 90 * 1024), (0, 1, 3)):
            cases.append((cc, props, block, regs, static, dyn, bars))
    lines = "".join(
        f"{cc[0]} {cc[1]} {p.max_threads_per_sm} {p.shared_mem_per_sm} {p.shared_mem_per_block_optin} "
        f"{p.reserved_shared_mem_per_block} {block} {regs} {static} {dyn} {bars}\n"
        for cc, p, block, regs, static, dyn, bars in cases)
    out = subprocess.run([str(harness)], input=lines, capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == len(cases)
    checked = 0
    for (cc, _p, block, regs, static, dyn, bars), line in zip(cases, out):
        status, blocks, l_regs, l_smem, l_warps, l_blocks, l_bars, a_regs, a_smem = map(int, line.split())
        if status != 0:  # the header rejects the launch (e.g. more shared memory than the largest carveout)
            with pytest.raises(ValueError):
                occupancy_detail(block, regs, static, dynamic_shared_bytes=dyn, barriers=bars, cc=cc)
            continue
        d = occupancy_detail(block, regs, static, dynamic_shared_bytes=dyn, barriers=bars, cc=cc)
        got = (d.blocks_per_sm, d.limit_registers, d.limit_shared_memory, d.limit_warps, d.limit_blocks,
               d.limit_barriers, d.allocated_registers_per_block, d.allocated_shared_bytes_per_block)
        want = (blocks, l_regs, l_smem, l_warps, l_blocks, l_bars if bars and cc[0] >= 9 else INT_MAX, a_regs, a_smem)
        assert got == want, (cc, block, regs, static, dyn, bars)
        checked += 1
    assert checked > 0.9 * len(cases)


@pytest.mark.parametrize("cc, warps, blocks, smem_kib", [
    ((7, 5), 32, 16, 64), ((8, 0), 64, 32, 164), ((8, 6), 48, 16, 100), ((8, 7), 48, 16, 164),
    ((8, 9), 48, 24, 100), ((9, 0), 64, 32, 228), ((10, 0), 64, 32, 228), ((10, 3), 64, 32, 228),
    ((11, 0), 48, 24, 228), ((12, 0), 48, 24, 100), ((12, 1), 48, 24, 100),
])
def test_device_tables(cc: tuple[int, int], warps: int, blocks: int, smem_kib: int) -> None:
    p = device_props(cc)
    assert (p.max_warps_per_sm, p.shared_mem_per_sm, max(smem_carveouts_kib(cc))) == (warps, smem_kib * 1024, smem_kib)
    # 32 threads and 16 registers: only the resident-block limit binds
    assert occupancy(32, 16, cc=cc).blocks_per_sm == blocks


def test_sm86_occupancy_of_a_256_thread_kernel() -> None:
    # 1536 threads per SM: 6 CTAs of 8 warps = 48 warps at 32 registers (full); 64 registers: 16384 // 2048
    # = 8 warps per sub-partition -> 32 warps -> 4 CTAs = 2/3.
    assert occupancy(256, 32, cc=(8, 6)).occupancy == 1.0
    occ = occupancy(256, 64, cc=(8, 6))
    assert (occ.blocks_per_sm, occ.active_warps, occ.max_warps, occ.limiter) == (4, 32, 48, "registers")


def test_unknown_compute_capability_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"compute capability \(6, 1\).*\(7, 5\)"):
        device_props((6, 1))
