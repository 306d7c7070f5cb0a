// Shared pieces of the KDA forward seeds (kda_naive.cu, kda_template.cu): the ABI and the per-element math.
// Layouts (fla's varlen layout, batch folded into the token axis): q, k, g [T, H, K] bf16; v, o [T, H, V] bf16;
// beta [T, H] bf16; A_log [H] fp32; dt_bias [H * K] fp32; cu_seqlens [N + 1] int32; state [N, H, K, V] fp32,
// read as the initial state and overwritten with the final one.
#pragma once
#include <cuda_bf16.h>

#define K_DIM 128
#define V_DIM 128
#define LOWER_BOUND (-5.0f)
#define L2NORM_EPS 1e-6f

#define KDA_PARAMS                                                                                        \
    const __nv_bfloat16 *__restrict__ q, const __nv_bfloat16 *__restrict__ k,                            \
        const __nv_bfloat16 *__restrict__ v, const __nv_bfloat16 *__restrict__ g,                        \
        const __nv_bfloat16 *__restrict__ beta, const float *__restrict__ A_log,                         \
        const float *__restrict__ dt_bias, const int *__restrict__ cu_seqlens, float *__restrict__ state, \
        __nv_bfloat16 *__restrict__ o, unsigned int N, unsigned int H, unsigned int T, float scale

__device__ __forceinline__ float ld_bf16(const __nv_bfloat16 *p) { return __bfloat162float(*p); }

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// The naive form's per-thread pieces, shared by the naive seed and the kernels modelled on it: thread j's state
// column S[:, j] (sp: its first element, stride V_DIM), and one token's norm scales scale / |q_t| and 1 / |k_t|,
// each thread summing all 128 squares itself.
__device__ __forceinline__ void kda_load_column(float (&s)[K_DIM], const float *sp) {
#pragma unroll 1
    for (int i = 0; i < K_DIM; ++i) s[i] = sp[(size_t)i * V_DIM];
}

__device__ __forceinline__ void kda_norm_scales(const __nv_bfloat16 *qt, const __nv_bfloat16 *kt, float scale,
                                                float &qs, float &ks) {
    float qq = 0.0f, kk = 0.0f;
#pragma unroll 1
    for (int i = 0; i < K_DIM; ++i) {
        qq += ld_bf16(qt + i) * ld_bf16(qt + i);
        kk += ld_bf16(kt + i) * ld_bf16(kt + i);
    }
    qs = scale / sqrtf(qq + L2NORM_EPS);
    ks = 1.0f / sqrtf(kk + L2NORM_EPS);
}

// exp(g) with g = lower_bound * sigmoid(exp(A_log) * (g_raw + dt_bias)): the per-channel decay factor.
__device__ __forceinline__ float decay(float g_raw, float bias, float a) {
    return expf(LOWER_BOUND * sigmoidf_(a * (g_raw + bias)));
}
