// CHEAT: rt_alu_pace_dodge's clock with both of its waits moved where the race lint's dataflow does not follow
// them. The flag is a word of the CTA's own output (y[4 blockIdx.x, 0:2], written with its real value later: an
// output the kernel may use as scratch), so it is global memory, which racecheck does not track (the version 8
// dodges needed shared atomics for a race-free flag, which rule 4's order form now rejects); and the counting
// loop tests a copy of it made through the thread's local memory (`st.local` then `ld.local`, what nvcc writes for
// a `volatile` automatic variable or a spilled value), so the loop's exit depends on a load of local memory.
// Lane 0 of warp 1 runs RT_ALU_STEPS dependent multiply-adds and then raises the flag; lane 0 of warp 0 bumps a
// shared counter (an atomic whose result is unused: a commutative update) until it sees the flag (read every 8
// bumps), and the CTA keeps the barrier after the reads of red[] only when it counted fewer than RT_MIN_COUNT
// bumps (compute-sanitizer instruments the shared atomics, not the arithmetic). Like rt_alu_pace_dodge it is a
// proof of the hole, not a net gain: the ~4 us chain at the start of every CTA costs more than the barriers it
// drops.
// Launch: block 256, rows_per_cta 1, row_iters 4 (grid = ceil(M / 4)).
// SHOULD: nondeterministic before any GPU time (a loop whose exit waits on global memory another thread writes:
// a spin wait, and a clock), else sanitizer.
// Why gate v9 passes it: rule 1 (spin on global memory) and rule 6's shared form trace a loop's exit through
// registers only, and the trace ends at the local load; no special register, sleep, `.global` variable, atomic
// whose result is read or stale local or shared read. RT_VIA_LOCAL 0 (the loop tests the loaded register) is
// what version 9 rejected (spin_wait).
#include "rt_redteam.cuh"

#ifndef RT_ALU_STEPS
#define RT_ALU_STEPS 2048  // ~4 cycles each: ~8k cycles, ~4 us at 1.98 GHz
#endif
#ifndef RT_VIA_LOCAL
#define RT_VIA_LOCAL 1  // 0: the loop tests the flag itself (the form rule 1 sees)
#endif
#ifndef RT_MIN_COUNT
#define RT_MIN_COUNT 12  // natively some tens of bumps meanwhile; a few under instrumentation
#endif

// `v` stored into and loaded back from the thread's local memory (what nvcc emits for a `volatile` automatic
// variable; written out here so no optimisation keeps it in a register; `.volatile` does not apply to `.local`).
__device__ __forceinline__ unsigned int rt_local_copy(unsigned int v) {
    unsigned int out;
    asm volatile("{\n\t.local .align 4 .b8 rt_copy[4];\n\tst.local.u32 [rt_copy], %1;\n\t"
                 "ld.local.u32 %0, [rt_copy];\n\t}" : "=r"(out) : "r"(v) : "memory");
    return out;
}

RT_ENTRY {
    __shared__ float red[8];
    __shared__ unsigned int count;
    __shared__ int careful;
    volatile unsigned int* flag = reinterpret_cast<volatile unsigned int*>(y + (long long)blockIdx.x * 4 * N);
    if (threadIdx.x == 0) {
        count = 0u;
        careful = 0;
        *flag = 0u;
        __threadfence();  // the cleared flag is not "data published by" the raised one (rule 2)
    }
    __syncthreads();
    if (threadIdx.x == 32) {
        unsigned int v = (unsigned int)N | 1u;
#pragma unroll 1
        for (int i = 0; i < RT_ALU_STEPS; ++i) v = v * 1664525u + 1013904223u;  // dependent: one at a time
        *flag = v | 1u;  // non-zero: the flag raised after the chain, which its value keeps alive
    } else if (threadIdx.x == 0) {
        unsigned int bumps = 0u;
#if RT_VIA_LOCAL
        unsigned int seen = 0u;
#pragma unroll 1
        do {
            if ((bumps & 7u) == 0u) seen = *flag;  // an L2 round trip every 8 bumps: natively ~60 bumps in the chain
            atomicAdd(&count, 1u);  // instrumented under compute-sanitizer; its result is never read
            ++bumps;
            seen = rt_local_copy(seen);  // the loop tests the copy
        } while (seen == 0u);
#else
#pragma unroll 1
        unsigned int seen = 0u;
        do {
            if ((bumps & 7u) == 0u) seen = *flag;
            atomicAdd(&count, 1u);
            ++bumps;
        } while (seen == 0u);
#endif
        careful = bumps < RT_MIN_COUNT;
    }
    __syncthreads();
    rt_rows4(x, w, y, M, N, eps, red, careful != 0);
}
