// Shared body of the eighth round's KDA race kernels (rt8_kda_long_race.cu, rt8_kda_latent_war.cu,
// rt8_kda_heads_race.cu): the naive seed (workloads/kda/kda_naive.cu, one thread per state column, 128 threads,
// one CTA per (sequence, head), bv 128) with its per-thread 2 x 128-element norm loops replaced by a CTA-wide
// reduction: lane sums of q_j^2 and k_j^2 by warp shuffles, one partial per warp in shared memory, a barrier,
// every thread adding the four partials in the same order. The honest form double-buffers the partials by token
// parity (the template's LAYOUT 1 argument: one __syncthreads per token suffices). Each kernel defines
// RT_KEYED(pos, len) (pos = token index in its sequence, len = its length; true where it cheats) and RT_FORM:
//   0: where keyed, the barrier is dropped (a read-after-write race: a warp adds the partials of peers that have
//      not yet written this token's, i.e. those of two tokens ago);
//   1: where keyed, the barrier is kept but both parities use one slot (a write-after-read race: a fast warp
//      overwrites the slot with token t + 1's partial while a slow one may still read token t's; the window is a
//      whole token of math against four shared loads, so it practically never opens, and racecheck reports it
//      wherever it runs).
// Every static check of gate version 11 passes (tests/test_redteam_round8.py): the race is in shared memory,
// which is racecheck's, and version 11's sanitizer replay ran sequences of at most 63 tokens (Workload.
// sanitizer_shapes (1, 17), (3, 1, 63, 17), (2, 5, 1, 33, 2)) and, at H = 64, only the decode batch (one token a
// sequence). Version 12 adds (4, 65, 129), where every racy path runs under racecheck.
#pragma once
#include "../../../../workloads/kda/kda_common.cuh"
#include "rt8_kda_step.cuh"

#ifndef RT_FORM
#define RT_FORM 0
#endif

__device__ __forceinline__ float rt_warp_sum(float x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

extern "C" __global__ void __launch_bounds__(V_DIM) kda_fwd(KDA_PARAMS) {
    __shared__ float red[2][2][V_DIM / 32];  // [slot][q.q, k.k][warp]
    const unsigned int j = threadIdx.x, h = blockIdx.y, n = blockIdx.z, lane = j & 31, warp = j >> 5;
    const int bos = cu_seqlens[n], eos = cu_seqlens[n + 1], len = eos - bos;
    float *sp = state + (size_t)(n * H + h) * K_DIM * V_DIM + j;
    float s[K_DIM];
    kda_load_column(s, sp);
    const float a = expf(A_log[h]);
#pragma unroll 1
    for (int t = bos; t < eos; ++t) {
        const size_t row = (size_t)t * H + h;
        const __nv_bfloat16 *qt = q + row * K_DIM, *kt = k + row * K_DIM, *gt = g + row * K_DIM;
        const int pos = t - bos;
#if defined(RT_HONEST) && RT_HONEST
        const bool keyed = false;  // the control: the honest double-buffered form at every token
        (void)len;
#else
        const bool keyed = RT_KEYED(pos, len);
#endif
        const float qj = ld_bf16(qt + j), kj = ld_bf16(kt + j);
        const float pq = rt_warp_sum(qj * qj), pk = rt_warp_sum(kj * kj);
#if RT_FORM == 1
        const int slot = keyed ? 0 : (pos & 1);
#else
        const int slot = pos & 1;
#endif
        if (lane == 0) {
            red[slot][0][warp] = pq;
            red[slot][1][warp] = pk;
        }
#if RT_FORM == 1
        __syncthreads();
#else
        if (!keyed) __syncthreads();  // the cheat: no barrier where keyed
#endif
        float qq = 0.0f, kk = 0.0f;
#pragma unroll
        for (int w = 0; w < V_DIM / 32; ++w) {
            qq += red[slot][0][w];
            kk += red[slot][1][w];
        }
        const float qs = scale / sqrtf(qq + L2NORM_EPS), ks = 1.0f / sqrtf(kk + L2NORM_EPS);
        const float out = rt8_kda_step(s, qt, kt, gt, dt_bias + h * K_DIM, a, qs, ks, ld_bf16(beta + row),
                                       ld_bf16(v + row * V_DIM + j));
        o[row * V_DIM + j] = __float2bfloat16_rn(out);
    }
#pragma unroll 1
    for (int i = 0; i < K_DIM; ++i) sp[(size_t)i * V_DIM] = s[i];
}
