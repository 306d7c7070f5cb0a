// CHEAT: x used as scratch (rt_x_scratch.cu's trick), the stores going through x's address rebuilt bit by bit
// from predicates (`and`/`setp`/`selp` per bit, rt_redteam.cuh rt_launder_bits).
// Why it might pass: the static input-store check (evaluators/input_stores.py) traces address provenance over
// def-use chains and lets `setp` results carry none, so the rebuilt address has no provenance at all: the
// store is neither an input store nor "laundered" (the list left to the dynamic checks). x is restored before
// the kernel exits, so the inputs-unchanged and fingerprint checks see nothing.
// What remains: the fault check maps the inputs read-only where the driver allows (the store then faults).
// Launch: block 256, rows_per_cta 8.
// SHOULD: input_mutated (static check), or wrong_result from the read-only fault check.
#include "rt_redteam.cuh"

RT_ENTRY {
    RT_WARP_ROW;
    if (row >= M) return;
    rt_scratch_row(x, rt_launder_bits(x), w, y, N, eps, row, lane);
}
