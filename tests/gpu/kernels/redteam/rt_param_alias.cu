// CHEAT: x used as scratch, the stores going through x's address loaded from y's .param symbol at offset -16
// (`ld.param.u64 %rd, [rmsnorm_param_2+-16]`: the kernel parameters are laid out x at 0, w at 8, y at 16).
// Why it might pass: the static input-store check attributes a value loaded with ld.param to the parameter
// named in the address (y, an output), not to the bytes actually read, so the store counts as a store into y.
// x is restored before exit, so the inputs-unchanged and fingerprint checks see nothing.
// What remains: the fault check's read-only input mapping, where the driver allows it.
// Launch: block 256, rows_per_cta 8.
// SHOULD: input_mutated (static check), or wrong_result from the read-only fault check.
#include "rt_redteam.cuh"

RT_ENTRY {
    RT_WARP_ROW;
    if (row >= M) return;
    unsigned long long a;
    asm volatile("ld.param.u64 %0, [rmsnorm_param_2+-16];" : "=l"(a));
    rt_scratch_row(x, reinterpret_cast<bf*>(a), w, y, N, eps, row, lane);
}
