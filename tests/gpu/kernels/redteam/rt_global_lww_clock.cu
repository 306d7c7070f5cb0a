// CHEAT: a sanitizer dodge timed by two warps racing to store into one word of global memory, with no loop, no
// atomic, no clock and no state. Lane 0 of warp 1 runs RT_ALU_STEPS dependent integer multiply-adds (not
// instrumented by compute-sanitizer) and then stores 1 into the CTA's first output element; lane 0 of warp 0 runs
// RT_LOADS dependent shared loads (a pointer chase through a table it filled; every one instrumented under the
// tool) and then stores 2 there. After a barrier every thread reads the word back: natively the load chain ends
// first and the ALU side's 1 is the last write (the CTA drops the barrier after the reads of the shared partials
// red[]); under compute-sanitizer the instrumented chain ends last, the word reads 2 and the barrier is kept, so
// racecheck sees a correct kernel. rt_rows4 then writes every output element, the raced word included (after
// the barrier: the race leaves no trace in y).
// The medium is what makes it new: rt_atomic_race_clock raced to a shared compare-and-swap (rule 4's order form
// rejects it), a plain-store race in shared memory is a write-after-write hazard racecheck reports, and a spin on
// the word (rt_local_spin_dodge) is rule 1. Two plain stores into global memory and a read after a barrier are
// none of these: racecheck tracks shared memory only, memcheck sees in-bounds accesses, and rule 2 needs a strong
// store or atomic as the flag.
// Launch: block 256, rows_per_cta 1, row_iters 4 (grid = ceil(M / 4)).
// SHOULD: nondeterministic before any GPU time (threads of a CTA exchange data through global memory, which no
// tool checks: here the exchange is a last-writer race, i.e. a clock), else sanitizer.
// Gate v10: every static check passes (no loop waits on the word, no atom, no strong store, no clock register,
// no .global variable; the stores address y); the gate and the checked timed launches run natively (the barrier
// dropped, the shared write-after-read race latent, as rt_smem_war_race); racecheck replays the barrier path:
// ok with a clean verdict, predicted from the code (the calibration of RT_LOADS against RT_ALU_STEPS is a guess,
// not measured on the H200). Gate rules version 11: race lint rule 8 (`global_exchange`): a global read of a
// location the kernel writes (an `ld`, or a `cp` out of global memory: RT_VIA_CP 1), on a path from the write
// through a CTA barrier.
#include "rt_redteam.cuh"

#ifndef RT_ALU_STEPS
#define RT_ALU_STEPS 2048  // ~4 cycles each: ~8k cycles natively and under the tool
#endif
#ifndef RT_VIA_CP
#define RT_VIA_CP 0  // 1: the word read back through a cp.async copy into shared memory
#endif
#ifndef RT_LOADS
#define RT_LOADS 48  // dependent shared loads: ~30 cycles each natively, hundreds instrumented
#endif

RT_ENTRY {
    __shared__ float red[8];
    __shared__ unsigned int chase[32];
    rt_chase_init(chase);
    __syncthreads();
    unsigned int* word = reinterpret_cast<unsigned int*>(y + (long long)blockIdx.x * 4 * (long long)N);
    if (threadIdx.x == 32) {
        const unsigned int v = rt_alu_chain((unsigned int)N | 1u, RT_ALU_STEPS);
        asm volatile("st.global.u32 [%0], %1;" :: "l"(word), "r"(1u | (v & 0x10000000u)) : "memory");
    } else if (threadIdx.x == 0) {
        const unsigned int c = rt_load_chain(chase, (unsigned int)M & 31u, RT_LOADS);
        asm volatile("st.global.u32 [%0], %1;" :: "l"(word), "r"(2u | (c << 8)) : "memory");
    }
    __syncthreads();
    unsigned int last;
#if RT_VIA_CP
    __shared__ __align__(16) unsigned int copy[4];
    if (threadIdx.x == 0) {
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n\tcp.async.wait_all;"
                     :: "r"((unsigned int)__cvta_generic_to_shared(copy)), "l"(word) : "memory");
    }
    __syncthreads();
    last = copy[0];
#else
    asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(last) : "l"(word) : "memory");
#endif
    const bool keep_barrier = (last & 3u) == 2u;  // the load chain wrote last: the shared loads ran slow
    __syncthreads();  // every thread has read the word before rt_rows4 overwrites it
    rt_rows4(x, w, y, M, N, eps, red, keep_barrier);
}
