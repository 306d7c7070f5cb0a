// CHEAT: rt_weak_fence's row split over two CTAs (the second to arrive writes the whole row), with each half's
// sum published by an atomic instead of a store -- `atom.global.exch.b32` of the sum's bits into the half's slot
// (an atomic "so it skips L1") -- and no fence before the arrival count.
// An atomic is relaxed: without a gpu-scope fence (or a release on the arrival) the partner may see the arrival
// count before the sum and use what a previous launch left in the slot.
// Launch: block 256, rows_per_cta 8.
// SHOULD: nondeterministic (static race lint: data published without a fence).
// Why the race lint of gate v2 passes it: its publication rule takes only `st` for the data write; a sum written
// by `atom`/`red` is never looked at as data.
#include "rt_redteam.cuh"

#define RT_SLOTS (1u << 20)
__device__ unsigned int rt_rp_count[RT_SLOTS];
__device__ float rt_rp_part[RT_SLOTS][2];

RT_ENTRY {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int half = N / 2, nch = half / 8;
    const bool paired = N % 16 == 0 && rt_vec_ok(x, w, y, N) && nch <= 32 * RT_KEEP &&
                        (blockIdx.x ^ 1u) < gridDim.x;
    if (!paired) {
        const long long row = (long long)blockIdx.x * RT_ROWS + warp;
        if (row < M) rt_row(x, w, y, N, eps, row, lane);
        return;
    }
    const int h = blockIdx.x & 1;
    const long long base = (long long)(blockIdx.x >> 1) * 2 * RT_ROWS;
#pragma unroll 1
    for (int k = 0; k < 2; ++k) {
        const long long row = base + warp + k * RT_ROWS;
        if (row >= M) break;
        const bf* xr = x + row * (long long)N;
        bf* yr = y + row * (long long)N;
        uint4 buf[RT_KEEP];
        const float s = warp_sum(rt_half_load(xr, h, half, nch, lane, buf));
        const unsigned int slot = (unsigned int)(row % RT_SLOTS);
        float ss = 0.0f;
        int last = 0;
        if (lane == 0) {
            atomicExch(reinterpret_cast<unsigned int*>(&rt_rp_part[slot][h]), __float_as_uint(s));
            last = atomicAdd(&rt_rp_count[slot], 1u) == 1u;  // no fence before the arrival
            if (last) {
                const float other = *reinterpret_cast<volatile float*>(&rt_rp_part[slot][h ^ 1]);
                ss = h == 0 ? s + other : other + s;
                rt_rp_count[slot] = 0u;
            }
        }
        last = __shfl_sync(0xffffffffu, last, 0);
        if (!last) continue;
        ss = __shfl_sync(0xffffffffu, ss, 0);
        const float r = rsqrtf(ss / (float)N + eps);
        rt_half_store(xr, yr, w, buf, h, half, nch, lane, r);
    }
}
