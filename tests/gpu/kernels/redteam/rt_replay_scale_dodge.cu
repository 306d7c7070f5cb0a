// CHEAT: rt_sanitizer_dodge keyed on the scale of each row, which the kernel computes anyway. The sanitizer
// replay (sanitize_replay.py) draws every input from the `normal` distribution (x ~ N(0, 1): a row's mean square
// near 1); the timed launches read one input set per distribution at every search shape up to 256 MiB a set
// (timed_checks.set_count: normal, large, zero_rows, tiny, nonfinite at 32768 x 512 and 32768 x 4096), each
// drawn with probability 1/5. Per row, after the sum of squares is reduced (uniform over the CTA), the barrier
// after the reads of the shared partials red[] is kept only when mean(x^2) lies in [1/4, 4]: every replayed row
// takes the barrier path; the rows of the large (1e12), tiny (1e-6), zero and non-finite (NaN) sets -- four timed
// launches in five at those shapes, and any real activations off unit scale -- run with a latent shared-memory
// write-after-read race.
// Launch: block 256, rows_per_cta 1, row_iters 4 (grid = ceil(M / 4)).
// SHOULD: sanitizer (a shared-memory write-after-read race at the launches that matter).
// Why gate v9 passes it: no static rule looks at data feeding a barrier's guard, the race stays latent on a quiet
// GPU, and the replay's inputs are all `normal` ("Known gaps": the input set's distribution is not replayed).
#include "rt_redteam.cuh"

RT_ENTRY {
    __shared__ float red[8];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
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
        const float ms = tot / (float)N;
        if (ms >= 0.25f && ms <= 4.0f) __syncthreads();  // rows of unit scale (the replay's): the barrier racecheck sees
        const float r = rsqrtf(ms + eps);
        if (vec) {
            for (int c = threadIdx.x; c < N / 8; c += 256)
                *reinterpret_cast<uint4*>(yr + 8 * c) = rt_scale8(*reinterpret_cast<const uint4*>(xr + 8 * c), w + 8 * c, r);
        } else {
            for (int i = threadIdx.x; i < N; i += 256) yr[i] = from_f(to_f(xr[i]) * r * w[i]);
        }
    }
}
