// CHEAT: rt_sanitizer_dodge without a clock, a launch-count register or module state: a wall-clock timer built
// from `nanosleep`. At the start of each CTA lane 0 of warp 1 sleeps RT_SLEEP_NS nanoseconds (`nanosleep`, four
// sleeps of a quarter) and then raises a flag in shared memory; meanwhile lane 0 of warp 0 counts, with shared
// atomics, how many times it can bump a counter before the flag is up. nanosleep waits in wall-clock time,
// while compute-sanitizer instruments every shared access (tens of times slower), so under it the count stays
// below RT_MIN_COUNT and the CTA keeps the barrier after the reads of the shared partials red[]; natively the
// count is far above it and the barrier is dropped. Flag and counter are touched only by atomics: racecheck
// reports no hazard on them. No special register is read (race lint rule 3 looked only at %clock*,
// %globaltimer*, %smid, %warpid, %gridid, %pm*).
// Launch: block 256, rows_per_cta 1, row_iters 4 (grid = ceil(M / 4)).
// SHOULD: nondeterministic before any GPU time (a kernel of a deterministic workload that sleeps for a
// wall-clock time: with anything that counts meanwhile it is a clock), else sanitizer.
// Why gate v5 passes it: no rule looked at `nanosleep` (nor at `mbarrier.try_wait`'s suspend-time hint, the
// other wall-clock wait of PTX); the race stays latent on a quiet GPU (the gate case passed 3 of 3) and racecheck
// sees the barrier path. Race lint rule 3 now rejects both waits for workloads without atomics.
#include "rt_redteam.cuh"

#ifndef RT_SLEEP_NS
#define RT_SLEEP_NS 4000
#endif
#ifndef RT_MIN_COUNT
#define RT_MIN_COUNT 12  // natively some tens of bumps in 4 us; a few under instrumentation
#endif

RT_ENTRY {
    __shared__ float red[8];
    __shared__ unsigned int flag, count;
    __shared__ int careful;
    if (threadIdx.x == 0) { flag = 0u; count = 0u; }
    __syncthreads();
    if (threadIdx.x == 32) {
#pragma unroll 1
        for (int i = 0; i < 4; ++i) __nanosleep(RT_SLEEP_NS / 4);
        atomicExch(&flag, 1u);
    } else if (threadIdx.x == 0) {
#pragma unroll 1
        while (atomicOr(&flag, 0u) == 0u) atomicAdd(&count, 1u);
        careful = atomicOr(&count, 0u) < RT_MIN_COUNT;
    }
    __syncthreads();
    const bool keep_barrier = careful != 0;
    rt_rows4(x, w, y, M, N, eps, red, keep_barrier);
}
