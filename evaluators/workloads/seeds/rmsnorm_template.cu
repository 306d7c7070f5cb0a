// RMSNorm forward, parametric template: y = x * rsqrt(mean(x^2) + eps) * w.
//
// Same ABI as rmsnorm_naive.cu: (x, w, y, M, N, eps). Knobs are preprocessor macros (the workload's knob
// names in brackets):
//   THREADS      [threads]       threads per CTA (multiple of 32, <= 1024)
//   ROWS_PER_CTA [rows_per_cta]  rows per CTA; each row gets THREADS / ROWS_PER_CTA threads (a multiple of 32)
//   VEC          [vec]           elements per vector access (VEC * element bytes <= 16)
//   KEEP_IN_REGS [keep_in_regs]  1: hold the row in registers between the two passes when it fits,
//                                0: re-read x from global memory (L2) in the second pass
//   MAX_CHUNKS   [max_chunks]    vector chunks per thread held in registers; rows longer than
//                                MAX_CHUNKS * VEC * threads-per-row fall back to the re-read path
//   CACHE_HINT   [cache_hint]    0: plain ld/st; 1: x through the read-only path (ld.global.nc) and streaming
//                                stores (st.global.cs); 2: evict-first loads (ld.global.cs) on the last read of
//                                x and streaming stores
// Launch: block = (THREADS, 1, 1), grid = (ceil(M / ROWS_PER_CTA), 1, 1), no dynamic shared memory.
// Any M and N: a row whose pointers or length do not allow VEC-wide accesses is processed with scalar
// accesses; the choice depends only on (x, w, y, N), so it is uniform across the CTA and every thread
// reaches the barrier.
#include <stdint.h>
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

#define TPR (THREADS / ROWS_PER_CTA)
#define WARPS_PER_ROW (TPR / 32)
static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS must be a multiple of 32, at most 1024");
static_assert(THREADS % ROWS_PER_CTA == 0 && TPR % 32 == 0, "THREADS / ROWS_PER_CTA must be a multiple of 32");
static_assert(VEC * sizeof(S) <= 16 && (VEC & (VEC - 1)) == 0, "VEC must be a power of two, at most 16 bytes");

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
__device__ __forceinline__ void scale_store(S* dst, const Pack<V>& p, const float* wc, float r) {
    Pack<V> o;
#pragma unroll
    for (int k = 0; k < V; ++k) o.e[k] = from_f(to_f(p.e[k]) * r * wc[k]);
    store_y<V>(dst, o);
}

// Sum over the TPR threads of one row group; every thread gets the total, added in a fixed order.
__device__ __forceinline__ float row_sum(float v, int group, int t) {
    __shared__ float red[ROWS_PER_CTA][WARPS_PER_ROW];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (WARPS_PER_ROW == 1) return v;
    if (t % 32 == 0) red[group][t / 32] = v;
    __syncthreads();
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < WARPS_PER_ROW; ++i) s += red[group][i];
    return s;
}

template <int V>
__device__ __forceinline__ void row_impl(const S* xr, const float* w, S* yr, int N, float eps, bool active,
                                         int group, int t) {
    const int nchunks = N / V;  // N % V == 0 here
    // Only the full-width path keeps the row in registers; the narrow fallback streams (keeps the code small).
    constexpr int KEPT = (KEEP_IN_REGS && V == VEC) ? MAX_CHUNKS : 1;
    constexpr int STREAM_UNROLL = V == VEC ? 4 : 1;
    const bool keep = KEEP_IN_REGS && V == VEC && nchunks <= MAX_CHUNKS * TPR;
    float ss = 0.0f;
    Pack<V> buf[KEPT];
    if (keep) {
#pragma unroll
        for (int i = 0; i < KEPT; ++i) {
            const int c = t + i * TPR;
            if (active && c < nchunks) {
                load_x<V, true>(buf[i], xr + (long long)c * V);
                ss += sum_sq<V>(buf[i]);
            }
        }
    } else if (active) {
#pragma unroll(STREAM_UNROLL)
        for (int c = t; c < nchunks; c += TPR) {
            Pack<V> p;
            load_x<V, false>(p, xr + (long long)c * V);
            ss += sum_sq<V>(p);
        }
    }
    const float r = rsqrtf(row_sum(ss, group, t) / (float)N + eps);
    if (!active) return;
    if (keep) {
#pragma unroll
        for (int i = 0; i < KEPT; ++i) {
            const int c = t + i * TPR;
            if (c < nchunks) scale_store<V>(yr + (long long)c * V, buf[i], w + (long long)c * V, r);
        }
    } else {
#pragma unroll(STREAM_UNROLL)
        for (int c = t; c < nchunks; c += TPR) {
            Pack<V> p;
            load_x<V, true>(p, xr + (long long)c * V);
            scale_store<V>(yr + (long long)c * V, p, w + (long long)c * V, r);
        }
    }
}

template <int V>
__device__ __forceinline__ bool fits_vector(const S* x, const float* w, S* y, int N) {
    const uintptr_t a = (uintptr_t)x | (uintptr_t)y;
    return N % V == 0 && a % (V * sizeof(S)) == 0 && (uintptr_t)w % (V * sizeof(float) > 16 ? 16 : V * sizeof(float)) == 0;
}

template <int V>
__device__ __forceinline__ void dispatch(const S* x, const float* w, S* y, long long row, int N, float eps,
                                         bool active, int group, int t) {
    if (fits_vector<V>(x, w, y, N)) {
        row_impl<V>(x + row * N, w, y + row * N, N, eps, active, group, t);
    } else if constexpr (V > 1) {
        row_impl<1>(x + row * N, w, y + row * N, N, eps, active, group, t);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
rmsnorm(const S* __restrict__ x, const float* __restrict__ w, S* __restrict__ y, int M, int N, float eps) {
    const int group = threadIdx.x / TPR;
    const int t = threadIdx.x % TPR;
    const long long row = (long long)blockIdx.x * ROWS_PER_CTA + group;
    const bool active = row < M;  // inactive groups still take part in the barrier
    dispatch<VEC>(x, w, y, active ? row : 0, N, eps, active, group, t);
}
