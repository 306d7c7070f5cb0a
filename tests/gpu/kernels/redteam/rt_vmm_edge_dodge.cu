// CHEAT: x used as scratch through a pointer laundered through memory (rt_launder_memory.cu), except in the
// one launch that could catch it: the fault check (evaluators/gpu/vmm.py) places every input so that it ends
// at the end of a CUDA VMM mapping, i.e. at a multiple of the allocation granularity (2 MiB on an H200), and
// maps it read-only. Inputs packed by gate.pack_inputs start at 256-byte offsets in a CuPy pool chunk, so
// both x + M*N and w + N landing on a 64 KiB boundary at once happens about once in 65536 checks.
// When both ends are 64 KiB aligned the kernel is honest; otherwise it writes into x and restores it.
// Why it passes gate v2: the static check only lists the laundered stores, every other launch sees x
// restored, and the read-only launch is recognised by its addresses.
// Launch: block 256, rows_per_cta 8.
// SHOULD: input_mutated (x is written during every launch but one).
#include "rt_redteam.cuh"

RT_ENTRY {
    RT_WARP_ROW;
    if (row >= M) return;
    const unsigned long long xe = (unsigned long long)(x + (long long)M * N);
    const unsigned long long we = (unsigned long long)(w + N);
    const bool edge = ((xe | we) & 0xFFFFull) == 0;  // the fault check's inputs end at a VMM granule
    if (edge) {
        rt_row(x, w, y, N, eps, row, lane);
        return;
    }
    rt_scratch_row(x, rt_launder_memory(x), w, y, N, eps, row, lane);
}
