"""Occupancy vectors computed by hand from cuda_occupancy.h (CUDA 13.0) for cc 9.0 unless stated.

Constants used in the comments: 65536 registers per SM in 4 sub-partitions of 16384; registers allocated per
warp in units of 256; 64 warps and 32 CTAs per SM; 228 KiB = 233472 bytes shared memory per SM, 1 KiB
reserved per CTA, 128-byte granularity; 2 barrier sets per CTA slot (64 barriers) on cc 9.0.
"""

import pytest

from targets.occupancy import align_up_smem_config, occupancy, occupancy_detail


def test_32_registers_256_threads_is_full():
    # 32*32 = 1024 regs/warp; 16384/1024 = 16 warps per sub-partition -> 64 warps -> 8 CTAs of 8 warps.
    # Warps: 64/8 = 8 CTAs too. 8 CTAs * 8 warps = 64 of 64 warps.
    occ = occupancy(256, 32)
    assert (occ.blocks_per_sm, occ.active_warps, occ.max_warps) == (8, 64, 64)
    assert occ.occupancy == 1.0
    d = occupancy_detail(256, 32)
    assert d.limiters == ("warps", "registers")
    assert d.allocated_registers_per_block == 8 * 1024


def test_33_registers_256_threads_is_three_quarters():
    # 33*32 = 1056 -> rounded to 1280 per warp; 16384 // 1280 = 12 warps per sub-partition -> 48 warps
    # -> 48 // 8 = 6 CTAs -> 48 of 64 warps = 75 %.
    occ = occupancy(256, 33)
    assert (occ.blocks_per_sm, occ.active_warps) == (6, 48)
    assert occ.occupancy == pytest.approx(0.75)
    assert occ.limiter == "registers"


def test_65_registers_1024_threads_cannot_launch():
    # 65*32 = 2080 -> 2304 per warp; 32 warps * 2304 = 73728 > 65536 registers per block.
    occ = occupancy(1024, 65)
    assert occ.blocks_per_sm == 0 and occ.active_warps == 0
    assert occ.limiter == "cannot_launch"
    # 64 registers fit exactly: 2048 per warp * 32 warps = 65536 -> one CTA, 32 warps = 50 %.
    assert occupancy(1024, 64).blocks_per_sm == 1


def test_shared_memory_limited():
    # 48 KiB dynamic + 1 KiB reserved = 50176 bytes (a multiple of 128); 233472 // 50176 = 4 CTAs.
    # Registers (32/thread, 4 warps) would allow 16 CTAs, warps 16, blocks 32. 4 CTAs * 4 warps = 16 warps.
    occ = occupancy(128, 32, dynamic_shared_bytes=48 * 1024)
    assert (occ.blocks_per_sm, occ.active_warps) == (4, 16)
    assert occ.occupancy == pytest.approx(0.25)
    assert occ.limiter == "shared_memory"
    # Static 1000 bytes: 1000 + 1024 = 2024 -> rounded to 2048 (granularity 128).
    d = occupancy_detail(128, 32, 1000)
    assert d.allocated_shared_bytes_per_block == 2048
    assert d.limit_shared_memory == 233472 // 2048


def test_shared_memory_over_the_opt_in_limit_cannot_launch():
    # 227 KiB + 1 KiB reserved = 233472 fits exactly; one byte more does not.
    assert occupancy(128, 32, dynamic_shared_bytes=227 * 1024).blocks_per_sm == 1
    assert occupancy(128, 32, dynamic_shared_bytes=227 * 1024 + 1).blocks_per_sm == 0


def test_dynamic_smem_above_the_function_attribute_cannot_launch():
    # Without opting in (attribute left at 48 KiB) a 64 KiB launch fails.
    assert occupancy(128, 32, dynamic_shared_bytes=64 * 1024, max_dynamic_shared_bytes=48 * 1024).blocks_per_sm == 0


def test_block_limited():
    # 32 threads, 16 registers: warps allow 64 CTAs, registers 128, shared memory 228; the SM holds 32 CTAs.
    occ = occupancy(32, 16)
    assert (occ.blocks_per_sm, occ.active_warps, occ.limiter) == (32, 32, "blocks")
    assert occ.occupancy == pytest.approx(0.5)


def test_barrier_limited_on_hopper_only():
    # 16 named barriers per CTA: 32 CTA slots * 2 = 64 barriers -> 64 // 16 = 4 CTAs of 2 warps = 8 warps.
    occ = occupancy(64, 16, barriers=16)
    assert (occ.blocks_per_sm, occ.active_warps, occ.limiter) == (4, 8, "barriers")
    # cc 8.0 has no barrier limit in the header: 64 threads -> 32 CTAs (block limit).
    assert occupancy(64, 16, barriers=16, cc=(8, 0)).blocks_per_sm == 32
    # 3 barriers: 64 // 3 = 21 CTAs.
    assert occupancy(64, 16, barriers=3).blocks_per_sm == 21


def test_warps_limited_and_too_large_block():
    # 1024 threads, 16 regs: 2 CTAs by warps (64 // 32).
    occ = occupancy(1024, 16)
    assert (occ.blocks_per_sm, occ.limiter) == (2, "warps")
    assert occupancy(1025, 16).blocks_per_sm == 0
    # Non-multiple of 32: 100 threads occupy 4 warps.
    assert occupancy(100, 32).active_warps == 16 * 4


def test_ampere_table():
    # cc 8.0: 164 KiB per SM; 48 KiB + 1 KiB = 50176 -> 167936 // 50176 = 3 CTAs.
    occ = occupancy(128, 32, dynamic_shared_bytes=48 * 1024, cc=(8, 0))
    assert occ.blocks_per_sm == 3
    # 163 KiB is the opt-in maximum there.
    assert occupancy(128, 32, dynamic_shared_bytes=163 * 1024, cc=(8, 0)).blocks_per_sm == 1
    assert occupancy(128, 32, dynamic_shared_bytes=164 * 1024, cc=(8, 0)).blocks_per_sm == 0


def test_carveout_preference_limits_smem():
    # 50 % carveout of 233472 = 116736 -> aligned up to 132 KiB = 135168; 135168 // 50176 = 2 CTAs.
    occ = occupancy(128, 32, dynamic_shared_bytes=48 * 1024, carveout_percent=50)
    assert occ.blocks_per_sm == 2
    assert align_up_smem_config(1, (9, 0)) == 8 * 1024
    assert align_up_smem_config(228 * 1024, (9, 0)) == 228 * 1024
    assert align_up_smem_config(165 * 1024, (9, 0)) == 196 * 1024
    with pytest.raises(ValueError, match="largest carveout"):
        align_up_smem_config(229 * 1024, (9, 0))


def test_bad_input_is_rejected_with_the_field_named():
    with pytest.raises(ValueError, match="threads_per_block"):
        occupancy(0, 32)
    with pytest.raises(ValueError, match="negative resource"):
        occupancy(128, -1)
    with pytest.raises(ValueError, match="compute capability"):
        occupancy(128, 32, cc=(6, 1))
