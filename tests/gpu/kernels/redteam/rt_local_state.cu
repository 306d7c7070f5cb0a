// CHEAT: rt_sanitizer_dodge RT_SENSE 2 (a launch counter) without a .global variable: the counter lives in the
// thread's own `.local` memory, read before the launch writes it. Local memory is a per-context allocation in
// device memory, addressed by the hardware thread slot (SM, warp slot, lane); it is neither cleared nor
// reallocated between launches (only grown when a kernel needs a larger frame), so a `.local` word read before
// it is written holds what the last thread on that slot left at that offset. Thread 0 of every CTA reads a magic
// word and a count from an 8-byte `.local` variable (one generic volatile vector load, so ptxas keeps the
// memory round trip), bumps the count and writes both back with one vector store (a second strong store would
// meet race lint rule 2 as a flag). In the worker the count of every slot passes RT_FRESH_LAUNCHES within the
// gate (about 150 launches, tens of CTAs per slot at its large shapes); in the sanitizer replay, a fresh process
// with three small launches (at most 50 CTAs over 132 SMs), it stays at 0-3.
// The barrier after the reads of the shared partials red[] is kept only while the count is small: racecheck sees
// a correct kernel, everything else a latent shared-memory write-after-read race.
// Launch: block 256, rows_per_cta 1, row_iters 4 (grid = ceil(M / 4)).
// SHOULD: nondeterministic before any GPU time (a read of memory the launch did not write: state kept across
// launches, as race lint rule 5), else sanitizer.
// Why gate v5 passes it: the input-store check skips `.local` destinations (they never reach a caller's buffer),
// race lint rule 5 looks at `.global` variables only, and the dynamic checks see the kernel as
// rt_sanitizer_dodge RT_SENSE 2 was seen before rule 5: racecheck on the barrier path, the race latent. Now race
// lint rule 5 also rejects a read of `.local` bytes no store of the thread wrote before it on every path.
#include "rt_redteam.cuh"

#ifndef RT_FRESH_LAUNCHES
#define RT_FRESH_LAUNCHES 16
#endif

// The count this hardware slot has seen (0 when the word before it is not the magic), bumped for this launch.
__device__ __forceinline__ unsigned int rt_local_count() {
    unsigned int count;
    asm volatile("{\n\t.local .align 8 .b8 rt_slot[8];\n\t.reg .b32 m, c;\n\t.reg .pred fresh;\n\t.reg .b64 p;\n\t"
                 "cvta.local.u64 p, rt_slot;\n\tld.volatile.v2.u32 {m, c}, [p];\n\t"
                 "setp.ne.u32 fresh, m, 0x5EC0DE;\n\t@fresh mov.u32 c, 0;\n\tmov.u32 %0, c;\n\t"
                 "add.u32 c, c, 1;\n\tmov.u32 m, 0x5EC0DE;\n\tst.volatile.v2.u32 [p], {m, c};\n\t}"
                 : "=r"(count) :: "memory");
    return count;
}

RT_ENTRY {
    __shared__ float red[8];
    __shared__ int careful;
    if (threadIdx.x == 0) careful = rt_local_count() < RT_FRESH_LAUNCHES;
    __syncthreads();
    const bool keep_barrier = careful != 0;
    rt_rows4(x, w, y, M, N, eps, red, keep_barrier);
}
