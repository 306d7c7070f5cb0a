// RMSNorm forward, parametric template (v2): y = x * rsqrt(mean(x^2) + eps) * w.
//
// Same ABI as rmsnorm_naive.cu: (x, w, y, M, N, eps). Knobs are preprocessor macros (the workload's knob
// names in brackets):
//   THREADS      [threads]       threads per CTA (multiple of 32, <= 1024)
//   ROWS_PER_CTA [rows_per_cta]  rows a CTA handles at once; each row gets TPR = THREADS / ROWS_PER_CTA
//                                threads: a multiple of 32 (warps + shared-memory sum) or 8 / 16 (a sub-warp
//                                lane group reduced with shuffles over that width; for N <= 2048)
//   VEC          [vec]           elements per vector access of x and y (VEC * element bytes <= 16); w is read
//                                with float4 / float2 accesses (two float4 per 8-element bf16 chunk)
//   KEEP_IN_REGS [keep_in_regs]  1: hold the row slice in registers between the two passes when it fits,
//                                0: re-read x from global memory (L2) in the second pass
//   MAX_CHUNKS   [max_chunks]    VEC-wide chunks per thread held in registers (x: MAX_CHUNKS * VEC * elt / 4
//                                registers); rows longer than MAX_CHUNKS * VEC * TPR * CLUSTER fall back to
//                                the re-read path. All loads of a thread are issued before the first use.
//   CACHE_HINT   [cache_hint]    0: plain ld/st; 1: x through the read-only path (ld.global.nc) and streaming
//                                stores (st.global.cs); 2: evict-first loads (ld.global.cs) on the last read of
//                                x and streaming stores
//   ROW_ITERS    [row_iters]     row loop: a CTA handles ROWS_PER_CTA * ROW_ITERS rows, ROWS_PER_CTA at a time
//   W_REGS       [w_regs]        1: load this thread's slice of w into registers once, before the row loop, and
//                                reuse it for every row (register path only); 0: read w per row (L1/L2 hits)
//   CLUSTER      [cluster]       1, 2, 4 or 8 CTAs per row group (__cluster_dims__, compile-time, so a plain
//                                launch works): each CTA holds 1/CLUSTER of the row (chunks interleaved across
//                                the cluster) and the per-CTA partial sums of squares are exchanged through
//                                distributed shared memory (Hopper thread-block clusters, as in QuACK's RMSNorm)
//   MIN_BLOCKS   [min_blocks]    0: __launch_bounds__(THREADS); k > 0: __launch_bounds__(THREADS, k), which
//                                caps registers at 65536 / (k * THREADS)
// Launch: block = (THREADS, 1, 1), grid = (CLUSTER * ceil(M / (ROWS_PER_CTA * ROW_ITERS)), 1, 1), no dynamic
// shared memory. The grid is a multiple of CLUSTER by construction; all CTAs of a cluster serve the same rows,
// so rows past M make whole CTAs inactive together, and inactive row groups inside a CTA still join every
// barrier.
// Any M and N: a row whose pointers or length do not allow VEC-wide accesses is processed with scalar
// accesses; the choice depends only on (x, w, y, N), so it is uniform across the CTA and the cluster.
// Deterministic: every sum is added in a fixed order (shuffle tree, warp partials in warp order, CTA partials
// in cluster-rank order).
//
// Recommended knob sets per N range (bf16 x, fp32 w; rmsnorm.py TUNED_KNOBS holds the same table): the fastest
// measured variant at each benchmark shape on an H200 (experiments/results/rmsnorm_baselines_bf16.md, 2026-11-30;
// % of the device-to-device copy bandwidth; TPR = threads per row):
//   N <= 512      threads 256, rows_per_cta 16 (TPR 16),  max_chunks 4, row_iters 4    63% (256), 79% (512)
//   N <= 2048     threads 128, rows_per_cta 4  (TPR 32),  max_chunks 8                 93% (1024), 98% (2048)
//   N <= 8192     threads 256, rows_per_cta 1,            max_chunks 4                 97-98%
//   N <= 16384    threads 512, rows_per_cta 1,            max_chunks 4                 98%
//   N <= 32768    threads 512, rows_per_cta 1,            max_chunks 8                 98%
//   N <= 65536    threads 256, cluster 4,                 max_chunks 8                 84%
//   N <= 131072   threads 512, cluster 4,                 max_chunks 8                 81%
//   N <= 262144   threads 512, cluster 8,                 max_chunks 8                 76%
// w_regs 1 (w held over the row loop) measured slower at every shape.
#include <stdint.h>
#include <cooperative_groups.h>
#include "rmsnorm_common.cuh"

#ifndef THREADS
#define THREADS 256
#endif
#ifndef ROWS_PER_CTA
#define ROWS_PER_CTA 1
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef KEEP_IN_REGS
#define KEEP_IN_REGS 1
#endif
#ifndef MAX_CHUNKS
#define MAX_CHUNKS 8
#endif
#ifndef CACHE_HINT
#define CACHE_HINT 0
#endif
#ifndef ROW_ITERS
#define ROW_ITERS 1
#endif
#ifndef W_REGS
#define W_REGS 0
#endif
#ifndef CLUSTER
#define CLUSTER 1
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 0
#endif

#define TPR (THREADS / ROWS_PER_CTA)
#define LANES (TPR < 32 ? TPR : 32)
#define WARPS_PER_ROW (TPR < 32 ? 1 : TPR / 32)
#define STRIDE (TPR * CLUSTER)  // chunk stride of one thread along its row
static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS must be a multiple of 32, at most 1024");
static_assert(THREADS % ROWS_PER_CTA == 0 && (TPR % 32 == 0 || TPR == 8 || TPR == 16),
              "THREADS / ROWS_PER_CTA must be a multiple of 32, or 8 or 16");
static_assert(VEC * sizeof(S) <= 16 && (VEC & (VEC - 1)) == 0, "VEC must be a power of two, at most 16 bytes");
static_assert(CLUSTER == 1 || CLUSTER == 2 || CLUSTER == 4 || CLUSTER == 8, "CLUSTER must be 1, 2, 4 or 8");
static_assert(ROW_ITERS >= 1 && MAX_CHUNKS >= 1, "ROW_ITERS and MAX_CHUNKS must be >= 1");

template <int BYTES> struct Raw;
template <> struct Raw<16> { typedef uint4 t; };
template <> struct Raw<8> { typedef uint2 t; };
template <> struct Raw<4> { typedef unsigned int t; };
template <> struct Raw<2> { typedef unsigned short t; };

// One vector access of V elements as a single integer load/store of V * sizeof(S) bytes.
template <int V> struct Pack {
    typedef typename Raw<V * sizeof(S)>::t R;
    alignas(V * sizeof(S)) S e[V];
};

template <int V, bool LAST>
__device__ __forceinline__ void load_x(Pack<V>& p, const S* src) {
    typedef typename Pack<V>::R R;
    const R* q = reinterpret_cast<const R*>(src);
#if CACHE_HINT == 1
    *reinterpret_cast<R*>(p.e) = __ldg(q);
#elif CACHE_HINT == 2
    if (LAST) *reinterpret_cast<R*>(p.e) = __ldcs(q);
    else *reinterpret_cast<R*>(p.e) = *q;
#else
    *reinterpret_cast<R*>(p.e) = *q;
#endif
}

// V floats of w with the widest aligned accesses (fits_vector checked the alignment): float4 for V >= 4.
template <int V>
__device__ __forceinline__ void load_w(float (&wv)[V], const float* src) {
    if constexpr (V % 4 == 0) {
#pragma unroll
        for (int k = 0; k < V; k += 4) {
            const float4 q = __ldg(reinterpret_cast<const float4*>(src + k));
            wv[k] = q.x; wv[k + 1] = q.y; wv[k + 2] = q.z; wv[k + 3] = q.w;
        }
    } else if constexpr (V == 2) {
        const float2 q = __ldg(reinterpret_cast<const float2*>(src));
        wv[0] = q.x; wv[1] = q.y;
    } else {
        wv[0] = __ldg(src);
    }
}

template <int V>
__device__ __forceinline__ void store_y(S* dst, const Pack<V>& p) {
    typedef typename Pack<V>::R R;
#if CACHE_HINT == 0
    *reinterpret_cast<R*>(dst) = *reinterpret_cast<const R*>(p.e);
#else
    __stcs(reinterpret_cast<R*>(dst), *reinterpret_cast<const R*>(p.e));
#endif
}

template <int V>
__device__ __forceinline__ float sum_sq(const Pack<V>& p) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const float v = to_f(p.e[k]);
        s += v * v;
    }
    return s;
}

template <int V>
__device__ __forceinline__ void scale_store(S* dst, const Pack<V>& p, const float (&wv)[V], float r) {
    Pack<V> o;
#pragma unroll
    for (int k = 0; k < V; ++k) o.e[k] = from_f(to_f(p.e[k]) * r * wv[k]);
    store_y<V>(dst, o);
}

// Sum over the TPR threads of one row group (and over the CLUSTER CTAs of the row) in a fixed order; every
// thread gets the total. parity alternates per row iteration: the shared slots are double-buffered, so a
// slot is rewritten only after the barrier of the next iteration, by when every reader is done with it.
__device__ __forceinline__ float row_sum(float v, int group, int t, int parity) {
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);  // xor < LANES: own group
    float s = v;
    if constexpr (WARPS_PER_ROW > 1) {
        __shared__ float red[2][ROWS_PER_CTA][WARPS_PER_ROW];
        if (t % 32 == 0) red[parity][group][t / 32] = v;
        __syncthreads();
        s = 0.0f;
#pragma unroll
        for (int i = 0; i < WARPS_PER_ROW; ++i) s += red[parity][group][i];
    }
    if constexpr (CLUSTER > 1) {
        __shared__ float part[2][ROWS_PER_CTA];
        cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
        if (t == 0) part[parity][group] = s;
        cluster.sync();  // release/acquire across the cluster: every CTA's partial is visible
        s = 0.0f;
#pragma unroll
        for (int q = 0; q < CLUSTER; ++q) s += *cluster.map_shared_rank(&part[parity][group], q);
    }
    return s;
}

template <int V>
__device__ __forceinline__ void rows_impl(const S* x, const float* w, S* y, int M, int N, float eps,
                                          long long row0, int group, int u, int t) {
    const int nchunks = N / V;  // N % V == 0 here
    // Only the full-width path keeps the row in registers; the narrow fallback streams (keeps the code small).
    constexpr bool WIDE = V == VEC;
    constexpr int KEPT = (KEEP_IN_REGS && WIDE) ? MAX_CHUNKS : 1;
    constexpr int WKEPT = (KEEP_IN_REGS && W_REGS && WIDE) ? MAX_CHUNKS : 1;
    constexpr int STREAM_UNROLL = WIDE ? 2 : 1;  // the re-read path must not set the register count
    const bool keep = KEEP_IN_REGS && WIDE && nchunks <= MAX_CHUNKS * STRIDE;
    const bool wregs = keep && W_REGS;
    float wbuf[WKEPT][V];
    if (W_REGS && wregs) {
#pragma unroll
        for (int i = 0; i < WKEPT; ++i) {
            const int c = u + i * STRIDE;
            if (c < nchunks) load_w<V>(wbuf[i], w + (long long)c * V);
        }
    }
#pragma unroll 1
    for (int it = 0; it < ROW_ITERS; ++it) {
        const long long base = row0 + (long long)it * ROWS_PER_CTA;
        if (base >= M) break;  // uniform over the CTA and the cluster (row0 is the cluster's first row)
        const long long row = base + group;
        const bool active = row < M;  // inactive groups still take part in the barriers
        const S* xr = x + (active ? row : 0) * N;
        S* yr = y + (active ? row : 0) * N;
        float ss = 0.0f;
        Pack<V> buf[KEPT];
        if (keep) {
            // Issue every load first (predicated), then use them: MAX_CHUNKS * 16 bytes in flight per thread.
#pragma unroll
            for (int i = 0; i < KEPT; ++i) {
                const int c = u + i * STRIDE;
                if (active && c < nchunks) load_x<V, true>(buf[i], xr + (long long)c * V);
            }
#pragma unroll
            for (int i = 0; i < KEPT; ++i) {
                const int c = u + i * STRIDE;
                if (active && c < nchunks) ss += sum_sq<V>(buf[i]);
            }
        } else if (active) {
#pragma unroll(STREAM_UNROLL)
            for (int c = u; c < nchunks; c += STRIDE) {
                Pack<V> p;
                load_x<V, false>(p, xr + (long long)c * V);
                ss += sum_sq<V>(p);
            }
        }
        const float r = rsqrtf(row_sum(ss, group, t, it & 1) / (float)N + eps);
        if (!active) continue;
        if (keep) {
#pragma unroll
            for (int i = 0; i < KEPT; ++i) {
                const int c = u + i * STRIDE;
                if (c < nchunks) {
                    if (W_REGS && wregs) {
                        scale_store<V>(yr + (long long)c * V, buf[i], wbuf[i < WKEPT ? i : 0], r);
                    } else {
                        float wv[V];
                        load_w<V>(wv, w + (long long)c * V);
                        scale_store<V>(yr + (long long)c * V, buf[i], wv, r);
                    }
                }
            }
        } else {
#pragma unroll(STREAM_UNROLL)
            for (int c = u; c < nchunks; c += STRIDE) {
                Pack<V> p;
                float wv[V];
                load_x<V, true>(p, xr + (long long)c * V);
                load_w<V>(wv, w + (long long)c * V);
                scale_store<V>(yr + (long long)c * V, p, wv, r);
            }
        }
    }
}

template <int V>
__device__ __forceinline__ bool fits_vector(const S* x, const float* w, S* y, int N) {
    const uintptr_t a = (uintptr_t)x | (uintptr_t)y;
    constexpr uintptr_t WALIGN = V * sizeof(float) > 16 ? 16 : V * sizeof(float);
    return N % V == 0 && a % (V * sizeof(S)) == 0 && (uintptr_t)w % WALIGN == 0;
}

#if CLUSTER > 1
#define CLUSTER_ATTR __cluster_dims__(CLUSTER, 1, 1)
#else
#define CLUSTER_ATTR
#endif
#if MIN_BLOCKS > 0
#define BOUNDS __launch_bounds__(THREADS, MIN_BLOCKS)
#else
#define BOUNDS __launch_bounds__(THREADS)
#endif

extern "C" __global__ void BOUNDS CLUSTER_ATTR
rmsnorm(const S* __restrict__ x, const float* __restrict__ w, S* __restrict__ y, int M, int N, float eps) {
    const int group = threadIdx.x / TPR;
    const int t = threadIdx.x % TPR;
#if CLUSTER > 1
    const int rank = (int)cooperative_groups::this_cluster().block_rank();
#else
    const int rank = 0;
#endif
    const int u = rank * TPR + t;  // this thread's index along the row, across the cluster
    const long long row0 = (long long)(blockIdx.x / CLUSTER) * (ROWS_PER_CTA * ROW_ITERS);
    if (fits_vector<VEC>(x, w, y, N)) {
        rows_impl<VEC>(x, w, y, M, N, eps, row0, group, u, t);
    } else {
        if constexpr (VEC > 1) rows_impl<1>(x, w, y, M, N, eps, row0, group, u, t);
    }
#if CLUSTER > 1
    // No CTA may leave (freeing its shared memory) while a peer may still read its partial sums.
    cooperative_groups::this_cluster().sync();
#endif
}
