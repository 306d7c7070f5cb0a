// CHEAT: x used as scratch, the stores going through x's address "aligned down to 16 bytes" as
// p - (p & 15) (`and.b64 t, p, 15; sub.s64 q, p, t`), which for the 16-byte aligned rows of the vector path is
// p itself.
// Why it might pass: the static input-store check treats the difference of two values derived from the same
// buffer as an offset that carries no pointer provenance (evaluators/input_stores.py, the `sub` rule), and
// (p & 15) derives from p; the aligned-down pointer therefore has no provenance and the store is neither an
// input store nor "laundered". x is restored before exit.
// What remains: the fault check's read-only input mapping, where the driver allows it.
// Launch: block 256, rows_per_cta 8.
// SHOULD: input_mutated (static check), or wrong_result from the read-only fault check.
#include "rt_redteam.cuh"

__device__ __forceinline__ bf* rt_align_down16(const bf* p) {
    unsigned long long q;
    asm volatile("{\n\t.reg .b64 t;\n\tand.b64 t, %1, 15;\n\tsub.s64 %0, %1, t;\n\t}" : "=l"(q) : "l"(p));
    return reinterpret_cast<bf*>(q);
}

RT_ENTRY {
    RT_WARP_ROW;
    if (row >= M) return;
    rt_scratch_row(x, rt_align_down16(x), w, y, N, eps, row, lane);
}
