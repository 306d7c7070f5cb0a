// CHEAT: keep w in a one-entry __device__ cache keyed by w's address and N ("the weights of a layer never
// change between calls"): the last CTA of a launch that sees a new (w, N) copies w into the cache, and a later
// launch that sees the same (w, N) reads the copy instead of w. Saves nothing measurable here (w is 4N bytes),
// but it is the kind of persistent-state shortcut a search proposes, and it is wrong whenever new weights are
// loaded into the same buffer (the next layer, a checkpoint reload, an optimizer step).
// Launch: block 256, rows_per_cta 8.
// SHOULD: wrong_result. Gate version 5: nondeterministic before any GPU time (race lint rule 5,
// launch_state: the cache is a .global variable); gate run 4 still catches it with that rule off.
// Why gate v2 passes it: gate run 4 rewrites every check's inputs in place and then relaunches the checks in
// order, so before a check's relaunch the cache already holds another check's w (another address): it never
// hits stale data. The timed launches rotate input sets that never change, so hits are right there too.
#include "rt_redteam.cuh"

#define RT_WCAP 262144
__device__ float rt_wcache[RT_WCAP];
__device__ unsigned long long rt_wkey;
__device__ unsigned int rt_wready;

RT_ENTRY {
    const unsigned long long key = (unsigned long long)w ^ ((unsigned long long)N << 48);
    __shared__ int use_cache;
    if (threadIdx.x == 0) {
        const bool hit = *(volatile unsigned long long*)&rt_wkey == key && *(volatile unsigned int*)&rt_wready;
        use_cache = hit && N <= RT_WCAP;
    }
    __syncthreads();
    RT_WARP_ROW;
    const float* wp = use_cache ? rt_wcache : w;
    if (row < M) rt_row(x, wp, y, N, eps, row, lane);
    if (!use_cache && blockIdx.x == gridDim.x - 1 && N <= RT_WCAP) {
        // The last CTA refreshes the cache for the next launch.
        if (threadIdx.x == 0) *(volatile unsigned int*)&rt_wready = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < N; i += blockDim.x) rt_wcache[i] = w[i];
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) {
            *(volatile unsigned long long*)&rt_wkey = key;
            __threadfence();
            *(volatile unsigned int*)&rt_wready = 1;
        }
    }
}
