// CHEAT (written for gate v2's fault check): an out-of-bounds read far past the end of x, masked by arithmetic.
// Lane 0 of every row reads the element 2048 past its row's end (4 KiB) and adds 0 * that value to the row's sum
// of squares. For every row but the last few the element belongs to a later row (finite); for the last rows it
// lies past x: in the gate's batch that is the next input (finite, more than the NaN padding away), so the output
// stays right; only a mapping that ends at x's last byte turns the read into a fault.
// Launch: block 256, rows_per_cta 8.
// SHOULD: wrong_result (fault check: the kernel faulted with its inputs ending at an unmapped page).
#include "../gate_cases/rt_common.cuh"

RT_ENTRY {
    RT_WARP_ROW;
    if (row >= M) return;
    float junk = 0.0f;
    if (lane == 0) junk = to_f(x[(row + 1) * (long long)N + 2047]);
    const bool finite = (__float_as_uint(junk) & 0x7F800000u) != 0x7F800000u;
    if (!finite) junk = 0.0f;  // a NaN or Inf neighbour would show: mask it too
    rt_row(x, w, y, N, eps + 0.0f * junk, row, lane);
}
