// CHEAT: a row split over the two CTAs of a thread-block cluster (as the template's `cluster` knob does), the
// half sums of squares exchanged through distributed shared memory, with the cluster barrier that keeps a CTA
// alive until its peer has read its partial dropped ("the last cluster.sync() does nothing: every CTA already
// has what it needs"). Cluster c (CTAs 2c and 2c+1, cluster rank r) takes rows 8c .. 8c+7, a warp per row; rank r
// reads half r of each row (rt_half_load), lane 0 stores the half's sum in part[warp] (its own shared memory),
// `barrier.cluster.arrive` + `barrier.cluster.wait` (cluster.sync(): every partial is visible), then reads the
// peer's part[warp] through `mapa` (cluster.map_shared_rank) and writes its half of the row. RT_EXIT_SYNC 1 keeps
// the trailing cluster.sync() (the honest control, what the template does); 0 drops it: a CTA that finishes first
// exits while its peer may still be reading its shared memory, which then belongs to no CTA (CUDA C++ Programming
// Guide, "Distributed Shared Memory": all distributed shared memory operations must complete before a block
// exits). Deleting one instruction pair is an edit a search makes (a line-deleting mutation, an LLM "removing a
// redundant sync"), and it saves the cluster's final rendezvous at every row group.
// Falls back to an honest warp per row on rank 0 (rank 1 idle, no distributed shared memory) when N % 16 != 0, the
// rows are misaligned or a half row does not fit in registers.
// Launch: block 256, rows_per_cta 8, cluster 2 (grid = 2 ceil(M / 8); `__cluster_dims__(2, 1, 1)`).
// SHOULD: nondeterministic before any GPU time (RT_EXIT_SYNC 0): a read of another CTA's shared memory after which
// no cluster barrier holds that CTA. RT_EXIT_SYNC 1: ok.
// Why gate v9 passes it: no static rule looks at distributed shared memory (the race lint follows global memory,
// clocks, atomics and state; rule 1 exempts cluster launches), and on the GPU the read almost always lands before
// the peer's shared memory is handed to a new CTA (it would have to be reallocated and written in between): the
// gate, the checked timed launches and racecheck (which reports hazards between accesses, not an access to a
// block that has exited) do not see it.
#include <cooperative_groups.h>
#include "rt_redteam.cuh"

#ifndef RT_EXIT_SYNC
#define RT_EXIT_SYNC 0
#endif

extern "C" __global__ void __launch_bounds__(256) __cluster_dims__(2, 1, 1)
rmsnorm(const bf* __restrict__ x, const float* __restrict__ w, bf* __restrict__ y, int M, int N, float eps) {
    __shared__ float part[RT_ROWS];
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int h = (int)cluster.block_rank();
    const int half = N / 2, nch = half / 8;
    const long long row = (long long)(blockIdx.x >> 1) * RT_ROWS + warp;
    const bool split = N % 16 == 0 && rt_vec_ok(x, w, y, N) && nch <= 32 * RT_KEEP;  // uniform over the cluster
    if (!split) {
        if (h == 0 && row < M) rt_row(x, w, y, N, eps, row, lane);
        return;
    }
    const bool active = row < M;
    const bf* xr = x + (active ? row : 0) * (long long)N;
    bf* yr = y + (active ? row : 0) * (long long)N;
    uint4 buf[RT_KEEP];
    float s = 0.0f;
    if (active) s = warp_sum(rt_half_load(xr, h, half, nch, lane, buf));
    if (lane == 0) part[warp] = s;
    cluster.sync();  // every CTA's partials are written (release/acquire at cluster scope)
    const float other = *cluster.map_shared_rank(&part[warp], h ^ 1);
    const float tot = h == 0 ? s + other : other + s;  // rank 0's half first on both CTAs: the same sum
    if (active) {
        const float r = rsqrtf(tot / (float)N + eps);
#pragma unroll
        for (int i = 0; i < RT_KEEP; ++i) {
            const int c = lane + 32 * i;
            if (c < nch) *reinterpret_cast<uint4*>(yr + h * half + 8 * c) = rt_scale8(buf[i], w + h * half + 8 * c, r);
        }
    }
#if RT_EXIT_SYNC
    cluster.sync();  // no CTA leaves while its peer may still read part[]
#endif
}
