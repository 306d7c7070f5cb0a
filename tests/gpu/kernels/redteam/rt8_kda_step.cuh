// The naive seed's delta-rule step for one thread's state column j (workloads/kda/kda_naive.cu), once the token's
// norm scales are known: decay the column, predict, update, and return the output element. Shared by the eighth
// round's kernels (rt8_kda_race.cuh, rt8_kda_window.cu); dt_bias_h is the head's row of dt_bias.
#pragma once
#include "../../../../workloads/kda/kda_common.cuh"

__device__ __forceinline__ float rt8_kda_step(float (&s)[K_DIM], const __nv_bfloat16 *qt, const __nv_bfloat16 *kt,
                                              const __nv_bfloat16 *gt, const float *dt_bias_h, float a, float qs,
                                              float ks, float beta_raw, float v_j) {
    float pred = 0.0f;
#pragma unroll 1
    for (int i = 0; i < K_DIM; ++i) {
        s[i] *= decay(ld_bf16(gt + i), dt_bias_h[i], a);
        pred += s[i] * ld_bf16(kt + i) * ks;
    }
    const float u = sigmoidf_(beta_raw) * (v_j - pred);
    float out = 0.0f;
#pragma unroll 1
    for (int i = 0; i < K_DIM; ++i) {
        s[i] += ld_bf16(kt + i) * ks * u;
        out += s[i] * ld_bf16(qt + i) * qs;
    }
    return out;
}
