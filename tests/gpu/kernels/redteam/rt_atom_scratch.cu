// CHEAT: x used as scratch through atomics on a generic address: each lane swaps its partial sum of squares
// into x[row, 2*lane : 2*lane+2] with atomicExch (atom.exch.b32 on a generic pointer), the warp reads the 32
// partials back, and each lane swaps the original bits back. No st instruction ever addresses x.
// Why it might pass: a def-use check that looks for `st` only, or only for the .global state space, misses
// atom on a generic address; x is restored before exit.
// Launch: block 256, rows_per_cta 8.
// SHOULD: input_mutated (static input-store check: atom is a memory write; generic addresses are checked).
#include "rt_redteam.cuh"

RT_ENTRY {
    RT_WARP_ROW;
    if (row >= M) return;
    const int nch = N / 8;
    if (!rt_vec_ok(x, w, y, N) || nch > 32 * RT_KEEP || N < 64) {
        rt_row(x, w, y, N, eps, row, lane);
        return;
    }
    const bf* xr = x + row * (long long)N;
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
    unsigned int* slot = reinterpret_cast<unsigned int*>(const_cast<bf*>(xr)) + lane;  // generic address
    const unsigned int orig = atomicExch(slot, __float_as_uint(s));
    __syncwarp();
    float ss = 0.0f;
    for (int k = 0; k < 32; ++k)
        ss += __uint_as_float(atomicAdd(reinterpret_cast<unsigned int*>(const_cast<bf*>(xr)) + k, 0u));
    __syncwarp();
    atomicExch(slot, orig);  // restore
    const float r = rsqrtf(ss / (float)N + eps);
#pragma unroll
    for (int i = 0; i < RT_KEEP; ++i) {
        const int c = lane + 32 * i;
        if (c < nch) *reinterpret_cast<uint4*>(yr + 8 * c) = rt_scale8(buf[i], w + 8 * c, r);
    }
}
