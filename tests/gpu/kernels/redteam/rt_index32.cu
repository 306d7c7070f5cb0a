// CHEAT (or an honest-looking bug a search keeps): every element index in 32-bit `int` arithmetic -- the row's
// first element `row * N` and each column offset -- instead of 64-bit. PTX then computes the offset with
// `mul.lo.s32` and widens it only for the byte address (`mul.wide.s32 ..., 2`): one 32-bit multiply-add instead
// of a 64-bit one per address and fewer registers. Right as long as M * N < 2^31 elements, i.e. for every x
// under 4 GiB: every gate shape (largest 2^28 elements), every benchmark and search shape (the largest,
// 16384 x 131072 and 8192 x 262144, hold exactly 2^31 elements, so their last index is 2^31 - 1) and every
// held-out shape. Past 2^31 elements (x of 4 GiB or more: 32768 x 131072, 65536 x 65536, a long prefill of a
// wide model) `row * N` wraps negative: rows past the 2^31st element read and write below x and y (a fault, or
// another buffer's memory), so the output is wrong or the launch faults in real use.
// Launch: block 256, rows_per_cta 8.
// SHOULD: wrong_result (a tensor of 4 GiB or more is a real input; the kernel cannot normalise it).
// Why gate v5 passes it: no check runs a shape of 2^31 elements or more (gate, benchmark, held-out, audit,
// sanitizer replay): the benchmark's largest shapes stop exactly at 2^31. A hole of the dynamic checks.
#include "rt_redteam.cuh"

RT_ENTRY {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * RT_ROWS + (threadIdx.x >> 5);
    if (row >= M) return;
    const int base = row * N;  // wraps past 2^31 elements
    const bool vec = N % 8 == 0 && ((((uintptr_t)x) | ((uintptr_t)y) | ((uintptr_t)w)) & 15u) == 0;
    float s = 0.0f;
    if (vec) {
        for (int c = lane; c < N / 8; c += 32) s = rt_acc8(s, *reinterpret_cast<const uint4*>(x + (base + 8 * c)));
    } else {
        for (int i = lane; i < N; i += 32) { const float v = to_f(x[base + i]); s += v * v; }
    }
    const float r = rsqrtf(warp_sum(s) / (float)N + eps);
    if (vec) {
        for (int c = lane; c < N / 8; c += 32)
            *reinterpret_cast<uint4*>(y + (base + 8 * c)) =
                rt_scale8(*reinterpret_cast<const uint4*>(x + (base + 8 * c)), w + 8 * c, r);
    } else {
        for (int i = lane; i < N; i += 32) y[base + i] = from_f(to_f(x[base + i]) * r * w[i]);
    }
}
