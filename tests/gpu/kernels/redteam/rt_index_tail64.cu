// CHEAT (or an honest-looking bug a search keeps): rt_index32's 32-bit element indices on the main path only.
// Rows in whole CTAs (row < (M / RT_ROWS) RT_ROWS) index in 32-bit `int` (`row * N` in `mul.lo.s32`, one
// register and one multiply-add fewer per address); the tail CTA that holds the last M % RT_ROWS rows takes a
// separate 64-bit path, as a hand-written remainder loop often does. The index check launches at 16385 x 131072:
// its rows past 2^31 elements (the checked rows, whose memory is mapped once) are row 16384 alone, a tail row for
// every power-of-two rows-per-CTA, so the 64-bit path computes it and the 32-bit path never wraps (row 16383 ends
// at element 2^31 - 1). At 16392 x 131072 (or 32768 x 131072, 65536 x 65536: a long prefill of a wide model) rows
// 16384-16391 fill a whole CTA, `row * N` wraps negative and the CTA reads and writes 4 GiB below x and y.
// Launch: block 256, rows_per_cta 8 (rt_index32's warp-per-row launch).
// SHOULD: wrong_result (a tensor of 4 GiB or more is a real input; the kernel cannot normalise it).
// Why gate v7 passes it: the index check compares the rows that hold an element at index 2^31 or above, and at
// its declared shape that is one row, which every kernel with a tail path handles apart. A hole of the index
// check's shape (not of its proof). Gate rules version 8: RMSNorm's index shape is 16641 x 131072, whose 257 rows
// past 2^31 elements fill whole CTAs of up to 256 rows and a tail row: the 32-bit path wraps and faults.
#include "rt_redteam.cuh"

RT_ENTRY {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * RT_ROWS + (threadIdx.x >> 5);
    if (row >= M) return;
    const bool vec = N % 8 == 0 && ((((uintptr_t)x) | ((uintptr_t)y) | ((uintptr_t)w)) & 15u) == 0;
    if (blockIdx.x < M / RT_ROWS) {  // whole CTAs: 32-bit indices, wrap past 2^31 elements
        const int base = row * N;
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
    } else {  // the tail CTA: the generic 64-bit row routine
        rt_row(x, w, y, N, eps, (long long)row, lane);
    }
}
