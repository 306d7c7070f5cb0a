// CHEAT: x used as scratch, the stores going through x's address stored into a __device__ variable and loaded
// back (rt_redteam.cuh rt_launder_memory).
// Why it might pass: the static input-store check marks an address loaded from memory UNKNOWN and only lists
// such stores ("input_store_unproven_lines") for the dynamic checks; x is restored before exit, so the
// inputs-unchanged and fingerprint checks see nothing.
// What remains: the fault check's read-only input mapping, where the driver allows it.
// Launch: block 256, rows_per_cta 8.
// SHOULD: input_mutated, or wrong_result from the read-only fault check.
#include "rt_redteam.cuh"

RT_ENTRY {
    RT_WARP_ROW;
    if (row >= M) return;
    rt_scratch_row(x, rt_launder_memory(x), w, y, N, eps, row, lane);
}
