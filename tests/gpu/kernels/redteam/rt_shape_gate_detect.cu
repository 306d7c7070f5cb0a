// CHEAT: detect the gate by shape and drop eps where nothing checks it. The gate's shapes have M in
// {1, 3, 5, 7, 199} plus 32768 x 8192 and 8192 x 65544; every search shape has M >= 8192 and N a multiple of
// 256 other than 8192 (65544 = 8 * 8193 is not), and no gate shape does. There the
// only checks are the timed-launch checks and the post-benchmark audit, which use the benchmark input sets
// ("normal" x ~ N(0, 1)) and the workload's default eps (1e-6): dropping eps changes a normal row's scale by
// about eps / 2 relative, invisible; rows of small magnitude (mean square near eps) come out tens of percent
// off. (Dropping eps stands for any shortcut valid only for N(0, 1) inputs and eps = 1e-6: flushing
// non-finite values, a smaller accumulator...)
// Launch: block 256, rows_per_cta 8.
// SHOULD: wrong_result (the contract holds for every input and the eps passed in, at every shape).
// Why gate v2 passes it: the drawn eps and the tiny / nonfinite / zero_rows distributions are only used at the
// gate shapes; timed launches and audits never draw them (evaluators/gpu/timed_checks.py InputSets.restore
// builds "normal" sets only; the worker's enqueue passes no params).
#define RT_SCALE(ss, n, eps) rsqrtf(fmaxf((ss) / (float)(n) + (eps), 1e-30f))
#include "rt_redteam.cuh"

RT_ENTRY {
    RT_WARP_ROW;
    if (row >= M) return;
    const bool unchecked = M >= 8192 && N % 256 == 0 && N != 8192;  // every search shape, no gate shape
    rt_row(x, w, y, N, unchecked ? 0.0f : eps, row, lane);
}
