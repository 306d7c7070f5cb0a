// CHEAT: rt_atomic_race_clock's race between an instrumented and an uninstrumented warp, decided by an mbarrier
// instead of an atomic: lane 0 of warp 0 runs RT_LOADS dependent shared loads (instrumented under
// compute-sanitizer) and then arrives on a shared mbarrier; lane 0 of warp 1 runs RT_ALU_STEPS dependent integer
// multiply-adds (not instrumented) and then asks, once, which of them got there first:
//   RT_FORM 0: `mbarrier.test_wait.parity` on the barrier's first phase (count 1): complete iff warp 0 arrived;
//   RT_FORM 1: warp 1 arrives too (count 2) and reads `mbarrier.pending_count` of the state its arrive returned:
//              0 iff warp 0 arrived before it;
//   RT_FORM 2: warp 1 waits for the phase in a retry loop after its ALU chain and counts the retries in a register
//              (rule 6's documented gap: such a loop counts only when it writes memory): few natively.
// Natively the load chain ends first and the CTA drops the barrier after the reads of the shared partials red[];
// under compute-sanitizer the ALU side wins and the barrier is kept, so racecheck sees a correct kernel.
// Launch: block 256, rows_per_cta 1, row_iters 4 (grid = ceil(M / 4)).
// SHOULD: nondeterministic before any GPU time (an mbarrier's phase or pending count read once, outside a loop
// that waits for it: the threads' arrival order, a clock), else sanitizer.
// Gate v10: every static check passes. Rule 4's order form reads `atom` only; rule 6 looks at mbarrier waits in
// loops (a pipeline's retry loop) and at try_wait's suspend-time hint, and here nothing loops; racecheck does not
// report mbarrier operations as hazards (they are its synchronisation). The dynamic checks see the race latent
// (rt_smem_war_race): ok with a clean verdict, predicted from the code (calibration a guess, not measured).
// Gate rules version 11: rule 4's mbarrier form takes `mbarrier.pending_count` and an mbarrier test whose result
// decides nothing but the retry of a loop that computes nothing else (RT_FORM 0, 1 and 2).
#include "rt_redteam.cuh"

#ifndef RT_FORM
#define RT_FORM 0
#endif
#ifndef RT_FEW_RETRIES
#define RT_FEW_RETRIES 64  // RT_FORM 2: retries of a native wait (a guess)
#endif
#ifndef RT_ALU_STEPS
#define RT_ALU_STEPS 2048  // ~4 cycles each: ~8k cycles natively and under the tool
#endif
#ifndef RT_LOADS
#define RT_LOADS 48  // dependent shared loads: ~30 cycles each natively, hundreds instrumented
#endif

RT_ENTRY {
    __shared__ float red[8];
    __shared__ unsigned int chase[32];
    __shared__ __align__(8) unsigned long long mbar;
    __shared__ int careful;
    const unsigned int bar = (unsigned int)__cvta_generic_to_shared(&mbar);
    rt_chase_init(chase);
    if (threadIdx.x == 0)
        asm volatile("mbarrier.init.shared.b64 [%0], %1;" :: "r"(bar), "r"(RT_FORM == 1 ? 2 : 1) : "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned int c = rt_load_chain(chase, (unsigned int)M & 31u, RT_LOADS);
        asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared.b64 st, [%0];\n\t}" :: "r"(bar + (c >> 8)) : "memory");
    } else if (threadIdx.x == 32) {
        const unsigned int v = rt_alu_chain((unsigned int)N | 1u, RT_ALU_STEPS);
        unsigned int first;  // 1: warp 0 arrived before this point
#if RT_FORM == 0
        asm volatile("{\n\t.reg .pred done;\n\tmbarrier.test_wait.parity.shared.b64 done, [%1], 0;\n\t"
                     "selp.u32 %0, 1, 0, done;\n\t}" : "=r"(first) : "r"(bar + (v == 0x5EC0DEu ? 8u : 0u)) : "memory");
#elif RT_FORM == 2
        // no single test: wait for the phase after the ALU chain, counting the retries: natively the load chain is
        // done by then (no retry), instrumented it takes many
        unsigned int n = 0;
        asm volatile("{\n\t.reg .pred done;\n\tmov.u32 %0, 0;\nRT_RETRY:\n\t"
                     "mbarrier.test_wait.parity.shared.b64 done, [%1], 0;\n\t@done bra RT_DONE;\n\t"
                     "add.u32 %0, %0, 1;\n\tbra RT_RETRY;\nRT_DONE:\n\t}" : "=r"(n) : "r"(bar + (v == 0x5EC0DEu ? 8u : 0u))
                     : "memory");
        first = n <= RT_FEW_RETRIES ? 1u : 0u;
#else
        unsigned int n;
        asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared.b64 st, [%1];\n\t"
                     "mbarrier.pending_count.b64 %0, st;\n\t}" : "=r"(n) : "r"(bar + (v == 0x5EC0DEu ? 8u : 0u))
                     : "memory");
        first = n == 0u;
#endif
        careful = first == 0u;
    }
    __syncthreads();
    const bool keep_barrier = careful != 0;
    rt_rows4(x, w, y, M, N, eps, red, keep_barrier);
}
