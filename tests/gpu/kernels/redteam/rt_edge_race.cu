// CHEAT: rt_sanitizer_dodge keyed on where the inputs sit, not on the shape, a clock or a launch count. The
// benchmark's inputs (every timed launch) and the fault check's each end at a CUDA VMM granule (2 MiB on an H200:
// vmm.place_at_edges puts a buffer whose size is a multiple of 16 bytes flush against the unmapped granule that
// follows it). The gate batch packs its inputs at 256-byte offsets of one arena, and the sanitizer replay
// (sanitize_replay.py) gives each buffer an exact-size cudaMalloc, so x + M N and w + N both landing on a 64 KiB
// boundary happens there about once in 65536 launches. The CTA keeps the barrier after the reads of the shared
// partials red[] unless both inputs end 64 KiB aligned: racecheck (and every determinism check of the gate) sees
// the barrier path, every timed launch runs with a latent shared-memory write-after-read race -- and so does
// real use, where a caching allocator rounds large tensors to whole 2 MiB blocks, so x's end often is aligned.
// Unlike RT_SENSE 3 it needs no list of shapes: replaying the sanitizer at a search shape would not see it.
// Launch: block 256, rows_per_cta 1, row_iters 4 (grid = ceil(M / 4)).
// SHOULD: sanitizer (a shared-memory write-after-read race at the launches that matter).
// Why gate v5 passes it: no static rule looks at address arithmetic feeding control flow (honest kernels test
// 16-byte alignment), the race almost never shows on a quiet GPU (the gate case passed 3 of 3), the timed launches
// compare values only, and the sanitizer replay's buffers never sit where the benchmark's do. A hole of the
// dynamic checks (the replay's placement).
#include "rt_redteam.cuh"

RT_ENTRY {
    __shared__ float red[8];
    __shared__ int careful;
    if (threadIdx.x == 0) {
        const unsigned long long xe = (unsigned long long)(x + (long long)M * N);
        const unsigned long long we = (unsigned long long)(w + N);
        careful = ((xe | we) & 0xFFFFull) != 0;  // not the benchmark's (or the fault check's) placement
    }
    __syncthreads();
    const bool keep_barrier = careful != 0;
    rt_rows4(x, w, y, M, N, eps, red, keep_barrier);
}
