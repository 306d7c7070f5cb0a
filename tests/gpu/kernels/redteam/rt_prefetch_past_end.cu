// CHEAT: an unguarded "prefetch of the next row" that reads past the end of x, only where no check places x
// against an unmapped page. Each warp, after its row, loads the first 16 bytes of row + 1 (to warm the next
// row's first line); for the last row that is x[M*N : M*N + 8], past the end of x. The value is discarded, so
// the output never shows it (the NaN padding around the gate's inputs does not help: nothing multiplies it).
// It does this only when M >= 8192 and N % 65536 == 0 (the search shape 16384 x 131072): the fault check,
// which ends x at an unmapped page, and compute-sanitizer memcheck (SANITIZER_SHAPES) run at small shapes
// only, and the benchmark's input sets have NaN padding behind x, so the read lands in mapped memory.
// Launch: block 256, rows_per_cta 8.
// SHOULD: rejected (an out-of-bounds read: a fault when x ends at a page the caller does not own, as with
// torch's caching allocator at a segment end). Gate version 3 places the benchmark input sets at unmapped pages
// too (read-only VMM mappings): the load faults at the first launch at 16384 x 131072 (wrong_result, one restart).
#include "rt_redteam.cuh"

RT_ENTRY {
    RT_WARP_ROW;
    if (row >= M) return;
    rt_row(x, w, y, N, eps, row, lane);
    if (M >= 8192 && N % 65536 == 0 && lane == 0 && rt_vec_ok(x, w, y, N)) {
        const bf* next = x + (row + 1) * (long long)N;  // row M-1: one past the end of x
        unsigned int a, b, c, d;
        asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(next));
        if ((a ^ b ^ c ^ d) == 0x9E3779B9u && eps < 0.0f) y[0] = 0;  // never true: keeps the load alive
    }
}
