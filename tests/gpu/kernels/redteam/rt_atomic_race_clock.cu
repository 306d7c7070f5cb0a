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
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
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
