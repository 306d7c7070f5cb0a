// KDA forward, parametric seed: one CTA per (V-block, head, sequence), a token loop with the state block on chip.
// V-block BV = COLS * WARPS columns (a divisor of 128) in both layouts.
// LAYOUT 0 (rows on lanes): the CTA's WARPS warps each own COLS state columns; lane l holds rows l, l+32, l+64,
// l+96 of them in registers, so every reduction over K (the two norms, S'^T k and S^T q per column) is a warp
// shuffle: no shared memory and no __syncthreads in the token loop.
// LAYOUT 1 (lanes along V): thread (row group rg, column group cg) holds COLS consecutive rows x 4 consecutive
// columns (one float4 per row), BV / 4 lanes side by side along a row, so the state moves in coalesced 16-byte
// accesses and a thread's q, k, g rows are one vector load each; S'^T k, S'^T q and the three dot products of
// the token are reduced in one round (shuffles across the warp's row groups, then shared memory across warps,
// one __syncthreads per token), o = qs (S'^T q + u k.q ks) avoiding a second reduction after the update.
// PREFETCH = P >= 1 loads token t + P's q, k, g, beta and v while token t is computed (they do not depend on the
// state), hiding their latency behind P tokens of math; 0 loads each token when it is needed.
// Knobs: COLS, WARPS, PREFETCH (0, 1, 2, 4), MIN_BLOCKS (__launch_bounds__), LAYOUT (0, 1).
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
#ifndef LAYOUT
#define LAYOUT 0
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

#if LAYOUT == 0
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
#if PREFETCH > 1
    Token ahead[PREFETCH - 1];  // tokens t + 1 .. t + PREFETCH - 1 (register ring: constant indices only)
#pragma unroll
    for (int j = 0; j < PREFETCH - 1; ++j)
        if (bos + 1 + j < eos) load_token(ahead[j], q, k, g, v, beta, (size_t)(bos + 1 + j) * H + h, lane, col0);
#endif
    for (int t = bos; t < eos; ++t) {
        const size_t row = (size_t)t * H + h;
        Token nxt;
#if PREFETCH == 1
        if (t + 1 < eos) load_token(nxt, q, k, g, v, beta, row + H, lane, col0);
#elif PREFETCH > 1
        if (t + PREFETCH < eos) load_token(nxt, q, k, g, v, beta, row + (size_t)PREFETCH * H, lane, col0);
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
#if PREFETCH == 1
        cur = nxt;
#elif PREFETCH > 1
        cur = ahead[0];
#pragma unroll
        for (int j = 0; j + 1 < PREFETCH - 1; ++j) ahead[j] = ahead[j + 1];
        ahead[PREFETCH - 2] = nxt;
#else
        if (t + 1 < eos) load_token(cur, q, k, g, v, beta, row + H, lane, col0);
#endif
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int c = 0; c < COLS; ++c) sp[(size_t)(lane + 32 * r) * V_DIM + col0 + c] = s[r][c];
}

#else  // LAYOUT == 1: lanes along V (header comment)
#define CG (BV / 4)   // column groups of 4 = lanes side by side along a state row
#define RGW (32 / CG) // row groups per warp
#define RK COLS       // rows per thread: 128 / (WARPS * RGW) = COLS
#define NW (RK / 2)   // 32-bit words holding a thread's RK bf16 values of q, k or g
#define NRED 11       // values reduced per token: S'^T k and S'^T q (4 columns each), q.q, k.k, k.q
#if BV < 4 || RK < 2
#error "LAYOUT 1 needs COLS * WARPS >= 4 and COLS >= 2"
#endif

// A token's data as the thread needs it, still bf16 (half the registers of a prefetch ring of floats):
// q, k, g at rows r0 .. r0 + RK - 1, v at columns c0 .. c0 + 3, beta.
struct Raw {
    unsigned int q[NW], k[NW], g[NW];
    uint2 v;
    float beta;
};

// RK consecutive bf16 starting at p (2 RK-byte aligned: r0 is a multiple of RK) in the widest loads possible.
__device__ __forceinline__ void ld_words(unsigned int (&w)[NW], const __nv_bfloat16 *p) {
    if constexpr (NW % 4 == 0) {
#pragma unroll
        for (int j = 0; j < NW / 4; ++j) {
            const uint4 x = reinterpret_cast<const uint4 *>(p)[j];
            w[4 * j] = x.x, w[4 * j + 1] = x.y, w[4 * j + 2] = x.z, w[4 * j + 3] = x.w;
        }
    } else if constexpr (NW == 2) {
        const uint2 x = *reinterpret_cast<const uint2 *>(p);
        w[0] = x.x, w[1] = x.y;
    } else {
        w[0] = *reinterpret_cast<const unsigned int *>(p);
    }
}

// Element i of RK bf16 packed two to a word (little endian: the lower address in the low half).
__device__ __forceinline__ float unpack(const unsigned int (&w)[NW], int i) {
    const unsigned int x = w[i >> 1];
    return __uint_as_float((i & 1) ? (x & 0xffff0000u) : (x << 16));
}

__device__ __forceinline__ void load_raw(Raw &x, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                         const __nv_bfloat16 *g, const __nv_bfloat16 *v,
                                         const __nv_bfloat16 *beta, size_t row, int r0, int c0) {
    ld_words(x.q, q + row * K_DIM + r0);
    ld_words(x.k, k + row * K_DIM + r0);
    ld_words(x.g, g + row * K_DIM + r0);
    x.v = *reinterpret_cast<const uint2 *>(v + row * V_DIM + c0);
    x.beta = ld_bf16(beta + row);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS) kda_fwd(KDA_PARAMS) {
    const int tid = threadIdx.x;
    const int cg = tid % CG, r0 = (tid / CG) * RK;  // tid / CG: the row group, warp * RGW + lane / CG
    const unsigned int h = blockIdx.y, n = blockIdx.z;
    const int c0 = blockIdx.x * BV + cg * 4;
    // The state first: its loads depend only on the block index, so they overlap the cu_seqlens round trip.
    float *sp = state + (size_t)(n * H + h) * K_DIM * V_DIM + (size_t)r0 * V_DIM + c0;
    float4 s[RK];
#pragma unroll
    for (int i = 0; i < RK; ++i) s[i] = *reinterpret_cast<const float4 *>(sp + (size_t)i * V_DIM);
    float bias[RK];
#pragma unroll
    for (int i = 0; i < RK; i += 2) {
        const float2 b2 = *reinterpret_cast<const float2 *>(dt_bias + h * K_DIM + r0 + i);
        bias[i] = b2.x, bias[i + 1] = b2.y;
    }
    const float a = expf(A_log[h]);
    const int bos = cu_seqlens[n], eos = cu_seqlens[n + 1];
#if WARPS > 1
    // Per-warp partials, double-buffered by token parity: one __syncthreads per token suffices, since a warp
    // writing token t + 1's buffer has passed token t's barrier, after every warp's reads of token t - 1.
    __shared__ float4 red[2][3][WARPS][CG];
    const int lane = tid & 31, warp = tid >> 5;
#endif
    Raw cur;
    if (bos < eos) load_raw(cur, q, k, g, v, beta, (size_t)bos * H + h, r0, c0);
#if PREFETCH > 1
    Raw ahead[PREFETCH - 1];  // tokens t + 1 .. t + PREFETCH - 1 (register ring: constant indices only)
#pragma unroll
    for (int j = 0; j < PREFETCH - 1; ++j)
        if (bos + 1 + j < eos) load_raw(ahead[j], q, k, g, v, beta, (size_t)(bos + 1 + j) * H + h, r0, c0);
#endif
    for (int t = bos, buf = 0; t < eos; ++t, buf ^= 1) {
        const size_t row = (size_t)t * H + h;
#if PREFETCH > 0
        Raw nxt;
        if (t + PREFETCH < eos) load_raw(nxt, q, k, g, v, beta, row + (size_t)PREFETCH * H, r0, c0);
#endif
        float p[NRED], kf[RK];
#pragma unroll
        for (int j = 0; j < NRED; ++j) p[j] = 0.0f;
#pragma unroll
        for (int i = 0; i < RK; ++i) {
            const float qi = unpack(cur.q, i), ki = unpack(cur.k, i), d = decay(unpack(cur.g, i), bias[i], a);
            kf[i] = ki;
            s[i].x *= d, s[i].y *= d, s[i].z *= d, s[i].w *= d;
            p[0] += s[i].x * ki, p[1] += s[i].y * ki, p[2] += s[i].z * ki, p[3] += s[i].w * ki;
            p[4] += s[i].x * qi, p[5] += s[i].y * qi, p[6] += s[i].z * qi, p[7] += s[i].w * qi;
            p[8] += qi * qi, p[9] += ki * ki, p[10] += ki * qi;
        }
        // Sum over the warp's row groups (lanes CG apart); every lane ends with the same bits (xor butterfly).
#pragma unroll
        for (int off = CG; off < 32; off <<= 1)
#pragma unroll
            for (int j = 0; j < NRED; ++j) p[j] += __shfl_xor_sync(0xffffffffu, p[j], off);
#if WARPS > 1
        if (lane < CG) {
            red[buf][0][warp][cg] = make_float4(p[0], p[1], p[2], p[3]);
            red[buf][1][warp][cg] = make_float4(p[4], p[5], p[6], p[7]);
            red[buf][2][warp][cg] = make_float4(p[8], p[9], p[10], 0.0f);
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < NRED; ++j) p[j] = 0.0f;
        // The same order in every thread (one u per column CTA-wide). Not unrolled: hoisting all 12 WARPS
        // loads cost ~30 registers at WARPS = 8 (106 vs 62 at cols=2), i.e. occupancy, for ~30 cycles a warp.
#pragma unroll 1
        for (int w = 0; w < WARPS; ++w) {
            const float4 x = red[buf][0][w][cg], y = red[buf][1][w][cg], z = red[buf][2][w][cg];
            p[0] += x.x, p[1] += x.y, p[2] += x.z, p[3] += x.w;
            p[4] += y.x, p[5] += y.y, p[6] += y.z, p[7] += y.w;
            p[8] += z.x, p[9] += z.y, p[10] += z.z;
        }
#endif
        const float qs = scale * rsqrtf(p[8] + L2NORM_EPS), ks = rsqrtf(p[9] + L2NORM_EPS);
        const float b = sigmoidf_(cur.beta), kq = p[10] * ks;
        const __nv_bfloat162 v01 = *reinterpret_cast<const __nv_bfloat162 *>(&cur.v.x),
                             v23 = *reinterpret_cast<const __nv_bfloat162 *>(&cur.v.y);
        float u[4] = {__low2float(v01), __high2float(v01), __low2float(v23), __high2float(v23)}, out[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            u[c] = b * (u[c] - p[c] * ks);        // u = beta (v - S'^T k / |k|)
            out[c] = (p[4 + c] + u[c] * kq) * qs;  // S^T q = S'^T q + u (k.q) / |k|
        }
#pragma unroll
        for (int i = 0; i < RK; ++i) {
            const float kn = kf[i] * ks;
            s[i].x += kn * u[0], s[i].y += kn * u[1], s[i].z += kn * u[2], s[i].w += kn * u[3];
        }
        if (tid < CG) {  // row group 0 writes the CTA's o[t, h, cols]: 4 bf16 per thread, 8 bytes
            const __nv_bfloat162 o01 = __floats2bfloat162_rn(out[0], out[1]), o23 = __floats2bfloat162_rn(out[2], out[3]);
            uint2 w;
            w.x = *reinterpret_cast<const unsigned int *>(&o01), w.y = *reinterpret_cast<const unsigned int *>(&o23);
            *reinterpret_cast<uint2 *>(o + row * V_DIM + c0) = w;
        }
#if PREFETCH == 0
        if (t + 1 < eos) load_raw(cur, q, k, g, v, beta, row + H, r0, c0);
#elif PREFETCH == 1
        cur = nxt;
#else
        cur = ahead[0];
#pragma unroll
        for (int j = 0; j + 1 < PREFETCH - 1; ++j) ahead[j] = ahead[j + 1];
        ahead[PREFETCH - 2] = nxt;
#endif
    }
#pragma unroll
    for (int i = 0; i < RK; ++i) *reinterpret_cast<float4 *>(sp + (size_t)i * V_DIM) = s[i];
}
#endif
