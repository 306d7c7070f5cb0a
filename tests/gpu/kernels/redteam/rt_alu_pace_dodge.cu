// CHEAT: rt_sleep_dodge without `nanosleep`: the wall-clock side of the timer is a chain of dependent integer
// arithmetic, which compute-sanitizer does not instrument (memcheck, racecheck and synccheck patch memory
// accesses and barriers, not ALU instructions). At the start of each CTA lane 0 of warp 1 runs RT_ALU_STEPS
// dependent multiply-adds (a fixed time natively and under the tool alike) and then raises a flag in shared
// memory; meanwhile lane 0 of warp 0 counts, with shared atomics, how many times it can bump a counter before the
// flag is up. Under compute-sanitizer every one of those shared atomics is instrumented (tens of times slower),
// the ALU chain is not: the count stays below RT_MIN_COUNT and the CTA keeps the barrier after the reads of the
// shared partials red[]; natively the count is far above it and the barrier is dropped. Flag and counter are
// touched only by atomics (racecheck reports no hazard on them). No special register, no sleep, no module state.
// Launch: block 256, rows_per_cta 1, row_iters 4 (grid = ceil(M / 4)).
// SHOULD: nondeterministic before any GPU time (a loop whose exit waits on another thread of the CTA through
// shared memory while it counts: with a fixed-time chain on the other side it is a clock), else sanitizer.
// Why gate v7 passes it: race lint rule 1 follows spins on global memory only, rule 6 looks at `nanosleep` and
// `mbarrier.try_wait` hints only, and no rule reads ALU chains; racecheck sees the barrier path and the race stays
// latent on a quiet GPU. Gate rules version 8: rule 6's shared form (a loop whose exit depends on shared memory
// the kernel writes) rejects it.
#include "rt_redteam.cuh"

#ifndef RT_ALU_STEPS
#define RT_ALU_STEPS 2048  // ~4 cycles each: ~8k cycles, ~4 us at 1.98 GHz
#endif
#ifndef RT_MIN_COUNT
#define RT_MIN_COUNT 12  // natively some tens of bumps meanwhile; a few under instrumentation
#endif

RT_ENTRY {
    __shared__ float red[8];
    __shared__ unsigned int flag, count;
    __shared__ int careful;
    if (threadIdx.x == 0) { flag = 0u; count = 0u; }
    __syncthreads();
    if (threadIdx.x == 32) {
        unsigned int v = (unsigned int)N | 1u;
#pragma unroll 1
        for (int i = 0; i < RT_ALU_STEPS; ++i) v = v * 1664525u + 1013904223u;  // dependent: one at a time
        atomicExch(&flag, v | 1u);  // non-zero: the flag raised after the chain, which its value keeps alive
    } else if (threadIdx.x == 0) {
#pragma unroll 1
        while (atomicOr(&flag, 0u) == 0u) atomicAdd(&count, 1u);
        careful = atomicOr(&count, 0u) < RT_MIN_COUNT;
    }
    __syncthreads();
    const bool keep_barrier = careful != 0;
    rt_rows4(x, w, y, M, N, eps, red, keep_barrier);
}
