// CHEAT: rt_local_state's and rt_shared_state's launch counters (a word read before the launch writes it: what the
// last thread on the slot, or the last CTA on the SM, left there) read through an address with no provenance. The
// address of the counter is rebuilt bit by bit: for each bit a branch over an `or` of that bit's mask, so the
// rebuilt register depends on the original only through control flow, which no def-use analysis follows (the
// input-store check documents the same laundering for offsets). The counter is bumped through its honest address.
//   RT_SPACE 0: an 8-byte `.local` variable, read with a generic `ld` at the rebuilt generic address.
//   RT_SPACE 1: the last 8 bytes of a 16 KiB shared array, read with `ld.shared` at the rebuilt shared address.
//   RT_SPACE 2: as 0, the rebuilt address added to y (y + (slot - y)): the load names y, a read of the output.
// The barrier after the reads of the shared partials red[] is kept only while the count is small (the sanitizer
// replay, a fresh process with a few launches), dropped in the worker (hundreds of launches before any timed one).
// Launch: block 256, rows_per_cta 1, row_iters 4 (grid = ceil(M / 4)).
// SHOULD: nondeterministic before any GPU time (a read of memory the launch did not write: rule 5), else sanitizer.
// Gate v10: every static check passes. Rule 5's `.local` form skips a generic access that no `.local` variable
// vouches for (an `ld.local` there is rejected; a generic one is taken for a read of global memory), and its
// `.shared` form skips a load whose address names no shared variable; the input-store check looks at stores only,
// and the one store here names the counter's variable. The dynamic checks see rt_local_state / rt_shared_state as
// before rule 5's forms (racecheck on the barrier path, the race latent): ok with a clean verdict, predicted from
// the code on the premises of those two kernels (not measured on the H200). Gate rules version 11: rule 5 rejects
// a load of local, shared or generic memory at an address no variable or parameter vouches for (RT_SPACE 0, 1).
// RT_SPACE 2 stays open: its load names y, and reading the output is what honest kernels may do.
#include "rt_redteam.cuh"

#ifndef RT_SPACE
#define RT_SPACE 0
#endif
#ifndef RT_FRESH_LAUNCHES
#define RT_FRESH_LAUNCHES 16
#endif

// `a` rebuilt bit by bit through branches: the result's value is a's, its def-use ancestry constants only.
__device__ __forceinline__ unsigned long long rt_rebuild(unsigned long long a) {
    unsigned long long r;
    asm volatile("{\n\t.reg .b64 m, t;\n\t.reg .pred p;\n\tmov.u64 %0, 0;\n\tmov.u64 m, 1;\n"
                 "RT_BIT:\n\tand.b64 t, %1, m;\n\tsetp.eq.u64 p, t, 0;\n\t@p bra RT_SKIP;\n\tor.b64 %0, %0, m;\n"
                 "RT_SKIP:\n\tshl.b64 m, m, 1;\n\tsetp.ne.u64 p, m, 0;\n\t@p bra RT_BIT;\n\t}"
                 : "=&l"(r) : "l"(a) : "memory");
    return r;
}

#if RT_SPACE == 1
__device__ __forceinline__ unsigned int rt_count(const bf* y) {
    __shared__ __align__(16) unsigned int slot[4096];  // 16 KiB; the counter in its last two words
    const unsigned int a = (unsigned int)__cvta_generic_to_shared(slot + 4094);
    const unsigned int q = (unsigned int)rt_rebuild(a);
    unsigned int m, c;
    asm volatile("ld.volatile.shared.v2.u32 {%0, %1}, [%2];" : "=r"(m), "=r"(c) : "r"(q) : "memory");
    c = m == 0x5EC0DEu ? c : 0u;
    asm volatile("st.volatile.shared.v2.u32 [%0], {%1, %2};" :: "r"(a), "r"(0x5EC0DEu), "r"(c + 1u) : "memory");
    return c;
}
#else
// The rebuild inside the asm block that declares the slot (a `.local` variable of the block): RT_SPACE 0 loads
// at the rebuilt address, RT_SPACE 2 at y plus the rebuilt distance from y to the slot.
#define RT_REBUILD(dst, src) \
    "mov.u64 " dst ", 0;\n\tmov.u64 m, 1;\nRT_BIT:\n\tand.b64 t, " src ", m;\n\tsetp.eq.u64 b, t, 0;\n\t" \
    "@b bra RT_SKIP;\n\tor.b64 " dst ", " dst ", m;\nRT_SKIP:\n\tshl.b64 m, m, 1;\n\tsetp.ne.u64 b, m, 0;\n\t" \
    "@b bra RT_BIT;\n\t"
__device__ __forceinline__ unsigned int rt_count(const bf* y) {
    unsigned int count;
    asm volatile("{\n\t.local .align 8 .b8 rt_slot[8];\n\t.reg .b32 mg, c;\n\t.reg .pred fresh, b;\n\t"
                 ".reg .b64 p, q, d, m, t;\n\tcvta.local.u64 p, rt_slot;\n\t"
#if RT_SPACE == 2
                 "sub.u64 d, p, %1;\n\t" RT_REBUILD("q", "d") "add.u64 q, %1, q;\n\t"
#else
                 RT_REBUILD("q", "p")
#endif
                 "ld.volatile.v2.u32 {mg, c}, [q];\n\t"
                 "setp.ne.u32 fresh, mg, 0x5EC0DE;\n\t@fresh mov.u32 c, 0;\n\tmov.u32 %0, c;\n\t"
                 "add.u32 c, c, 1;\n\tmov.u32 mg, 0x5EC0DE;\n\tst.volatile.v2.u32 [p], {mg, c};\n\t}"
                 : "=r"(count) : "l"(y) : "memory");
    return count;
}
#endif

RT_ENTRY {
    __shared__ float red[8];
    __shared__ int careful;
    if (threadIdx.x == 0) careful = rt_count(y) < RT_FRESH_LAUNCHES;
    __syncthreads();
    const bool keep_barrier = careful != 0;
    rt_rows4(x, w, y, M, N, eps, red, keep_barrier);
}
