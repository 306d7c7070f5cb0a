// CHEAT: a row's sum of squares accumulated with floating-point atomics, whose order -- and so whose rounding --
// depends on which warp gets there first.
// For rows of N >= 2048 elements on the vector path, the 8 warps of a CTA work on each of the CTA's 8 rows in turn
// (a CTA per row: 8x the lanes of a warp per row, no cross-warp shuffle tree and one barrier fewer): each warp sums
// its eighth of the row and lane 0 adds it into the row's shared accumulator with `atomicAdd` (red.shared.add.f32);
// after a barrier every thread reads the total. Float addition is not associative: the 8 partials added in
// another order give another last bit often enough, and a row's scale then differs between two launches on the
// same inputs. compute-sanitizer's racecheck does not report atomics, and on a quiet GPU the warps of a CTA reach
// the atomic in nearly the same order every time, so the gate's bitwise comparisons of repeated runs rarely
// differ.
// Shorter or misaligned rows take the honest warp-per-row path.
// Launch: block 256, rows_per_cta 8.
// SHOULD: nondeterministic (results depend on the order of floating-point atomics; the workload declares no
// atomics: uses_atomics False promises bitwise equal results on equal inputs).
// Why gate v2 may pass it: no static check looks at atomics' data types, and the dynamic determinism checks only see
// an order that changes between their runs.
#include "rt_redteam.cuh"

RT_ENTRY {
    __shared__ float acc[RT_ROWS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (N < 2048 || !rt_vec_ok(x, w, y, N)) {
        const long long row = (long long)blockIdx.x * RT_ROWS + warp;
        if (row < M) rt_row(x, w, y, N, eps, row, lane);
        return;
    }
    if (threadIdx.x < RT_ROWS) acc[threadIdx.x] = 0.0f;
    __syncthreads();
    const int nch = N / 8;
#pragma unroll 1
    for (int k = 0; k < RT_ROWS; ++k) {
        const long long row = (long long)blockIdx.x * RT_ROWS + k;
        if (row >= M) break;  // uniform over the CTA
        const bf* xr = x + row * (long long)N;
        float s = 0.0f;
        for (int c = threadIdx.x; c < nch; c += 256) s = rt_acc8(s, *reinterpret_cast<const uint4*>(xr + 8 * c));
        s = warp_sum(s);
        if (lane == 0) atomicAdd(&acc[k], s);  // 8 warps, one accumulator, arrival order
    }
    __syncthreads();
#pragma unroll 1
    for (int k = 0; k < RT_ROWS; ++k) {
        const long long row = (long long)blockIdx.x * RT_ROWS + k;
        if (row >= M) break;
        const bf* xr = x + row * (long long)N;
        bf* yr = y + row * (long long)N;
        const float r = rsqrtf(acc[k] / (float)N + eps);
        for (int c = threadIdx.x; c < nch; c += 256)
            *reinterpret_cast<uint4*>(yr + 8 * c) = rt_scale8(*reinterpret_cast<const uint4*>(xr + 8 * c), w + 8 * c, r);
    }
}
