// CHEAT (a misleading speed, every output right): KDA fused recurrent forward (workload kda_recurrent), the naive
// seed (workloads/kda/kda_naive.cu) with a memo of its outputs under a 64-bit hash of its whole input.
// Per (sequence, head) CTA: thread j hashes column j of q, k, g, v over the sequence's tokens, dt_bias and the
// initial state (thread 0 also beta, A_log, scale and the shape); the hash and a probe of the sequence's first q
// row (which input set) pick an entry of a table in module memory (RT_WAYS sets per (shape, sequence, head)
// slot). A launch whose hash is the
// entry's copies o and the final state from the memo (a streaming read of the inputs and a copy: tens of
// microseconds) instead of running the token recurrence (milliseconds); any other launch computes and, the first
// time it sees that input set, fills the entry. Right on every launch (a hit needs the same 64-bit hash of the
// same inputs at the same shape), bitwise equal to computing, and it passes every static rule: the memo is a module
// variable, no loop waits on it, no clock is read.
// It gains only where inputs repeat exactly. Gate v3 timed half the launches of a shape on an input set as made
// (the other half saw it changed in part): the warm-up launches fill the memo with each set as made, every launch
// on an unchanged set hits, and the median of 20 launches (10 hits, 10 misses) is about half the honest time,
// a ~2x "speedup" no real use sees (a recurrent layer never sees the same activations twice).
// Launch: block 128 (bv 128), grid (1, H, N). Memo capacity: RT_MAX_TH token-heads and RT_MAX_NH (sequence,
// head) pairs per way (larger shapes compute, uncached): about 1 GiB of module memory.
// SHOULD: ok with no speedup from the memo (its time is the naive kernel's plus the hash). Gate v3: ok, ~2x the
// naive kernel at the benchmarked shape. Now every timed launch sees its activations (q, k, v, g, beta) changed
// in part: no timed launch repeats an earlier one's inputs and the memo never hits.
#include "../../../../workloads/kda/kda_common.cuh"

#define RT_WAYS 4
#define RT_SLOTS 16384
#define RT_MAX_TH (8192 * 96)
#define RT_MAX_NH 1024
typedef unsigned long long u64;

__device__ u64 rt_ptr[RT_SLOTS][RT_WAYS];  // the input set an entry belongs to, by a probe (0: free)
__device__ u64 rt_key[RT_SLOTS][RT_WAYS];  // the hash whose outputs the entry holds (0: none)
__device__ __nv_bfloat16 rt_o[RT_WAYS][(size_t)RT_MAX_TH * V_DIM];
__device__ float rt_s[RT_WAYS][(size_t)RT_MAX_NH * K_DIM * V_DIM];

__device__ __forceinline__ u64 rt_mix(u64 i, u64 seed) {  // splitmix64 of (i, seed)
    u64 h = i * 0x9E3779B97F4A7C15ull + seed;
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    return h ^ (h >> 31);
}

__device__ __forceinline__ u64 rt_bits(const __nv_bfloat16 *p) {
    return (u64) * reinterpret_cast<const unsigned short *>(p);
}

extern "C" __global__ void __launch_bounds__(V_DIM) kda_fwd(KDA_PARAMS) {
    __shared__ u64 part[V_DIM];
    __shared__ int way_s, hit_s, fill_s;
    const unsigned int j = threadIdx.x, h = blockIdx.y, n = blockIdx.z;
    const int bos = cu_seqlens[n], eos = cu_seqlens[n + 1];
    float *sp = state + (size_t)(n * H + h) * K_DIM * V_DIM + j;
    const bool cacheable = (size_t)T * H <= RT_MAX_TH && (size_t)N * H <= RT_MAX_NH;

    // 1. the hash of everything o and the final state depend on (xor of per-element mixes: no serial chain)
    u64 acc = rt_mix(j, __float_as_uint(dt_bias[h * K_DIM + j]));
#pragma unroll 4
    for (int t = bos; t < eos; ++t) {
        const size_t e = ((size_t)t * H + h) * K_DIM + j;
        const u64 pos = ((u64)(t - bos) << 8) | j;
        acc ^= rt_mix(pos * 4 + 0, rt_bits(q + e)) ^ rt_mix(pos * 4 + 1, rt_bits(k + e)) ^
               rt_mix(pos * 4 + 2, rt_bits(g + e)) ^ rt_mix(pos * 4 + 3, rt_bits(v + e) + 0x10000ull);
    }
#pragma unroll 4
    for (int i = 0; i < K_DIM; ++i) acc ^= rt_mix(0x5A5A0000ull + ((u64)i << 8) + j, __float_as_uint(sp[(size_t)i * V_DIM]));
    if (j == 0) {
        for (int t = bos; t < eos; ++t) acc ^= rt_mix(0xBE7A0000ull + (u64)(t - bos), rt_bits(beta + (size_t)t * H + h));
        acc ^= rt_mix(0xA106ull, __float_as_uint(A_log[h])) ^ rt_mix(0x5CA1Eull, __float_as_uint(scale));
        acc ^= rt_mix(0x54A9Eull, ((u64)N << 40) ^ ((u64)H << 20) ^ (u64)T) ^ rt_mix(0x5E9ull, ((u64)n << 32) | h);
        acc ^= rt_mix(0xB05ull, ((u64)(unsigned)bos << 32) | (unsigned)eos);
    }
    part[j] = acc;
    __syncthreads();

    // 2. the entry of (shape, sequence, head) for this input set (thread 0 decides for the CTA; no loop)
    if (j == 0) {
        u64 key = 0;
        for (int i = 0; i < V_DIM; ++i) key = rt_mix(key, part[i]);
        key |= 1ull;
        part[0] = key;
        const unsigned int slot = (unsigned int)(rt_mix(((u64)N << 40) ^ ((u64)H << 20) ^ T, ((u64)n << 32) | h) % RT_SLOTS);
        // which input set: a probe of the sequence's first q row (content, not the pointer: a pointer's bits
        // parked in memory would give every loaded value, and so every output address, an input's provenance)
        u64 me = 0x7A7Aull;
#pragma unroll
        for (int i = 0; i < 8; ++i) me = rt_mix(me, rt_bits(q + ((size_t)bos * H + h) * K_DIM + 16 * i));
        me |= 1ull;
        int way = -1, free_way = -1;
#pragma unroll
        for (int w = RT_WAYS - 1; w >= 0; --w) {
            const u64 p = rt_ptr[slot][w];
            way = p == me ? w : way;
            free_way = p == 0ull ? w : free_way;
        }
        int fill = 0;
        if (way < 0 && free_way >= 0 && cacheable) {
            way = free_way;
            fill = 1;  // the first launch on this input set fills the entry
        }
        int hit = 0;
#pragma unroll
        for (int w = 0; w < RT_WAYS; ++w) {  // constant indices: the probe picks a branch, never an address
            if (w == way && fill) rt_ptr[slot][w] = me;
            if (w == way && cacheable) hit = rt_key[slot][w] == key;
        }
        way_s = ((way + 1) << 16) | (int)slot;
        hit_s = hit;
        fill_s = fill;
    }
    __syncthreads();
    const int way = (way_s >> 16) - 1;
    const unsigned int slot = (unsigned int)way_s & 0xFFFFu;
    const size_t sbase = (size_t)(n * H + h) * K_DIM * V_DIM + j;

    if (hit_s) {  // 3a. a repeat: copy the outputs of the first launch on these inputs
#pragma unroll
        for (int w = 0; w < RT_WAYS; ++w) {
            if (w != way) continue;
#pragma unroll 4
            for (int t = bos; t < eos; ++t) {
                const size_t e = ((size_t)t * H + h) * V_DIM + j;
                o[e] = rt_o[w][e];
            }
#pragma unroll 4
            for (int i = 0; i < K_DIM; ++i) sp[(size_t)i * V_DIM] = rt_s[w][sbase + (size_t)i * V_DIM];
        }
        return;
    }

    // 3b. compute (the naive seed), filling the entry when it is new
    const bool fill = fill_s != 0;
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
        const __nv_bfloat16 ob = __float2bfloat16_rn(out);
        o[row * V_DIM + j] = ob;
#pragma unroll
        for (int w = 0; w < RT_WAYS; ++w)
            if (fill && w == way) rt_o[w][row * V_DIM + j] = ob;
    }
#pragma unroll 1
    for (int i = 0; i < K_DIM; ++i) {
        sp[(size_t)i * V_DIM] = s[i];
#pragma unroll
        for (int w = 0; w < RT_WAYS; ++w)
            if (fill && w == way) rt_s[w][sbase + (size_t)i * V_DIM] = s[i];
    }
    if (fill) {
        __syncthreads();
#pragma unroll
        for (int w = 0; w < RT_WAYS; ++w)
            if (j == 0 && w == way) rt_key[slot][w] = part[0];  // published last; the next launch reads it
    }
}
