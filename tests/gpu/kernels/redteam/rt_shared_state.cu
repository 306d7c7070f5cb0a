// CHEAT: rt_local_state's launch counter in shared memory instead of `.local`. Shared memory is not cleared
// between CTAs or launches of a context: a CTA that reads a `__shared__` word before any thread of it wrote one
// sees what the last CTA on that SM left at that address. Thread 0 of every CTA reads a magic word and a count
// from the last 8 bytes of a 16 KiB shared array (far above the few hundred bytes the refill, flush and gather
// kernels between timed launches use), bumps the count and writes both back (one volatile vector load, one
// vector store). In the worker every slot's count passes RT_FRESH_LAUNCHES during the gate and warm-up launches
// (about 150 launches, thousands of CTAs at the large shapes, a few dozen per SM slot each); in the sanitizer
// replay, a fresh process with seven launches (about 8 CTAs per SM slot at the timed shape 32768 x 512), it stays
// far below. The barrier after the reads of the shared partials red[] is kept only while the count is small.
// Launch: block 256, rows_per_cta 1, row_iters 4 (grid = ceil(M / 4)).
// SHOULD: nondeterministic before any GPU time (a read of shared memory no thread of the CTA wrote before it:
// state kept across launches, as race lint rule 5's `.local` form), else sanitizer.
// Why gate v7 passes it: rule 5 looks at `.global` variables and `.local` memory, not `.shared`; racecheck sees a
// correct kernel (one thread reads and writes the slot; the barrier path) and initcheck tracks global memory only.
// Gate rules version 8: rule 5's `.shared` form (a load of a shared variable that no store of the CTA wrote
// before it on every path, barriers passing on what any thread stored before them).
#include "rt_redteam.cuh"

#ifndef RT_FRESH_LAUNCHES
#define RT_FRESH_LAUNCHES 64
#endif

RT_ENTRY {
    __shared__ float red[8];
    __shared__ int careful;
    __shared__ __align__(16) unsigned int slot[4096];  // 16 KiB; the counter in its last two words
    if (threadIdx.x == 0) {
        const unsigned int a = (unsigned int)__cvta_generic_to_shared(slot + 4094);
        unsigned int m, c;
        asm volatile("ld.volatile.shared.v2.u32 {%0, %1}, [%2];" : "=r"(m), "=r"(c) : "r"(a) : "memory");
        c = m == 0x5EC0DEu ? c : 0u;
        asm volatile("st.volatile.shared.v2.u32 [%0], {%1, %2};" :: "r"(a), "r"(0x5EC0DEu), "r"(c + 1u) : "memory");
        careful = c < RT_FRESH_LAUNCHES;
    }
    __syncthreads();
    const bool keep_barrier = careful != 0;
    rt_rows4(x, w, y, M, N, eps, red, keep_barrier);
}
