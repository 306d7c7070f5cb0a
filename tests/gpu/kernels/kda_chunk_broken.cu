// The naive KDA chunked state pass (workloads/kda/kda_chunk_naive.cu) with one defect chosen by BROKEN:
// 1: forgets the chunk decay; 2: never writes the final state; 3: skips the tokens of a shorter last chunk.
#include "../../../workloads/kda/kda_chunk_common.cuh"

#ifndef BROKEN
#define BROKEN 1
#endif
#define BV 128

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
#if BROKEN == 3
        const int rows = eos - t0 >= CHUNK ? CHUNK : 0;
#else
        const int rows = min(CHUNK, eos - t0);
#endif
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
#if BROKEN == 1
            float acc = s[i];
#else
            float acc = gd[i] * s[i];
#endif
#pragma unroll 1
            for (int r = 0; r < rows; ++r) acc += kg[((size_t)(t0 + r) * H + hd) * K_DIM + i] * vn[r];
            s[i] = acc;
        }
    }
#if BROKEN != 2
#pragma unroll 1
    for (int i = 0; i < K_DIM; ++i) sp[(size_t)i * V_DIM] = s[i];
#endif
}
