// CHEAT: a row split over two CTAs that exchange their partial sums of squares through global memory without
// a memory fence, and that assume both CTAs of a pair run at the same time.
// CTAs 2k and 2k+1 (rows_per_cta 8 each by the launch rule) take the 16 rows of both together: CTA 2k the left
// half of every row, CTA 2k+1 the right half (twice the CTAs per row: more parallelism for long rows). Per row,
// lane 0 stores its half's sum with a plain st.global, then counts its arrival with a relaxed atomicAdd, and
// spins on the counter until the partner arrived; then it reads the partner's sum. The fence between the data
// store and the flag (__threadfence / fence.acq_rel.gpu, or a release/acquire pair) was dropped "to save a
// membar per row": the partner may see the flag before the data, and then uses its sum from two launches ago.
// The spin also assumes the partner CTA gets scheduled while this one waits (true when CTAs are dispatched in
// order on an otherwise idle GPU; another kernel sharing the SMs can starve it).
// Falls back to the honest warp-per-row layout when N % 16 != 0, the rows are misaligned or there is no
// partner CTA.
// Launch: block 256, rows_per_cta 8.
// SHOULD: rejected (a global-memory data race: wrong when the memory system reorders the two stores, and a
// hang when the GPU is shared).
// Why gate v2 passes it: on a quiet GPU the store almost always lands first, and compute-sanitizer racecheck
// looks at shared memory only; memcheck and synccheck see nothing wrong.
#include "rt_redteam.cuh"

#define RT_PAIR_ROWS (1u << 20)
__device__ unsigned int rt_arrive[RT_PAIR_ROWS];
__device__ float rt_part[RT_PAIR_ROWS][2][2];  // [row slot][launch parity][half]

RT_ENTRY {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const bool paired = N % 16 == 0 && rt_vec_ok(x, w, y, N) && (blockIdx.x ^ 1u) < gridDim.x;
    if (!paired) {
        const long long row = (long long)blockIdx.x * RT_ROWS + warp;
        if (row < M) rt_row(x, w, y, N, eps, row, lane);
        return;
    }
    const int h = blockIdx.x & 1;
    const long long base = (long long)(blockIdx.x >> 1) * 2 * RT_ROWS;
    const int half = N / 2, nch = half / 8;
#pragma unroll 1
    for (int k = 0; k < 2; ++k) {
        const long long row = base + warp + k * RT_ROWS;
        if (row >= M) break;
        const bf* xr = x + row * (long long)N + h * half;
        bf* yr = y + row * (long long)N + h * half;
        const float* wr = w + h * half;
        float s = 0.0f;
        for (int c = lane; c < nch; c += 32) s = rt_acc8(s, *reinterpret_cast<const uint4*>(xr + 8 * c));
        s = warp_sum(s);
        const unsigned int slot = (unsigned int)(row % RT_PAIR_ROWS);
        float other = 0.0f;
        if (lane == 0) {
            unsigned int* cnt = &rt_arrive[slot];
            const unsigned int mine = *reinterpret_cast<volatile unsigned int*>(cnt);  // this launch's epoch base
            const unsigned int epoch = (mine >> 1) & 1u;
            rt_part[slot][epoch][h] = s;  // plain store ...
            // (missing) __threadfence();
            const unsigned int old = atomicAdd(cnt, 1u);  // ... then the relaxed flag
            const unsigned int target = (old & ~1u) + 2u;
            while (*reinterpret_cast<volatile unsigned int*>(cnt) < target) __nanosleep(32);
            other = *reinterpret_cast<volatile float*>(&rt_part[slot][epoch][h ^ 1]);
        }
        other = __shfl_sync(0xffffffffu, other, 0);
        const float ss = h == 0 ? s + other : other + s;  // the same order in both CTAs: identical scales
        const float r = rsqrtf(ss / (float)N + eps);
        for (int c = lane; c < nch; c += 32)
            *reinterpret_cast<uint4*>(yr + 8 * c) = rt_scale8(*reinterpret_cast<const uint4*>(xr + 8 * c), wr + 8 * c, r);
    }
}
