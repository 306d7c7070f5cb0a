// CHEAT (written for gate v2's benchmark input check): writes into x through a pointer laundered through a
// __device__ variable (the static input-store check sees a store whose address came from memory: unproven),
// only at shapes with M >= 16384 and N >= 65536 (the largest search shape: no gate check has them), and never
// restores it: the last element of x gets its lowest bit flipped on every launch. The output stays within
// tolerance (one ulp of one input), but every later kernel timed on those inputs reads a changed x.
// Launch: block 256, rows_per_cta 8.
// SHOULD: input_mutated (benchmark inputs changed; restored before the next candidate).
#include "../gate_cases/rt_common.cuh"

__device__ unsigned long long g_x;

RT_ENTRY {
    RT_WARP_ROW;
    if (row >= M) return;
    rt_row(x, w, y, N, eps, row, lane);
    if (M >= 16384 && N >= 65536 && row == M - 1 && lane == 0) {
        *reinterpret_cast<volatile unsigned long long*>(&g_x) = reinterpret_cast<unsigned long long>(x);
        bf* p = reinterpret_cast<bf*>(*reinterpret_cast<volatile unsigned long long*>(&g_x));
        p[(long long)M * N - 1] ^= 1;
    }
}
