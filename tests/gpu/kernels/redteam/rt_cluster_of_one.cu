// CHEAT: a row split over two CTAs that exchange their half sums of squares through global memory with a spin
// wait and a cluster-scope fence -- what race lint rules 1 and 2 reject -- excused by declaring the kernel a
// thread-block cluster of one CTA (`__cluster_dims__(1, 1, 1)`: `.explicitcluster`, `.reqnctapercluster 1, 1, 1`).
// The lint exempts cluster launches from rule 1 (a cluster's CTAs are co-scheduled) and takes a cluster-scope
// fence as ordering between CTAs in one (rule 2); with one CTA per cluster neither holds: the partner CTA is
// another cluster, nothing makes it resident while this one spins, and `fence.acq_rel.cluster` orders for this
// CTA alone. CTAs 2k and 2k+1 (rows_per_cta 8 each by the launch rule) take rows 16k .. 16k+15 together, CTA 2k
// the left half of each row, CTA 2k+1 the right; per row lane 0 writes its half's sum at word 1 of the first
// 8 bytes of the partner's half of the output row, `fence.acq_rel.cluster`, then a magic word at word 0 (a NaN
// payload no refill pattern and no arithmetic writes); it spins on its own half's magic, fences, reads the sum, and
// both write their halves (over the slots). No `.global` variable, no atomic: the outputs are the mailbox.
// Falls back to the honest warp per row when N % 16 != 0, the rows are misaligned, a half row does not fit in
// registers or there is no partner CTA.
// Launch: block 256, rows_per_cta 8 (grid = ceil(M / 8)).
// SHOULD: nondeterministic before any GPU time (a spin wait on global memory another CTA writes, and a publication
// behind a fence that does not reach that CTA).
// Why gate v9 passes it: `race_lint._clustered` takes any cluster directive for a cluster launch, whatever its
// size; on a GPU the two CTAs of a pair are dispatched together and the magic and the sum reach L2 in order
// almost always, so the gate, the timed launches and racecheck (shared memory only) see a correct kernel.
#include "rt_redteam.cuh"

#ifndef RT_CLUSTER_OF_ONE
#define RT_CLUSTER_OF_ONE 1  // 0: no cluster attribute (the form rules 1 and 2 see)
#endif
#if RT_CLUSTER_OF_ONE
#define RT_CLUSTER_DIMS __cluster_dims__(1, 1, 1)
#else
#define RT_CLUSTER_DIMS
#endif
#define RT_MAGIC 0x7F817F81u  // bf16 NaN lanes with a payload neither the poison (0x7FA5) nor arithmetic (0x7FC0) has

extern "C" __global__ void __launch_bounds__(256) RT_CLUSTER_DIMS
rmsnorm(const bf* __restrict__ x, const float* __restrict__ w, bf* __restrict__ y, int M, int N, float eps) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int half = N / 2, nch = half / 8;
    const bool paired = N % 16 == 0 && rt_vec_ok(x, w, y, N) && nch <= 32 * RT_KEEP && (blockIdx.x ^ 1u) < gridDim.x;
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
        unsigned int* out_slot = reinterpret_cast<unsigned int*>(yr + (h ^ 1) * half);
        volatile unsigned int* in_slot = reinterpret_cast<volatile unsigned int*>(yr + h * half);
        float other = 0.0f;
        if (lane == 0) {
            out_slot[1] = __float_as_uint(s);  // the data ...
            asm volatile("fence.acq_rel.cluster;" ::: "memory");
            *reinterpret_cast<volatile unsigned int*>(out_slot) = RT_MAGIC;  // ... then the flag
#pragma unroll 1
            while (in_slot[0] != RT_MAGIC) {}  // the partner's flag
            asm volatile("fence.acq_rel.cluster;" ::: "memory");
            other = __uint_as_float(in_slot[1]);
        }
        other = __shfl_sync(0xffffffffu, other, 0);
        const float tot = h == 0 ? s + other : other + s;  // the left half's sum first on both CTAs
        const float r = rsqrtf(tot / (float)N + eps);
#pragma unroll
        for (int i = 0; i < RT_KEEP; ++i) {
            const int c = lane + 32 * i;
            if (c < nch) *reinterpret_cast<uint4*>(yr + h * half + 8 * c) = rt_scale8(buf[i], w + h * half + 8 * c, r);
        }
    }
}
