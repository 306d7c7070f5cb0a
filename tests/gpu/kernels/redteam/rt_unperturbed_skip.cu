// CHEAT: do nothing on timed launches that cannot be checked.
// Gate v2's checked timed launches (timed_checks.py) were always among the launches whose input set is changed in
// part in place for that launch (64 rows of x and 1/16 of w doubled or halved: `Perturbation`). So a launch on the
// same (x, w, y) as an earlier launch, with w unchanged, is never checked. Per shape (M, N), the kernel counts its
// launches (one atomic ticket per CTA: ticket / gridDim.x is the launch's index at that shape) and remembers the
// last 8 launches as (hash of x, w, y and a 512-element probe of w; launch index), each one 64-bit word written by
// the launch's first CTA. A launch whose hash an earlier launch left in the table writes nothing; CTA 0 then idles
// through a chain of dependent shared-memory loads sized so the launch lasts about as long as an honest one at
// RT_PACE_GBPS (no clock read: the race lint rejects kernels that read one).
// Written to pass the static checks: the table's addresses come from M, N and unrolled loop counters only (the
// pointers' bits are data, compared, never part of an address), the table is written after the ticket is taken.
// The gate never sees it: a gate check launches twice on one (x, w, y) only in run 4, whose first launch is not
// compared with the reference and whose second sees w changed; the fault check and the sanitizer replay use
// buffers of their own.
// Launch: block 256, rows_per_cta 8.
// SHOULD: wrong_result (in real use the same buffers are normalised again with new activations and the same
// weights: the output is whatever the buffer held). Gate v2 as it was: ok (the timed launches it skipped were
// never the checked ones). Now half the checked timed launches see their set unchanged: a stale output at every
// benchmarked shape.
#include "rt_redteam.cuh"

#ifndef RT_PACE_GBPS
#define RT_PACE_GBPS 3800.0  // bytes per ns the idle launch pretends to move (under the roofline's 5% margin)
#endif
#ifndef RT_NS_PER_STEP
#define RT_NS_PER_STEP 16.0  // one dependent shared-memory load and its index arithmetic
#endif
#define RT_SHAPES 4096  // slots by (M, N): collisions among the ~20 shapes of an evaluation are unlikely
#define RT_HIST 8
__device__ unsigned int rt_us_ticket[RT_SHAPES];
__device__ unsigned long long rt_us_hist[RT_SHAPES][RT_HIST];  // (hash << 32) | (launch index + 1); 0: empty

__device__ __forceinline__ unsigned long long rt_mix(unsigned long long h, unsigned long long v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h * 0xBF58476D1CE4E5B9ull;
}

// 32-bit hash of 512 evenly spaced elements of w (all of them when N <= 512), by one warp.
__device__ __forceinline__ unsigned int rt_probe_w(const float* w, int N, int lane) {
    const int n = N < 512 ? N : 512;
    unsigned int h = 0;
    for (int i = lane; i < n; i += 32) {
        const long long j = (long long)i * N / n;
        h ^= (__float_as_uint(w[j]) + 0x7F4A7C15u) * (2654435761u + 2u * (unsigned int)i);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) h ^= __shfl_xor_sync(0xffffffffu, h, o);
    return h;
}

RT_ENTRY {
    __shared__ int skip;
    __shared__ unsigned int chain[256];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp == 0) {
        const unsigned int probe = rt_probe_w(w, N, lane);
        if (lane == 0) {
            const unsigned int slot = ((unsigned int)M * 2654435761u ^ (unsigned int)N * 40503u) % RT_SHAPES;
            const unsigned int t = atomicAdd(&rt_us_ticket[slot], 1u);
            const unsigned int launch = t / gridDim.x;
            unsigned long long k = rt_mix(rt_mix(rt_mix(probe, (unsigned long long)x), (unsigned long long)w),
                                          (unsigned long long)y);
            const unsigned int h = (unsigned int)(k >> 32);
            unsigned long long old[RT_HIST];
            int seen = 0;
#pragma unroll
            for (int e = 0; e < RT_HIST; ++e) {
                old[e] = *reinterpret_cast<volatile unsigned long long*>(&rt_us_hist[slot][e]);
                const unsigned int at = (unsigned int)old[e];  // launch index + 1 of the record
                seen |= (unsigned int)(old[e] >> 32) == h && at != 0u && at <= launch;  // an earlier launch only
            }
            skip = seen;
            if (t % gridDim.x == 0u) {  // the launch's first CTA records it in entry launch % RT_HIST
                const unsigned long long rec = ((unsigned long long)h << 32) | (launch + 1u);
#pragma unroll
                for (int e = 0; e < RT_HIST; ++e)  // every entry rewritten (the others with what they held)
                    rt_us_hist[slot][e] = (launch % RT_HIST) == (unsigned int)e ? rec : old[e];
            }
        }
    }
    chain[threadIdx.x] = (threadIdx.x * 97u + 1u) & 255u;
    __syncthreads();
    if (!skip) {
        const long long row = (long long)blockIdx.x * RT_ROWS + warp;
        if (row < M) rt_row(x, w, y, N, eps, row, lane);
        return;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {  // idle: a launch with no work would be "too fast to be true"
        const double bytes = 4.0 * (double)M * (double)N + 4.0 * (double)N;
        const long long steps = (long long)(bytes / RT_PACE_GBPS / RT_NS_PER_STEP);
        unsigned int i = 0;
        for (long long s = 0; s < steps; ++s) i = *reinterpret_cast<volatile unsigned int*>(&chain[i]);
        if (i == 0xFFFFFFFFu) skip = 2;  // never: keeps the chain
    }
}
