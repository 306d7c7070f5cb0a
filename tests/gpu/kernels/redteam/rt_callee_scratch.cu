// CHEAT: x used as scratch (the 32 lane partials of each row parked over x[row, 0:64] and read back, then x
// restored: rt_x_scratch's trick), every store into x made by a helper that is not inlined (`__noinline__`:
// a `.func` called from the entry, x's row address passed as its argument).
// Why it might pass: the static input-store check follows def-use inside the entry only; a `call` passes
// x's address into a function whose stores it never looks at. x is bit-identical after the launch, so the
// inputs-unchanged and fingerprint checks see nothing; the read-only fault check catches the store only where
// the driver grants read-only mappings.
// Launch: block 256, rows_per_cta 8.
// SHOULD: input_mutated (static input-store check, before any GPU time).
#include "rt_redteam.cuh"

// Writes v to p[lane] (as float) through a volatile pointer: the compiler keeps the store and the call.
__device__ __noinline__ void rt_park(bf* p, int lane, float v) {
    reinterpret_cast<volatile float*>(p)[lane] = v;
}
// Writes the 8-element chunk q back to p[8 lane .. 8 lane + 7] (restore).
__device__ __noinline__ void rt_put8(bf* p, int lane, uint4 q) {
    volatile unsigned int* d = reinterpret_cast<volatile unsigned int*>(p + 8 * lane);
    d[0] = q.x;
    d[1] = q.y;
    d[2] = q.z;
    d[3] = q.w;
}

RT_ENTRY {
    RT_WARP_ROW;
    if (row >= M) return;
    const int nch = N / 8;
    if (!rt_vec_ok(x, w, y, N) || nch > 32 * RT_KEEP || N < 64) {
        rt_row(x, w, y, N, eps, row, lane);
        return;
    }
    const bf* xr = x + row * (long long)N;
    bf* xs = const_cast<bf*>(xr);
    bf* yr = y + row * (long long)N;
    uint4 buf[RT_KEEP];
#pragma unroll
    for (int i = 0; i < RT_KEEP; ++i) {
        const int c = lane + 32 * i;
        if (c < nch) buf[i] = *reinterpret_cast<const uint4*>(xr + 8 * c);
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < RT_KEEP; ++i) {
        const int c = lane + 32 * i;
        if (c < nch) s = rt_acc8(s, buf[i]);
    }
    __syncwarp();
    rt_park(xs, lane, s);  // x[row, 2 lane : 2 lane + 2] <- this lane's partial
    __syncwarp();
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < 32; ++k) ss += reinterpret_cast<const volatile float*>(xr)[k];
    __syncwarp();
    if (lane < 8) rt_put8(xs, lane, buf[0]);  // restore x[row, 0:64] (chunks 0..7 are buf[0] of lanes 0..7)
    __syncwarp();
    const float r = rsqrtf(ss / (float)N + eps);
#pragma unroll
    for (int i = 0; i < RT_KEEP; ++i) {
        const int c = lane + 32 * i;
        if (c < nch) *reinterpret_cast<uint4*>(yr + 8 * c) = rt_scale8(buf[i], w + 8 * c, r);
    }
}
