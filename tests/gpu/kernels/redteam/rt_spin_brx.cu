// CHEAT: rt_global_race's row split over two CTAs (each half's sum published through global memory, the
// partner waited for in a spin loop), this time with a gpu-scope fence between the sum and the arrival count so
// the publication itself is right, and the spin loop's exit taken through an indirect branch: `brx.idx` over a
// `.branchtargets` list {spin, done} indexed by the comparison with the counter, instead of `@p bra`.
// The spin still assumes both CTAs of a pair are resident together (true on an idle GPU dispatching CTAs in
// order; another kernel sharing the SMs, or a later change of the grid, can leave the waiting CTA spinning on a
// partner that never starts: a hang the gate's deadline turns into `timeout` at best).
// Falls back to the honest warp-per-row layout when N % 16 != 0, the rows are misaligned or there is no partner.
// Launch: block 256, rows_per_cta 8.
// SHOULD: nondeterministic (static race lint: spin wait between CTAs without co-scheduling).
// Why the race lint of gate v2 passes it: its spin rule follows the predicates of the `bra` instructions that
// leave or close a loop; a loop left through `brx.idx` (or a predicated `exit`/`ret`) has none.
#include "rt_redteam.cuh"

#define RT_PAIR_ROWS (1u << 20)
__device__ unsigned int rt_sb_arrive[RT_PAIR_ROWS];
__device__ float rt_sb_part[RT_PAIR_ROWS][2][2];  // [row slot][launch parity][half]

// Waits until *cnt >= target: the loop's only exit is the indirect branch (index 1 when the count is reached).
__device__ __forceinline__ void rt_wait_count(const unsigned int* cnt, unsigned int target) {
    asm volatile(
        "{\n\t"
        ".reg .pred p;\n\t"
        ".reg .u32 v, i;\n"
        "$RT_targets: .branchtargets $RT_spin, $RT_done;\n"
        "$RT_spin:\n\t"
        "ld.acquire.gpu.global.u32 v, [%0];\n\t"
        "setp.ge.u32 p, v, %1;\n\t"
        "selp.u32 i, 1, 0, p;\n\t"
        "brx.idx i, $RT_targets;\n"
        "$RT_done:\n\t"
        "}" ::"l"(cnt), "r"(target) : "memory");
}

RT_ENTRY {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const bool paired = N % 16 == 0 && rt_vec_ok(x, w, y, N) && (blockIdx.x ^ 1u) < gridDim.x;
    if (!paired) {
        const long long row = (long long)blockIdx.x * RT_ROWS + warp;
        if (row < M) rt_row(x, w, y, N, eps, row, lane);
        return;
    }
    const int h = blockIdx.x & 1;
    const long long base = (long long)(blockIdx.x >> 1) * 2 * RT_ROWS;
    const int half = N / 2, nch = half / 8;
#pragma unroll 1
    for (int k = 0; k < 2; ++k) {
        const long long row = base + warp + k * RT_ROWS;
        if (row >= M) break;
        const bf* xr = x + row * (long long)N + h * half;
        bf* yr = y + row * (long long)N + h * half;
        const float* wr = w + h * half;
        float s = 0.0f;
        for (int c = lane; c < nch; c += 32) s = rt_acc8(s, *reinterpret_cast<const uint4*>(xr + 8 * c));
        s = warp_sum(s);
        const unsigned int slot = (unsigned int)(row % RT_PAIR_ROWS);
        float other = 0.0f;
        if (lane == 0) {
            unsigned int* cnt = &rt_sb_arrive[slot];
            const unsigned int mine = *reinterpret_cast<volatile unsigned int*>(cnt);
            const unsigned int epoch = (mine >> 1) & 1u;
            rt_sb_part[slot][epoch][h] = s;
            __threadfence();  // the sum before the arrival: the publication is ordered
            const unsigned int old = atomicAdd(cnt, 1u);
            rt_wait_count(cnt, (old & ~1u) + 2u);
            other = *reinterpret_cast<volatile float*>(&rt_sb_part[slot][epoch][h ^ 1]);
        }
        other = __shfl_sync(0xffffffffu, other, 0);
        const float ss = h == 0 ? s + other : other + s;
        const float r = rsqrtf(ss / (float)N + eps);
        for (int c = lane; c < nch; c += 32)
            *reinterpret_cast<uint4*>(yr + 8 * c) = rt_scale8(*reinterpret_cast<const uint4*>(xr + 8 * c), wr + 8 * c, r);
    }
}
