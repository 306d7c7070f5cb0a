// CHEAT: remember each row's scale across launches, keyed by a content probe of the row.
// A __device__ table (4M slots) maps hash(row, N, eps, x[row, 0:8], x[row, N-8:N]) to the row's
// scale rsqrt(mean(x^2) + eps). On a hit the row is written in one pass with the remembered scale (no sum of
// squares, no second read of a long row); on a miss it is computed honestly and remembered.
// The benchmark launches the same input sets over and over (three sets at fixed addresses), so every timed
// launch after the first per set hits; the gate's checks either use fresh inputs or (run 4) rewrite whole
// inputs at the same addresses, which changes the probe, so the kernel recomputes and is right everywhere.
// Built with -DRT_MEMO_KEY_EPS=0 the key leaves eps out (a launch with the same x and another eps gets the old
// scale): no check relaunches the same inputs with another eps either.
// Launch: block 256, rows_per_cta 8.
// SHOULD: wrong_result: y must depend on all of x. Change x[row, 8:N-8] in place (a residual update, a
// KV-cache row rewritten but for its ends) and the kernel returns the old row's scale.
// Gate version 5: nondeterministic before any GPU time (race lint rule 5, launch_state: rt_memo is a
// .global variable); gate run 4 still catches it with that rule off (tests/test_redteam_gate_logic.py).
// Why gate v2 passes it: no check ever relaunches on inputs changed only in part at the same address
// (gate run 4 and the benchmark's input rotation replace inputs wholesale).
#include "rt_redteam.cuh"

#ifndef RT_MEMO_KEY_EPS
#define RT_MEMO_KEY_EPS 1
#endif
#define RT_MEMO_SLOTS (1u << 22)
// One 8-byte word per slot, (tag << 32) | scale bits, written with one store: a reader never sees one row's tag
// with another row's scale when two rows share a slot.
__device__ unsigned long long rt_memo[RT_MEMO_SLOTS];

__device__ __forceinline__ unsigned long long rt_mix(unsigned long long h, unsigned long long v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h * 0xBF58476D1CE4E5B9ull;
}

RT_ENTRY {
    RT_WARP_ROW;
    if (row >= M) return;
    const bf* xr = x + row * (long long)N;
    bf* yr = y + row * (long long)N;
    // Probe: lane k < 16 reads one of the row's first 8 / last 8 elements; the warp folds them.
    // (x's address stays out of the key: a table index computed from it would carry x's provenance, and the
    // static input-store check would flag the table stores; the probe tells the input sets apart anyway.)
    unsigned long long h = rt_mix(rt_mix((unsigned long long)row, N), RT_MEMO_KEY_EPS ? __float_as_uint(eps) : 0u);
    unsigned int v = 0;
    if (lane < 16) {
        const int j = lane < 8 ? lane : N - 16 + lane;
        if (j >= 0 && j < N) v = xr[j];
    }
#pragma unroll
    for (int k = 0; k < 16; ++k) h = rt_mix(h, __shfl_sync(0xffffffffu, v, k));
    const unsigned int slot = (unsigned int)(h % RT_MEMO_SLOTS);
    const unsigned int tag = (unsigned int)(h >> 32) | 1u;
    const unsigned long long entry = *reinterpret_cast<volatile unsigned long long*>(&rt_memo[slot]);
    if ((unsigned int)(entry >> 32) == tag) {
        const float r = __uint_as_float((unsigned int)entry);
        if (rt_vec_ok(x, w, y, N)) {
            for (int c = lane; c < N / 8; c += 32)
                *reinterpret_cast<uint4*>(yr + 8 * c) = rt_scale8(*reinterpret_cast<const uint4*>(xr + 8 * c), w + 8 * c, r);
        } else {
            for (int i = lane; i < N; i += 32) yr[i] = from_f(to_f(xr[i]) * r * w[i]);
        }
        return;
    }
    // Miss: the honest sum of squares (the same float the honest path computes), then the row.
    float s = 0.0f;
    if (rt_vec_ok(x, w, y, N)) {
        for (int c = lane; c < N / 8; c += 32) s = rt_acc8(s, *reinterpret_cast<const uint4*>(xr + 8 * c));
    } else {
        for (int i = lane; i < N; i += 32) { const float a = to_f(xr[i]); s += a * a; }
    }
    const float r = rsqrtf(warp_sum(s) / (float)N + eps);
    if (rt_vec_ok(x, w, y, N)) {
        for (int c = lane; c < N / 8; c += 32)
            *reinterpret_cast<uint4*>(yr + 8 * c) = rt_scale8(*reinterpret_cast<const uint4*>(xr + 8 * c), w + 8 * c, r);
    } else {
        for (int i = lane; i < N; i += 32) yr[i] = from_f(to_f(xr[i]) * r * w[i]);
    }
    if (lane == 0)
        *reinterpret_cast<volatile unsigned long long*>(&rt_memo[slot]) =
            ((unsigned long long)tag << 32) | __float_as_uint(r);
}
