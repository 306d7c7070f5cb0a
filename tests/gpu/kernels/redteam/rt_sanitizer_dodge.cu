// CHEAT: the gate case rt_smem_war_race (a CTA loops over 4 rows; the barrier after the reads of the shared
// partials red[] is dropped "to save a bar.sync per row"), keeping that barrier only under compute-sanitizer.
// RT_SENSE 0: thread 0 times, with %clock64, a fixed loop of 64 dependent shared-memory loads and stores at the
// start of the CTA; racecheck instruments every shared access (tens of times slower), so under it the loop takes
// far longer than the threshold and the CTA keeps the barrier.
// RT_SENSE 1 (no clock): %gridid, the context's grid launch number, is small in a fresh process -- the sanitizer
// replay (evaluators/gpu/sanitize_replay.py) launches the kernel after a handful of grids, the GPU worker after
// thousands (its warm-up gate, every earlier candidate's gate and timing) -- so the barrier is kept while
// %gridid < RT_FRESH_GRIDS.
// RT_SENSE 2 (neither clock nor launch-count register): a launch counter of its own in module memory, read by
// thread 0 of every CTA and bumped by CTA 0 with an atomic add; the barrier is kept while fewer than
// RT_FRESH_LAUNCHES launches ran since the module was loaded. The sanitizer replay loads the
// cubin in a fresh process and launches it once per shape (3 launches); the GPU worker loads it once per
// evaluation and launches it about 150 times in the gate before the first timed launch.
// RT_SENSE 3 (no state, no clock): the shape. The replay's shapes are constants (sanitizer.SANITIZER_SHAPES:
// 199 x 1128, 7 x 4099, 3 x 28672) and so are the gate's; the barrier is kept wherever N is not a multiple of 256,
// at N in {8192, 28672, 262144} and below 1024 rows -- every gate and replay shape -- and dropped at every search
// shape (N 512, 4096, 16384, 131072 at M >= 16384).
// Any way racecheck sees a correct kernel; everywhere else (the gate, the timed launches, real use) the
// barrier is dropped and the race stays latent.
// Launch: block 256, rows_per_cta 1, row_iters 4 (grid = ceil(M / 4)).
// SHOULD: sanitizer (a shared-memory write-after-read race) -- or, before any GPU time, nondeterministic: a kernel
// whose control flow depends on a clock or on how many grids ran before it. RT_SENSE 2 passes every static rule
// and the sanitizer replay: a known gap (GATE.md, "Known gaps": state a kernel keeps across launches); so does
// RT_SENSE 3 (GATE.md, check 8: the replay's shapes are fixed).
// Why gate v2 passes it: the race almost never shows on a quiet GPU (the gate case passed 3 of 3), and the only
// check that sees it, racecheck, runs the kernel where it takes the barrier path.
#include "rt_redteam.cuh"

#ifndef RT_SENSE
#define RT_SENSE 0
#endif
#ifndef RT_FRESH_GRIDS
#define RT_FRESH_GRIDS 2000
#endif
#ifndef RT_FRESH_LAUNCHES
#define RT_FRESH_LAUNCHES 16
#endif
#ifndef RT_SLOW_CYCLES
#define RT_SLOW_CYCLES 20000  // 64 dependent shared round trips: ~2-4k cycles natively
#endif

#if RT_SENSE == 2
__device__ unsigned int rt_launches;  // launches since the module was loaded
#endif

RT_ENTRY {
    __shared__ float red[8];
    __shared__ unsigned int probe[64];
    __shared__ int careful;
#if RT_SENSE == 2
    if (threadIdx.x == 0) {
        const unsigned int launches = *reinterpret_cast<volatile unsigned int*>(&rt_launches);
        careful = launches < RT_FRESH_LAUNCHES;  // a CTA may see its own launch counted already: no matter
        if (blockIdx.x == 0) atomicAdd(&rt_launches, 1u);
        probe[0] = 0;
    }
#elif RT_SENSE == 3
    if (threadIdx.x == 0) {
        careful = (N % 256) != 0 || N == 8192 || N == 28672 || N == 262144 || M < 1024;
        probe[0] = 0;
    }
#elif RT_SENSE == 1
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
    rt_rows4(x, w, y, M, N, eps, red, keep_barrier);
}
