// KDA chunked prefill, the inter-chunk state pass, naive seed: one thread per state column j (BV threads, one
// CTA per (V-block, head, sequence)); each thread keeps its column S[:, j] and the chunk's v_new[:, j] in local
// arrays and walks the chunks of its sequence in order (see kda_chunk_common.cuh for the math and layouts).
#include "kda_chunk_common.cuh"

#ifndef BV
#define BV 128
#endif
// The chunk's token count, its decayed state entry and whether the final state is stored: defined here as the
// math says; tests/gpu/kernels/kda_chunk_broken.cu redefines one of them to build a wrong state pass.
#ifndef CHUNK_ROWS
#define CHUNK_ROWS(left) min(CHUNK, (left))
#endif
#ifndef CHUNK_DECAY
#define CHUNK_DECAY(g, s) ((g) * (s))
#endif
#ifndef STORE_FINAL_STATE
#define STORE_FINAL_STATE 1
#endif

extern "C" __global__ void __launch_bounds__(BV) kda_chunk_state(KDA_CHUNK_PARAMS) {
    const unsigned int j = blockIdx.x * BV + threadIdx.x, hd = blockIdx.y, n = blockIdx.z;
    const int bos = cu_seqlens[n], eos = cu_seqlens[n + 1];
    int c = chunk_offsets[n];
    float *sp = state + ((size_t)n * H + hd) * K_DIM * V_DIM + j;
    float s[K_DIM], vn[CHUNK];
#pragma unroll 1
    for (int i = 0; i < K_DIM; ++i) s[i] = sp[(size_t)i * V_DIM];
#pragma unroll 1
    for (int t0 = bos; t0 < eos; t0 += CHUNK, ++c) {
        const int rows = CHUNK_ROWS(eos - t0);
        float *hp = h + ((size_t)c * H + hd) * K_DIM * V_DIM + j;
#pragma unroll 1
        for (int i = 0; i < K_DIM; ++i) hp[(size_t)i * V_DIM] = s[i];
#pragma unroll 1
        for (int r = 0; r < rows; ++r) {
            const size_t row = (size_t)(t0 + r) * H + hd;
            float acc = u[row * V_DIM + j];
#pragma unroll 1
            for (int i = 0; i < K_DIM; ++i) acc -= w[row * K_DIM + i] * s[i];
            vn[r] = acc;
            v_new[row * V_DIM + j] = acc;
        }
        const float *gd = gdecay + ((size_t)c * H + hd) * K_DIM;
#pragma unroll 1
        for (int i = 0; i < K_DIM; ++i) {
            float acc = CHUNK_DECAY(gd[i], s[i]);
#pragma unroll 1
            for (int r = 0; r < rows; ++r) acc += kg[((size_t)(t0 + r) * H + hd) * K_DIM + i] * vn[r];
            s[i] = acc;
        }
    }
#if STORE_FINAL_STATE
#pragma unroll 1
    for (int i = 0; i < K_DIM; ++i) sp[(size_t)i * V_DIM] = s[i];
#endif
}
