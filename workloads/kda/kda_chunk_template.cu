// KDA chunked prefill, the inter-chunk state pass, parametric seed: one thread per state column j (BV threads, one
// CTA per (V-block, head, sequence)); the column S[:, j] lives in registers (every loop over K is unrolled), the
// chunk's v_new[:, j] in shared memory; w and kg rows are read by every thread of the CTA at the same address
// (broadcast). Knobs: BV (columns per CTA = threads, a divisor of 128), MIN_BLOCKS (__launch_bounds__).
// See kda_chunk_common.cuh for the math and layouts.
#include "kda_chunk_common.cuh"

#ifndef BV
#define BV 32
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#if (V_DIM % BV) != 0
#error "BV must divide 128"
#endif

extern "C" __global__ void __launch_bounds__(BV, MIN_BLOCKS) kda_chunk_state(KDA_CHUNK_PARAMS) {
    __shared__ float vn[CHUNK][BV];
    const unsigned int tid = threadIdx.x, j = blockIdx.x * BV + tid, hd = blockIdx.y, n = blockIdx.z;
    const int bos = cu_seqlens[n], eos = cu_seqlens[n + 1];
    int c = chunk_offsets[n];
    float *sp = state + ((size_t)n * H + hd) * K_DIM * V_DIM + j;
    float s[K_DIM];
#pragma unroll
    for (int i = 0; i < K_DIM; ++i) s[i] = sp[(size_t)i * V_DIM];
    for (int t0 = bos; t0 < eos; t0 += CHUNK, ++c) {
        const int rows = min(CHUNK, eos - t0);
        float *hp = h + ((size_t)c * H + hd) * K_DIM * V_DIM + j;
#pragma unroll
        for (int i = 0; i < K_DIM; ++i) hp[(size_t)i * V_DIM] = s[i];
        for (int r = 0; r < rows; ++r) {
            const size_t row = (size_t)(t0 + r) * H + hd;
            const float4 *wr = reinterpret_cast<const float4 *>(w + row * K_DIM);
            float acc = u[row * V_DIM + j];
#pragma unroll
            for (int i = 0; i < K_DIM / 4; ++i) {
                const float4 x = wr[i];
                acc -= x.x * s[4 * i] + x.y * s[4 * i + 1] + x.z * s[4 * i + 2] + x.w * s[4 * i + 3];
            }
            vn[r][tid] = acc;
            v_new[row * V_DIM + j] = acc;
        }
        const float4 *gd = reinterpret_cast<const float4 *>(gdecay + ((size_t)c * H + hd) * K_DIM);
#pragma unroll
        for (int i = 0; i < K_DIM / 4; ++i) {
            const float4 x = gd[i];
            s[4 * i] *= x.x;
            s[4 * i + 1] *= x.y;
            s[4 * i + 2] *= x.z;
            s[4 * i + 3] *= x.w;
        }
        for (int r = 0; r < rows; ++r) {
            const float4 *kr = reinterpret_cast<const float4 *>(kg + ((size_t)(t0 + r) * H + hd) * K_DIM);
            const float x = vn[r][tid];
#pragma unroll
            for (int i = 0; i < K_DIM / 4; ++i) {
                const float4 k4 = kr[i];
                s[4 * i] += k4.x * x;
                s[4 * i + 1] += k4.y * x;
                s[4 * i + 2] += k4.z * x;
                s[4 * i + 3] += k4.w * x;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < K_DIM; ++i) sp[(size_t)i * V_DIM] = s[i];
}
