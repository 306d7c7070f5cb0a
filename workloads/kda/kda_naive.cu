// KDA forward, naive seed: one thread per state column j (128 threads, one CTA per (sequence, head)); each
// thread keeps its column S[:, j] in a local array and recomputes the norms, the gate and beta itself.
#include "kda_common.cuh"

extern "C" __global__ void __launch_bounds__(V_DIM) kda_fwd(KDA_PARAMS) {
    const unsigned int j = threadIdx.x, h = blockIdx.y, n = blockIdx.z;
    const int bos = cu_seqlens[n], eos = cu_seqlens[n + 1];
    float *sp = state + (size_t)(n * H + h) * K_DIM * V_DIM + j;
    float s[K_DIM];
    kda_load_column(s, sp);
    const float a = expf(A_log[h]);
#pragma unroll 1
    for (int t = bos; t < eos; ++t) {
        const size_t row = (size_t)t * H + h;
        const __nv_bfloat16 *qt = q + row * K_DIM, *kt = k + row * K_DIM, *gt = g + row * K_DIM;
        float qs, ks;
        kda_norm_scales(qt, kt, scale, qs, ks);
        float pred = 0.0f;
#pragma unroll 1
        for (int i = 0; i < K_DIM; ++i) {
            s[i] *= decay(ld_bf16(gt + i), dt_bias[h * K_DIM + i], a);
            pred += s[i] * ld_bf16(kt + i) * ks;
        }
        const float u = sigmoidf_(ld_bf16(beta + row)) * (ld_bf16(v + row * V_DIM + j) - pred);
        float out = 0.0f;
#pragma unroll 1
        for (int i = 0; i < K_DIM; ++i) {
            s[i] += ld_bf16(kt + i) * ks * u;
            out += s[i] * ld_bf16(qt + i) * qs;
        }
        o[row * V_DIM + j] = __float2bfloat16_rn(out);
    }
#pragma unroll 1
    for (int i = 0; i < K_DIM; ++i) sp[(size_t)i * V_DIM] = s[i];
}
