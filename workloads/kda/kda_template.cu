// KDA forward, parametric seed: one CTA per (V-block, head, sequence), a token loop with the state block on chip.
// The CTA's WARPS warps each own COLS state columns; lane l holds rows l, l+32, l+64, l+96 of them in registers,
// so every reduction over K (the two norms, S'^T k and S^T q per column) is a warp shuffle: no shared memory
// and no __syncthreads in the token loop. PREFETCH=1 loads the next token's q, k, g, beta and v before the
// current token's reductions (they do not depend on the state), hiding their latency behind the math.
// Knobs: COLS (columns per warp), WARPS (warps per CTA): V-block = COLS * WARPS columns, a divisor of 128.
#include "kda_common.cuh"

#ifndef COLS
#define COLS 4
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef PREFETCH
#define PREFETCH 1
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#define ROWS (K_DIM / 32)
#define BV (COLS * WARPS)
#if (V_DIM % BV) != 0 || COLS > 32
#error "COLS * WARPS must divide 128 and COLS <= 32"
#endif

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

struct Token {
    float q[ROWS], k[ROWS], g[ROWS], v[COLS], beta;
};

__device__ __forceinline__ void load_token(Token &x, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                           const __nv_bfloat16 *g, const __nv_bfloat16 *v,
                                           const __nv_bfloat16 *beta, size_t row, int lane, int col0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const size_t i = row * K_DIM + lane + 32 * r;
        x.q[r] = ld_bf16(q + i);
        x.k[r] = ld_bf16(k + i);
        x.g[r] = ld_bf16(g + i);
    }
#pragma unroll
    for (int c = 0; c < COLS; ++c) x.v[c] = ld_bf16(v + row * V_DIM + col0 + c);
    x.beta = ld_bf16(beta + row);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS) kda_fwd(KDA_PARAMS) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned int h = blockIdx.y, n = blockIdx.z;
    const int col0 = blockIdx.x * BV + warp * COLS;
    const int bos = cu_seqlens[n], eos = cu_seqlens[n + 1];
    float *sp = state + (size_t)(n * H + h) * K_DIM * V_DIM;
    float s[ROWS][COLS], bias[ROWS];
    const float a = expf(A_log[h]);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        bias[r] = dt_bias[h * K_DIM + lane + 32 * r];
#pragma unroll
        for (int c = 0; c < COLS; ++c) s[r][c] = sp[(size_t)(lane + 32 * r) * V_DIM + col0 + c];
    }
    Token cur;
    if (bos < eos) load_token(cur, q, k, g, v, beta, (size_t)bos * H + h, lane, col0);
    for (int t = bos; t < eos; ++t) {
        const size_t row = (size_t)t * H + h;
        Token nxt;
#if PREFETCH
        if (t + 1 < eos) load_token(nxt, q, k, g, v, beta, row + H, lane, col0);
#endif
        float qq = 0.0f, kk = 0.0f, dec[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            qq += cur.q[r] * cur.q[r];
            kk += cur.k[r] * cur.k[r];
            dec[r] = decay(cur.g[r], bias[r], a);
        }
        const float qs = scale * rsqrtf(warp_sum(qq) + L2NORM_EPS), ks = rsqrtf(warp_sum(kk) + L2NORM_EPS);
        const float b = sigmoidf_(cur.beta);
        float out_mine = 0.0f;
#pragma unroll
        for (int c = 0; c < COLS; ++c) {
            float pred = 0.0f;
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                s[r][c] *= dec[r];
                pred += s[r][c] * cur.k[r];
            }
            const float u = b * (cur.v[c] - warp_sum(pred) * ks);
            float out = 0.0f;
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                s[r][c] += cur.k[r] * ks * u;
                out += s[r][c] * cur.q[r];
            }
            out = warp_sum(out) * qs;
            if (lane == c) out_mine = out;
        }
        if (lane < COLS) o[row * V_DIM + col0 + lane] = __float2bfloat16_rn(out_mine);
#if PREFETCH
        cur = nxt;
#else
        if (t + 1 < eos) load_token(cur, q, k, g, v, beta, row + H, lane, col0);
#endif
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int c = 0; c < COLS; ++c) sp[(size_t)(lane + 32 * r) * V_DIM + col0 + c] = s[r][c];
}
