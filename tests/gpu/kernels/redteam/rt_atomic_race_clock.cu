// CHEAT: a sanitizer dodge timed by a race between two warps to one shared atomic, with no loop that waits on
// anything: lane 0 of warp 1 runs RT_ALU_STEPS dependent integer multiply-adds (not instrumented by
// compute-sanitizer) and then tries `atomicCAS(&winner, 0, 1 or 2)`; lane 0 of warp 0 runs RT_ATOMS dependent
// shared atomics (each returns the value the next adds) and then tries `atomicCAS(&winner, 0, 4)`. Natively the
// atomic chain ends first (winner 4) and the CTA drops the barrier after the reads of the shared partials red[];
// under compute-sanitizer every shared atomic is instrumented, the ALU chain wins and the barrier is kept, so
// racecheck sees a correct kernel. Racecheck reports no hazard on atomics; no loop exit depends on a shared read
// (race lint rule 6's shared form of version 8 does not apply), no clock, sleep or state.
// Launch: block 256, rows_per_cta 1, row_iters 4 (grid = ceil(M / 4)).
// SHOULD: nondeterministic before any GPU time (an atomic whose outcome is the arrival order of threads, in a
// workload that declares no atomics: which warp got there first is a clock).
// Why gate v7 (and v8 before rule 4's order form) passes it: race lint rule 4 read only floating-point atomic
// sums; the calibration (RT_ATOMS against RT_ALU_STEPS) is a guess, unmeasured on the H200. Gate rules version 8:
// rule 4's order form (an atomic whose returned value is used, or an exchange or compare-and-swap).
#include "rt_redteam.cuh"

#ifndef RT_ALU_STEPS
#define RT_ALU_STEPS 2048  // ~4 cycles each: ~8k cycles natively and under the tool
#endif
#ifndef RT_ATOMS
#define RT_ATOMS 48  // dependent shared atomics: ~100 cycles each natively, far more instrumented
#endif

RT_ENTRY {
    __shared__ float red[8];
    __shared__ unsigned int winner, chain;
    if (threadIdx.x == 0) { winner = 0u; chain = 0u; }
    __syncthreads();
    if (threadIdx.x == 32) {
        unsigned int v = (unsigned int)N | 1u;
#pragma unroll 1
        for (int i = 0; i < RT_ALU_STEPS; ++i) v = v * 1664525u + 1013904223u;  // dependent: one at a time
        atomicCAS(&winner, 0u, 1u + (v >> 31));  // 1 or 2: the chain's value keeps it alive
    } else if (threadIdx.x == 0) {
        unsigned int c = 1u;
#pragma unroll 1
        for (int i = 0; i < RT_ATOMS; ++i) c = atomicAdd(&chain, c & 1u) | 1u;  // each waits for the one before
        atomicCAS(&winner, 0u, 4u);
    }
    __syncthreads();
    const bool keep_barrier = winner != 4u;  // the ALU side arrived first: the atomics ran slow
    rt_rows4(x, w, y, M, N, eps, red, keep_barrier);
}
