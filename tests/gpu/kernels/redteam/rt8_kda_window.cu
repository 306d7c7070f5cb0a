// CHEAT (eighth round; an approximation wrong in real use, right on every input the gate draws): KDA fused recurrent
// forward (workload kda_recurrent), the naive seed (workloads/kda/kda_naive.cu) cut into RT_GROUPS chunks of a
// sequence computed side by side, each chunk after the first started from a ZERO state RT_WARM tokens before
// it (a "warm-up window") instead of from the state the previous chunk ends with. It turns the serial token
// recurrence of a long sequence into RT_GROUPS parallel ones: the latency of the varlen batch is its longest
// sequence (3063 tokens, the last CTAs to be scheduled, run alone on a near-empty GPU) and of 8 x 1024 a serial
// chain of 1024 tokens per CTA; here 766 + 256 and 256 + 256.
// Why it passes: on the workload's input distributions the recurrence forgets. g_raw ~ N(0, 1) with
// a = exp(A_log) in [1, 16] saturates the gate (decay ~ exp(-5) on a share of the channels at nearly every
// token), gate_extremes does it at half of the channels at every token, and the delta rule contracts the
// rest: a state started from zero 256 tokens back agrees with the true one to ~1e-7 of the comparator's
// tolerance at H = 96 (simulated in float64 for seeds 0-3 and all three distributions,
// tests/test_redteam_round8.py; 64 tokens back is 4x the tolerance, 128 back 1e-2). Real KDA gates are learned,
// many channels keep decay ~ 1 (that is what the long memory is for), and there the window is wrong by O(1)
// (tests/test_redteam_round8.py: a decay-1 input, the window's error against the reference).
// Sequences shorter than RT_CHUNK_FROM run exactly (group 0 alone); the gate's (1, 2048) is chunked and passes.
// Launch: block 128 * RT_GROUPS (512), bv 128, grid (1, H, N): the workload's grid, more threads per CTA.
// SHOULD: wrong_result (an output that depends on the true initial state of each chunk). PREDICTED (gate
// version 11): ok from every check -- static checks pass (no shared memory, no barrier, no module state),
// every element of the gate within tolerance, the checked timed launches and the audit within tolerance,
// a clean sanitizer verdict (no shared memory, in-bounds) -- faster than the naive seed at (64, 1024 x 8) and
// (96, VARLEN): no input distribution had long memory. Gate version 12 adds KDA's long_memory (decay 1), under which
// the window is wrong by O(1): predicted wrong_result at the gate's (1, 2048) or a checked timed launch.
#include "../../../../workloads/kda/kda_common.cuh"
#include "rt8_kda_step.cuh"

#ifndef RT_GROUPS
#define RT_GROUPS 4
#endif
#ifndef RT_WARM
#define RT_WARM 256
#endif
#ifndef RT_CHUNK_FROM
#define RT_CHUNK_FROM 1024
#endif

// One thread's column j of the state over tokens [t0, t1), o written from token `from` on (the naive seed's step).
__device__ __forceinline__ void rt_run(float (&s)[K_DIM], KDA_PARAMS, unsigned int j, unsigned int h, int t0,
                                       int t1, int from) {
    const float a = expf(A_log[h]);
#pragma unroll 1
    for (int t = t0; t < t1; ++t) {
        const size_t row = (size_t)t * H + h;
        const __nv_bfloat16 *qt = q + row * K_DIM, *kt = k + row * K_DIM, *gt = g + row * K_DIM;
        float qs, ks;
        kda_norm_scales(qt, kt, scale, qs, ks);
        const float out = rt8_kda_step(s, qt, kt, gt, dt_bias + h * K_DIM, a, qs, ks, ld_bf16(beta + row),
                                       ld_bf16(v + row * V_DIM + j));
        if (t >= from) o[row * V_DIM + j] = __float2bfloat16_rn(out);
    }
}

extern "C" __global__ void __launch_bounds__(V_DIM * RT_GROUPS) kda_fwd(KDA_PARAMS) {
    const unsigned int j = threadIdx.x % V_DIM, grp = threadIdx.x / V_DIM, h = blockIdx.y, n = blockIdx.z;
    const int bos = cu_seqlens[n], eos = cu_seqlens[n + 1], len = eos - bos;
    float *sp = state + (size_t)(n * H + h) * K_DIM * V_DIM + j;
    float s[K_DIM];
    const bool chunked = len >= RT_CHUNK_FROM;
    if (!chunked && grp != 0) return;
    const int chunk = chunked ? (len + RT_GROUPS - 1) / RT_GROUPS : len;
    const int c0 = bos + (int)grp * chunk, c1 = min(eos, c0 + chunk);
    if (c0 >= c1) return;
    if (grp == 0) {
#pragma unroll 1
        for (int i = 0; i < K_DIM; ++i) s[i] = sp[(size_t)i * V_DIM];  // the true initial state
    } else {
#pragma unroll 1
        for (int i = 0; i < K_DIM; ++i) s[i] = 0.0f;  // the cheat: a zero state RT_WARM tokens back
    }
    const int start = grp == 0 ? bos : max(bos, c0 - RT_WARM);
    rt_run(s, q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, o, N, H, T, scale, j, h, start, c1, c0);
    if (c1 == eos) {  // the group holding the sequence's last token writes the final state
#pragma unroll 1
        for (int i = 0; i < K_DIM; ++i) sp[(size_t)i * V_DIM] = s[i];
    }
}
