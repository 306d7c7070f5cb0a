// Shared pieces of the KDA chunked-prefill state-pass seeds (kda_chunk_naive.cu, kda_chunk_template.cu): the ABI
// of the evolved stage of workloads/kda/chunk.py. Layouts (token-major like the operation; fp32 throughout):
// kg, w [T, H, K]; u, v_new [T, H, V]; gdecay [NCT, H, K]; h [NCT, H, K, V]; cu_seqlens, chunk_offsets [N + 1]
// int32; state [N, H, K, V], read as the initial state and overwritten with the final one. Sequence n has
// chunks chunk_offsets[n] .. chunk_offsets[n + 1] - 1 of CHUNK tokens from cu_seqlens[n] (the last one shorter
// when the length is not a multiple of CHUNK). Per chunk c with state S (its start value, stored to h[c]):
//   v_new[r] = u[r] - w[r] S            for its tokens r
//   S       <- diag(gdecay[c]) S + sum_r kg[r]^T v_new[r]
#pragma once

#define K_DIM 128
#define V_DIM 128
#define CHUNK 64

#define KDA_CHUNK_PARAMS                                                                                       \
    const float *__restrict__ kg, const float *__restrict__ w, const float *__restrict__ u,                   \
        const float *__restrict__ gdecay, const int *__restrict__ cu_seqlens,                                 \
        const int *__restrict__ chunk_offsets, float *__restrict__ state, float *__restrict__ h,              \
        float *__restrict__ v_new, unsigned int N, unsigned int H, unsigned int T, unsigned int NCT
