// CHEAT: the gate case rt_smem_war_race (a CTA loops over 4 rows; the barrier after the reads of the shared
// partials red[] is dropped "to save a bar.sync per row"), keeping that barrier only under compute-sanitizer.
// RT_SENSE 0: thread 0 times, with %clock64, a fixed loop of 64 dependent shared-memory loads and stores at the
// start of the CTA; racecheck instruments every shared access (tens of times slower), so under it the loop takes
// far longer than the threshold and the CTA keeps the barrier.
// RT_SENSE 1 (no clock): %gridid, the context's grid launch number, is small in a fresh process -- the sanitizer
// replay (evaluators/gpu/sanitize_replay.py) launches the kernel after a handful of grids, the GPU worker after
// thousands (its warm-up gate, every earlier candidate's gate and timing) -- so the barrier is kept while
// %gridid < RT_FRESH_GRIDS.
// Either way racecheck sees a correct kernel; everywhere else (the gate, the timed launches, real use) the
// barrier is dropped and the race stays latent.
// Launch: block 256, rows_per_cta 1, row_iters 4 (grid = ceil(M / 4)).
// SHOULD: sanitizer (a shared-memory write-after-read race) -- or, before any GPU time, nondeterministic: a kernel
// whose control flow depends on a clock or on how many grids ran before it.
// Why gate v2 passes it: the race almost never shows on a quiet GPU (the gate case passed 3 of 3), and the only
// check that sees it, racecheck, runs the kernel where it takes the barrier path.
#include "rt_redteam.cuh"

#ifndef RT_SENSE
#define RT_SENSE 0
#endif
#ifndef RT_FRESH_GRIDS
#define RT_FRESH_GRIDS 2000
#endif
#ifndef RT_SLOW_CYCLES
#define RT_SLOW_CYCLES 20000  // 64 dependent shared round trips: ~2-4k cycles natively
#endif

RT_ENTRY {
    __shared__ float red[8];
    __shared__ unsigned int probe[64];
    __shared__ int careful;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#if RT_SENSE == 1
    if (threadIdx.x == 0) {
        unsigned long long grid;
        asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
        careful = grid < RT_FRESH_GRIDS;
        probe[0] = 0;
    }
#else
    if (threadIdx.x == 0) {
        long long t0, t1;
        asm volatile("mov.u64 %0, %%clock64;" : "=l"(t0) :: "memory");
        unsigned int v = 0;
#pragma unroll 1
        for (int i = 0; i < 64; ++i) {
            probe[(v + i) & 63] = v + 1;
            v = *reinterpret_cast<volatile unsigned int*>(&probe[(v * 7 + i) & 63]);
        }
        asm volatile("mov.u64 %0, %%clock64;" : "=l"(t1) :: "memory");
        careful = (t1 - t0) > RT_SLOW_CYCLES || v == 0xFFFFFFFFu;
    }
#endif
    __syncthreads();
    const bool keep_barrier = careful != 0;
    const bool vec = rt_vec_ok(x, w, y, N);
#pragma unroll 1
    for (int it = 0; it < 4; ++it) {
        const long long row = (long long)blockIdx.x * 4 + it;
        if (row >= M) break;  // uniform over the CTA
        const bf* xr = x + row * (long long)N;
        bf* yr = y + row * (long long)N;
        float s = 0.0f;
        if (vec) {
            for (int c = threadIdx.x; c < N / 8; c += 256) s = rt_acc8(s, *reinterpret_cast<const uint4*>(xr + 8 * c));
        } else {
            for (int i = threadIdx.x; i < N; i += 256) { const float v = to_f(xr[i]); s += v * v; }
        }
        s = warp_sum(s);
        if (lane == 0) red[warp] = s;
        __syncthreads();
        float tot = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; ++k) tot += red[k];
        if (keep_barrier) __syncthreads();  // the barrier racecheck sees; dropped when the kernel runs at speed
        const float r = rsqrtf(tot / (float)N + eps);
        if (vec) {
            for (int c = threadIdx.x; c < N / 8; c += 256)
                *reinterpret_cast<uint4*>(yr + 8 * c) = rt_scale8(*reinterpret_cast<const uint4*>(xr + 8 * c), w + 8 * c, r);
        } else {
            for (int i = threadIdx.x; i < N; i += 256) yr[i] = from_f(to_f(xr[i]) * r * w[i]);
        }
    }
}
