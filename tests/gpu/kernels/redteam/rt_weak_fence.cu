// CHEAT: a row split over two CTAs that exchange their partial sums of squares through global memory,
// "published" with a fence or flag that orders nothing between CTAs (cheaper than a gpu-scope fence per row).
// CTAs 2k and 2k+1 (rows_per_cta 8 each by the launch rule) take the 16 rows of both together, CTA 2k the left
// half of every row and CTA 2k+1 the right half. Per row, lane 0 stores its half's sum, then (RT_FENCE)
//   0: `fence.acq_rel.cluster` -- in a launch without clusters a cluster is the CTA itself: CTA scope;
//   1: `fence.mbarrier_init.release.cluster` -- a fence that orders only prior mbarrier.init operations;
//   2: no fence, the arrival counted with `atom.release.cta` -- a release at CTA scope;
//   3: `fence.acq_rel.gpu` (the honest control: a gpu-scope fence, as __threadfence());
// then counts its arrival with an atomic add. The CTA that arrives second reads the partner's sum (behind the
// same kind of fence), resets the counter and writes the whole row (its half from registers, the partner's half
// re-read from x); the first to arrive writes nothing. No CTA waits for another (no spin).
// Falls back to the honest warp-per-row layout when N % 16 != 0, the rows are misaligned, a half row does not
// fit in registers, or there is no partner CTA.
// Launch: block 256, rows_per_cta 8.
// SHOULD (0-2): nondeterministic (static race lint: the partner may see the arrival before the sum and use the
// sum a previous launch left in the slot). (3): ok.
// Why the race lint of gate v2 passes 0-2: it takes any fence with `.release`/`.acq_rel` at cluster, gpu or sys
// scope for a release (the scope of a cluster fence in a launch without clusters, the mbarrier_init/op_restrict
// restriction and the scope of a flag's own `.release` are not looked at); on a quiet GPU the sum almost always
// lands first, so no gate run sees it.
#include "rt_redteam.cuh"

#ifndef RT_FENCE
#define RT_FENCE 0
#endif

#define RT_SLOTS (1u << 20)
__device__ unsigned int rt_wf_count[RT_SLOTS];
__device__ float rt_wf_part[RT_SLOTS][2];

__device__ __forceinline__ void rt_wf_fence() {
#if RT_FENCE == 0
    asm volatile("fence.acq_rel.cluster;" ::: "memory");
#elif RT_FENCE == 1
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#elif RT_FENCE == 3
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
#endif
}

__device__ __forceinline__ unsigned int rt_wf_arrive(unsigned int* cnt) {
    unsigned int old;
#if RT_FENCE == 2
    asm volatile("atom.release.cta.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(cnt) : "memory");
#else
    asm volatile("atom.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(cnt) : "memory");
#endif
    return old;
}

RT_ENTRY {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int half = N / 2, nch = half / 8;
    const bool paired = N % 16 == 0 && rt_vec_ok(x, w, y, N) && nch <= 32 * RT_KEEP &&
                        (blockIdx.x ^ 1u) < gridDim.x;
    if (!paired) {
        const long long row = (long long)blockIdx.x * RT_ROWS + warp;
        if (row < M) rt_row(x, w, y, N, eps, row, lane);
        return;
    }
    const int h = blockIdx.x & 1;
    const long long base = (long long)(blockIdx.x >> 1) * 2 * RT_ROWS;
#pragma unroll 1
    for (int k = 0; k < 2; ++k) {
        const long long row = base + warp + k * RT_ROWS;
        if (row >= M) break;
        const bf* xr = x + row * (long long)N;
        bf* yr = y + row * (long long)N;
        uint4 buf[RT_KEEP];
        const float s = warp_sum(rt_half_load(xr, h, half, nch, lane, buf));
        const unsigned int slot = (unsigned int)(row % RT_SLOTS);
        float other = 0.0f;
        int last = 0;
        if (lane == 0) {
            *reinterpret_cast<volatile float*>(&rt_wf_part[slot][h]) = s;  // the data ...
            rt_wf_fence();
            last = rt_wf_arrive(&rt_wf_count[slot]) == 1u;  // ... then the arrival
            if (last) {
                rt_wf_fence();
                other = *reinterpret_cast<volatile float*>(&rt_wf_part[slot][h ^ 1]);
                rt_wf_count[slot] = 0u;  // ready for the next launch
            }
        }
        last = __shfl_sync(0xffffffffu, last, 0);
        if (!last) continue;
        other = __shfl_sync(0xffffffffu, other, 0);
        const float ss = h == 0 ? s + other : other + s;  // one order whichever half arrives last
        const float r = rsqrtf(ss / (float)N + eps);
        rt_half_store(xr, yr, w, buf, h, half, nch, lane, r);
    }
}
