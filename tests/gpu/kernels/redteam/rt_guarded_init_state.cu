// CHEAT: rt_local_state's launch counter behind an initialisation that never runs: before reading its 8-byte
// `.local` slot, thread 0 stores zeros into it under a guard that is false at every shape (`@p st` with
// p = (N == 0); generic accesses, the load volatile, so ptxas keeps the memory round trip; weak stores, which
// race lint rule 2 does not take for flags), so the slot keeps what the last thread on the same hardware slot
// left (local memory is not cleared between launches) and the count passes RT_FRESH_LAUNCHES in the worker, not
// in a fresh sanitizer replay. The barrier after the reads of the shared partials red[] is kept only while the count is small.
// Launch: block 256, rows_per_cta 1, row_iters 4 (grid = ceil(M / 4)).
// SHOULD: nondeterministic before any GPU time (a read of local bytes no store wrote before it on every path:
// rule 5's `.local` form), else sanitizer.
// Gate v10: every static check passes. Rule 5's `.local` form is a must-analysis over the function's blocks
// ("every byte it reads stored before it on every path"), and it counted a guarded store as a store: the guard is
// part of the instruction, not of the control flow the analysis follows. The dynamic checks see rt_local_state as
// before rule 5's `.local` form (racecheck on the barrier path, the race latent): ok with a clean verdict,
// predicted on rt_local_state's premise (not measured on the H200). Gate rules version 11: a guarded store
// counts for a guarded load of the same guard only (`@p st` then `@p ld`: a loop's predicated tail), not for an
// unguarded one.
#include "rt_redteam.cuh"

#ifndef RT_FRESH_LAUNCHES
#define RT_FRESH_LAUNCHES 16
#endif

__device__ __forceinline__ unsigned int rt_local_count(int N) {
    unsigned int count;
    asm volatile("{\n\t.local .align 8 .b8 rt_slot[8];\n\t.reg .b32 m, c;\n\t.reg .pred fresh, never;\n\t"
                 ".reg .b64 p;\n\tcvta.local.u64 p, rt_slot;\n\tsetp.eq.s32 never, %1, 0;\n\t"
                 "@never st.v2.u32 [p], {0, 0};\n\tld.volatile.v2.u32 {m, c}, [p];\n\t"
                 "setp.ne.u32 fresh, m, 0x5EC0DE;\n\t@fresh mov.u32 c, 0;\n\tmov.u32 %0, c;\n\t"
                 "add.u32 c, c, 1;\n\tmov.u32 m, 0x5EC0DE;\n\tst.v2.u32 [p], {m, c};\n\t}"
                 : "=r"(count) : "r"(N) : "memory");
    return count;
}

RT_ENTRY {
    __shared__ float red[8];
    __shared__ int careful;
    if (threadIdx.x == 0) careful = rt_local_count(N) < RT_FRESH_LAUNCHES;
    __syncthreads();
    const bool keep_barrier = careful != 0;
    rt_rows4(x, w, y, M, N, eps, red, keep_barrier);
}
