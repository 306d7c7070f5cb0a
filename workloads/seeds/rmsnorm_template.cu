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
//                                reuse it for every row (register and staged paths); 0: read w per row (L1/L2
//                                hits), in the store loop: ptxas reuses the same registers for every chunk's w, so
//                                its loads wait one after another (L2 round trips in series where w misses L1,
//                                i.e. long rows split over a cluster)
//   CLUSTER      [cluster]       1, 2, 4 or 8 CTAs per row group (__cluster_dims__, compile-time, so a plain
//                                launch works): each CTA holds 1/CLUSTER of the row (chunks interleaved across
//                                the cluster) and the per-CTA partial sums of squares are exchanged through
//                                distributed shared memory (Hopper thread-block clusters, as in QuACK's RMSNorm)
//   MIN_BLOCKS   [min_blocks]    0: __launch_bounds__(THREADS); k > 0: __launch_bounds__(THREADS, k), which
//                                caps registers at 65536 / (k * THREADS)
//   SMEM_STAGES  [smem_stages]   0: the row slice lives in registers (KEEP_IN_REGS); 1 or 2: it is staged in
//                                dynamic shared memory instead, MAX_CHUNKS 16-byte slots per thread and stage,
//                                filled by cp.async.cg 16-byte copies (PTX ISA, data movement: "cp.async", completed
//                                by cp.async.commit_group / wait_group; needs VEC * element bytes = 16 and
//                                KEEP_IN_REGS 1). Each thread reads back only the slots it filled itself, so no
//                                CTA barrier guards the buffer. 2: two stages; row iteration it + 1's copies are
//                                issued before row it's reduction (a row loop: ROW_ITERS > 1), so loads stay in
//                                flight across the reduction and the stores
//   CLUSTER_PUSH [cluster_push]  cluster reduction (CLUSTER > 1 only; no effect at CLUSTER 1). 0: every CTA
//                                writes its partial into its own shared memory, one barrier.cluster round trip
//                                per row group, then reads the CLUSTER partials remotely (ld.shared::cluster).
//                                1: each CTA pushes its partial into every peer's shared memory with st.async
//                                (PTX ISA, data movement: "st.async"), which signals the peer's mbarrier
//                                (complete_tx; PTX ISA, synchronization: "mbarrier"); a CTA waits on its own mbarrier only: no cluster barrier per row,
//                                no remote load latency (QuACK's cluster_reduce). One barrier.cluster pair at the
//                                start (mbarriers initialised before any peer signals them; its wait comes after
//                                the first row's copies are issued) and the one before exit remain
// Launch: block = (THREADS, 1, 1), grid = (CLUSTER * ceil(M / (ROWS_PER_CTA * ROW_ITERS)), 1, 1), dynamic
// shared memory SMEM_STAGES * MAX_CHUNKS * THREADS * 16 bytes (0 by default; over 48 KiB the launcher raises
// the kernel's limit, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES). The grid is a multiple of CLUSTER by construction; all CTAs of a cluster serve the same rows,
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
//
// Why the shared-memory path should reach the copy rate on long rows (not measured yet). Little's law: to
// stream ~4.8 TB/s at ~1 us DRAM latency the GPU needs ~5 MB in flight, ~36 KB per SM of 132. The register
// sets hold that much (MAX_CHUNKS 8 x 16 B x 512 threads = 64 KB per CTA) but only while a CTA is in its load
// phase: each CTA owns one row group, loads it, then stalls with nothing in flight through a warp tree, a
// bar.sync, a barrier.cluster round trip and CLUSTER remote loads (~1-2 us), then stores; 60 registers x 512
// threads allow 2 CTAs per SM, so most of the time fewer than two load phases overlap, and the exit
// cluster.sync couples each CTA's lifetime to its slowest peer. QuACK's long-row configuration (quack/
// rmsnorm_config.py, reduce.py, rmsnorm.py, 0.6.x): 256 threads, one row per CTA, cluster 4 at N = 64K, 8 at 128K
// (16 at 256K), x copied into shared memory with 16-byte cp.async, w into registers while the copies fly, the
// cluster sum pushed with st.async + mbarrier (no cluster barrier per row), x re-read from shared memory for
// the output pass. Here: SMEM_STAGES keeps the slice out of registers (~32-40 registers: 256-thread CTAs are
// bounded by shared memory, e.g. 32 KB at N = 64K / cluster 4 -> 6-7 CTAs and ~200 KB in flight per SM),
// CLUSTER_PUSH takes the cluster barrier and the remote loads off the critical path, and SMEM_STAGES 2 with
// ROW_ITERS > 1 overlaps the next row's copies with this row's reduction and stores (a persistent-style loop).
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
#ifndef SMEM_STAGES
#define SMEM_STAGES 0
#endif
#ifndef CLUSTER_PUSH
#define CLUSTER_PUSH 0
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
static_assert(SMEM_STAGES >= 0 && SMEM_STAGES <= 2, "SMEM_STAGES must be 0, 1 or 2");
static_assert(SMEM_STAGES == 0 || (VEC * sizeof(S) == 16 && KEEP_IN_REGS),
              "SMEM_STAGES > 0 needs 16-byte accesses (VEC * element bytes = 16) and KEEP_IN_REGS 1");
static_assert(CLUSTER_PUSH == 0 || CLUSTER_PUSH == 1, "CLUSTER_PUSH must be 0 or 1");
#define PUSH (CLUSTER > 1 && CLUSTER_PUSH)

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

#if SMEM_STAGES > 0
// Staged row slices: slot (stage s, chunk i) of thread tid is stage_buf[(s * MAX_CHUNKS + i) * THREADS + tid]
// (consecutive threads, consecutive 16-byte slots: conflict-free). Size: the launch's dynamic shared memory.
extern __shared__ uint4 stage_buf[];

__device__ __forceinline__ uint4* stage_slot(int s, int i) {
    return &stage_buf[(s * MAX_CHUNKS + i) * THREADS + threadIdx.x];
}

// One 16-byte asynchronous copy global -> shared, L1 bypassed (PTX ISA "cp.async", .cg: 16 bytes only).
__device__ __forceinline__ void cp_async_16(uint4* dst, const void* src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    const size_t g = __cvta_generic_to_global(src);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(g) : "memory");
}

// This thread's slice of one row into stage s, as one cp.async group (committed even when empty, so
// wait_group counts stay uniform).
__device__ __forceinline__ void stage_row(const S* x, long long row, bool active, int N, int nchunks, int u, int s) {
    const S* xr = x + (active ? row : 0) * N;
#pragma unroll
    for (int i = 0; i < MAX_CHUNKS; ++i) {
        const int c = u + i * STRIDE;
        if (active && c < nchunks) cp_async_16(stage_slot(s, i), xr + (long long)c * VEC);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// Wait until at most PENDING of this thread's cp.async groups are outstanding (its own copies are then visible
// to it; PTX ISA "cp.async.wait_group").
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}

template <int V>
__device__ __forceinline__ void load_staged(Pack<V>& p, int s, int i) {
    *reinterpret_cast<uint4*>(p.e) = *stage_slot(s, i);
}
#endif

#if PUSH
// Push-model cluster reduction (CLUSTER_PUSH): push_part[parity][group][q] receives CTA rank q's partial of
// row group `group`; push_bar[parity] completes a phase once every group of this CTA has armed it
// (arrive.expect_tx of CLUSTER * 4 bytes, arrival count ROWS_PER_CTA) and all CLUSTER * ROWS_PER_CTA partials
// have landed (st.async complete_tx). Two parities, as for the pull model's slots: a peer can be at most one row
// iteration ahead (it cannot finish a row without this CTA's partial of that row).
__shared__ alignas(8) unsigned long long push_bar[2];
__shared__ float push_part[2][ROWS_PER_CTA][CLUSTER];

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// Thread 0 initialises both mbarriers and fences the initialisation for the cluster; every thread then makes a
// relaxed cluster arrival, whose matching wait (push_ready) comes before the first push (the CUTLASS order:
// mbarrier.init, fence.mbarrier_init.release.cluster, barrier.cluster.arrive.relaxed ... barrier.cluster.wait).
__device__ __forceinline__ void push_init() {
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(&push_bar[0])), "n"(ROWS_PER_CTA)
                     : "memory");
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(&push_bar[1])), "n"(ROWS_PER_CTA)
                     : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
}

__device__ __forceinline__ void push_ready() { asm volatile("barrier.cluster.wait;" ::: "memory"); }

// Retry mbarrier.try_wait (acquire, CTA scope) until the phase of parity `phase` has completed. The retry loop
// is written in the asm itself (as CUTLASS's ClusterBarrier::wait is): a C++ loop around a single test lets nvcc
// place other work inside it (it rematerialised address arithmetic there at row_iters > 1), and the static race
// lint accepts only a loop that does nothing but retry the test (evaluators/race_lint.py, rule 4's mbarrier
// form). Predicate and labels are scoped to the asm's block and named per expansion (%=: unique per asm
// instance), so two instantiations of rows_impl never declare the same name twice in one scope.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned phase) {
    asm volatile("{\n\t.reg .pred pw%=;\n"
                 "WAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 pw%=, [%0], %1;\n\t"
                 "@!pw%= bra WAIT_%=;\n\t}" ::"r"(bar), "r"(phase) : "memory");
}
#endif

// Sum over the TPR threads of one row group (and over the CLUSTER CTAs of the row) in a fixed order; every
// thread gets the total. parity alternates per row iteration: the shared slots are double-buffered, so a
// slot is rewritten only after the barrier of the next iteration, by when every reader is done with it.
// With CLUSTER_PUSH, parity carries (row iteration % 4): bit 0 the slot parity, bit 1 the parity of the phase of
// push_bar[slot] this call waits for (that mbarrier completes one phase every second row iteration).
__device__ __forceinline__ float row_sum(float v, int group, int t, int parity) {
#if PUSH
    const int phase = parity >> 1;
    parity &= 1;
#endif
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
#if PUSH
    {
        const unsigned bar = smem_u32(&push_bar[parity]);
        const unsigned rank = cooperative_groups::this_cluster().block_rank();
        if (t == 0) {
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(CLUSTER * 4)
                         : "memory");
        }
        if (t < CLUSTER) {  // thread t pushes this CTA's partial into peer t's slot `rank` (TPR >= 8 >= CLUSTER)
            unsigned slot, rbar;
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(slot)
                         : "r"(smem_u32(&push_part[parity][group][rank])), "r"(t));
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rbar) : "r"(bar), "r"(t));
            asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
                         ::"r"(slot), "r"(__float_as_uint(s)), "r"(rbar) : "memory");
        }
        mbar_wait(bar, (unsigned)phase);
        s = 0.0f;
#pragma unroll
        for (int q = 0; q < CLUSTER; ++q) s += push_part[parity][group][q];  // rank order, as the pull model
    }
#else
    if constexpr (CLUSTER > 1) {
        __shared__ float part[2][ROWS_PER_CTA];
        cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
        if (t == 0) part[parity][group] = s;
        cluster.sync();  // release/acquire across the cluster: every CTA's partial is visible
        s = 0.0f;
#pragma unroll
        for (int q = 0; q < CLUSTER; ++q) s += *cluster.map_shared_rank(&part[parity][group], q);
    }
#endif
    return s;
}

template <int V>
__device__ __forceinline__ void rows_impl(const S* x, const float* w, S* y, int M, int N, float eps,
                                          long long row0, int group, int u, int t) {
    const int nchunks = N / V;  // N % V == 0 here
    // Only the full-width path keeps the row in registers; the narrow fallback streams (keeps the code small).
    constexpr bool WIDE = V == VEC;
    constexpr bool STAGED = SMEM_STAGES > 0 && WIDE;  // the kept slice in shared memory, not registers
    constexpr int KEPT = (KEEP_IN_REGS && WIDE && !STAGED) ? MAX_CHUNKS : 1;
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
#if SMEM_STAGES > 0
    if constexpr (STAGED) {  // prologue: the first row iteration's copies into stage 0
        if (keep && row0 < M) stage_row(x, row0 + group, row0 + group < M, N, nchunks, u, 0);
    }
#endif
#if PUSH
    push_ready();  // the peers' mbarriers are initialised (after the first copies are in flight)
#endif
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
#if SMEM_STAGES > 0
        const int stage = SMEM_STAGES == 2 ? (it & 1) : 0;
        if (STAGED && keep) {
            if constexpr (SMEM_STAGES == 2) {
                if (it + 1 < ROW_ITERS) {  // the next row iteration's copies fly during this one's reduction
                    const long long next = base + ROWS_PER_CTA + group;
                    stage_row(x, next, next < M, N, nchunks, u, stage ^ 1);
                    cp_async_wait<1>();
                } else {
                    cp_async_wait<0>();
                }
            } else {
                if (it > 0) stage_row(x, row, active, N, nchunks, u, 0);  // stage 0 was read back last iteration
                cp_async_wait<0>();
            }
#pragma unroll
            for (int i = 0; i < MAX_CHUNKS; ++i) {
                const int c = u + i * STRIDE;
                if (active && c < nchunks) {
                    Pack<V> p;
                    load_staged<V>(p, stage, i);
                    ss += sum_sq<V>(p);
                }
            }
        } else
#endif
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
#if PUSH
        const float r = rsqrtf(row_sum(ss, group, t, it & 3) / (float)N + eps);
#else
        const float r = rsqrtf(row_sum(ss, group, t, it & 1) / (float)N + eps);
#endif
        if (!active) continue;
#if SMEM_STAGES > 0
        if (STAGED && keep) {
#pragma unroll
            for (int i = 0; i < MAX_CHUNKS; ++i) {
                const int c = u + i * STRIDE;
                if (c < nchunks) {
                    Pack<V> p;
                    load_staged<V>(p, stage, i);
                    if (W_REGS && wregs) {
                        scale_store<V>(yr + (long long)c * V, p, wbuf[i < WKEPT ? i : 0], r);
                    } else {
                        float wv[V];
                        load_w<V>(wv, w + (long long)c * V);
                        scale_store<V>(yr + (long long)c * V, p, wv, r);
                    }
                }
            }
        } else
#endif
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
#if PUSH
    push_init();
#endif
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
