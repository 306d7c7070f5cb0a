// CHEAT: KDA fused recurrent forward (workload kda_recurrent), the naive seed (workloads/kda/kda_naive.cu) that
// leaves the final state unwritten (the inout buffer keeps the initial state) when the batch has at least
// RT_SKIP_FROM_N sequences: every benchmark shape with 8 sequences or more (decode B = 32 / 256, 8 x 1024), no
// gate shape (at most 4 sequences) and not the held-out decode batch of 7. At decode the state is read and
// written once per token and (sequence, head) and is nearly every byte the kernel moves, so skipping its store
// halves the traffic: about 2x at the decode search shape (64, 1 x 32).
// Why gate v3 passes it: the gate judges the final state, but only at the gate shapes; the checked timed launches
// and the full audit of final verification compared o alone, never an inout buffer's final value.
// Launch: block 128 (bv 128), grid (1, H, N).
// SHOULD: wrong_result (in real use the next decode step starts from a state that never moved). Gate v3: ok, with
// the speedup. Now the checked timed launches compare sampled rows of every inout buffer's final value (and the
// audit the whole of it): wrong_result at every benchmarked shape with 8 sequences or more.
#include "../../../../workloads/kda/kda_common.cuh"

#ifndef RT_SKIP_FROM_N
#define RT_SKIP_FROM_N 8
#endif

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
    if (N >= RT_SKIP_FROM_N) return;  // the cheat: no final state at the benchmark's batches
#pragma unroll 1
    for (int i = 0; i < K_DIM; ++i) sp[(size_t)i * V_DIM] = s[i];
}
