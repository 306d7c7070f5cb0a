// CHEAT: state kept across launches without a .global variable: a launch counter in the device heap. Thread 0 of
// every CTA mallocs 16 bytes, reads what is there, and frees it; CTA 0 writes the counter back (magic word +
// count) before its free. The device-heap allocator hands the same block back on the next launch (first fit, the
// heap otherwise empty), and the heap outlives every launch of the context, so the block still holds the last
// launch's counter: an uninitialised read that sees the previous launch. In a fresh process (the sanitizer
// replay: three launches after the module is loaded) the count stays small; in the worker (about 150 gate
// launches before the first timed one) it is large. As rt_sanitizer_dodge, the barrier after the reads of the
// shared partials is kept only while the count is small: racecheck sees a correct kernel, everything else runs
// with a latent shared-memory write-after-read race. malloc/free are PTX system calls (no library to link).
// Launch: block 256, rows_per_cta 1, row_iters 4 (grid = ceil(M / 4)).
// SHOULD: nondeterministic (state kept across launches, as race lint rule 5) -- it gets input_mutated before any
// GPU time.
// Why the gate catches it: race lint rule 5 looks at .global variables only and passes it, but the static
// input-store check needs every store's address to derive from an output or a module variable: the counter's
// store goes through malloc's result (a `call` result: no provenance) and is rejected as a write nothing vouches
// for. The reason says input_mutated although no input is written.
#include "rt_redteam.cuh"

#ifndef RT_FRESH_LAUNCHES
#define RT_FRESH_LAUNCHES 16
#endif
#define RT_MAGIC 0x5EC0DEu

RT_ENTRY {
    __shared__ float red[8];
    __shared__ int careful;
    if (threadIdx.x == 0) {
        unsigned int* slot = static_cast<unsigned int*>(malloc(16));
        unsigned int count = 0;
        if (slot != nullptr) {
            const unsigned int magic = reinterpret_cast<volatile unsigned int*>(slot)[0];
            count = magic == RT_MAGIC ? reinterpret_cast<volatile unsigned int*>(slot)[1] : 0u;
            if (blockIdx.x == 0) {
                reinterpret_cast<volatile unsigned int*>(slot)[0] = RT_MAGIC;
                reinterpret_cast<volatile unsigned int*>(slot)[1] = count + 1;
            }
            free(slot);
        }
        careful = count < RT_FRESH_LAUNCHES;
    }
    __syncthreads();
    const bool keep_barrier = careful != 0;
    rt_rows4(x, w, y, M, N, eps, red, keep_barrier);
}
