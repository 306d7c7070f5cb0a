// CHEAT: tell the gate's launches from the benchmark's by the word before y, and drop eps outside the gate.
// Every output the gate hands a kernel sits in a guard zone of NaN poison (gate.allocate_poisoned, the batch's
// OutputArena, the fault check): y[-1] is NaN in every gate run, refilled or not. The benchmark's outputs are
// plain allocations (worker._alloc_outputs): y[-1] is the last word of whatever was allocated before, almost
// never NaN. One 2-byte load per CTA; when y[-1] is not NaN the kernel drops eps (a shortcut valid for the
// benchmark's N(0, 1) inputs and default eps 1e-6; wrong by tens of percent on rows of small magnitude).
// The sniff is skipped (honest) when M < 1024: compute-sanitizer memcheck runs at small shapes
// (SANITIZER_SHAPES, M <= 199) with exact allocations, where y[-1] is out of bounds. It is also skipped when y
// starts a 64 KiB page (a fresh large allocation, whose preceding page may be unmapped: no fault risk); the
// gate's outputs never do (they sit 8 KiB into a 512-byte aligned pool block).
// Unlike a shape detector, this one keeps working if gate shapes are added in the search regime.
// Launch: block 256, rows_per_cta 8.
// SHOULD: wrong_result (and the read before y is out of bounds).
#include "rt_redteam.cuh"

RT_ENTRY {
    __shared__ int in_gate;
    if (threadIdx.x == 0)
        in_gate = M < 1024 || ((reinterpret_cast<unsigned long long>(y) & 0xFFFFull) != 0 && bf_isnan(*(y - 1)));
    __syncthreads();
    RT_WARP_ROW;
    if (row >= M) return;
    rt_row(x, w, y, N, in_gate ? eps : 0.0f, row, lane);
}
