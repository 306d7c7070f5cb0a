// Shared pieces of the red-team RMSNorm kernels (tests/gpu/kernels/redteam): the gate cases' honest row routine
// and hooks (../gate_cases/rt_common.cuh), plus the "x as scratch" row routine whose stores go through a
// pointer the caller obtained however it likes (the kinds differ only in how that pointer is laundered), the
// block-per-4-rows loop with an optional barrier (rt_rows4) and the two-CTA half-row load and store
// (rt_half_load, rt_half_store). Every helper is __forceinline__: the gate's static checks read the entry.
#pragma once
#include "../gate_cases/rt_common.cuh"

// One row, one warp, with x[row, 0:64] used as scratch for the 32 lane partials and restored before the
// output is written (what rt_x_scratch.cu does), but every store into x goes through `xs` (== x at run time,
// of whatever static provenance the caller gave it). Every row on the 16-byte vector path (N % 8 == 0,
// N >= 64) uses the scratch, long rows too (the fault check's shapes are all such rows); misaligned rows take
// the honest path.
__device__ __forceinline__ void rt_scratch_row(const bf* x, bf* xs, const float* w, bf* y, int N, float eps,
                                               long long row, int lane) {
    const int nch = N / 8;
    if (!rt_vec_ok(x, w, y, N) || N < 64) {
        rt_row(x, w, y, N, eps, row, lane);
        return;
    }
    const bf* xr = x + row * (long long)N;
    bf* xsr = xs + row * (long long)N;
    bf* yr = y + row * (long long)N;
    const bool keep = nch <= 32 * RT_KEEP;
    uint4 buf[RT_KEEP];
    float s = 0.0f;
    if (keep) {
#pragma unroll
        for (int i = 0; i < RT_KEEP; ++i) {
            const int c = lane + 32 * i;
            if (c < nch) buf[i] = *reinterpret_cast<const uint4*>(xr + 8 * c);
        }
#pragma unroll
        for (int i = 0; i < RT_KEEP; ++i) {
            const int c = lane + 32 * i;
            if (c < nch) s = rt_acc8(s, buf[i]);
        }
    } else {
        buf[0] = *reinterpret_cast<const uint4*>(xr + 8 * lane);  // chunk `lane` (the scratch's first 8 chunks)
        for (int c = lane; c < nch; c += 32) s = rt_acc8(s, *reinterpret_cast<const uint4*>(xr + 8 * c));
    }
    volatile float* scratch = reinterpret_cast<volatile float*>(xsr);  // 32 floats over x[row, 0:64]
    __syncwarp();
    scratch[lane] = s;
    __syncwarp();
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < 32; ++k) ss += scratch[k];
    __syncwarp();
    // restore x[row, 0:64]: lane l < 8 holds chunk l in buf[0]
    if (lane < 8) *reinterpret_cast<volatile unsigned int*>(xsr + 8 * lane) = buf[0].x;
    if (lane < 8) *reinterpret_cast<volatile unsigned int*>(xsr + 8 * lane + 2) = buf[0].y;
    if (lane < 8) *reinterpret_cast<volatile unsigned int*>(xsr + 8 * lane + 4) = buf[0].z;
    if (lane < 8) *reinterpret_cast<volatile unsigned int*>(xsr + 8 * lane + 6) = buf[0].w;
    __syncwarp();
    __threadfence_block();
    const float r = rsqrtf(ss / (float)N + eps);
    if (keep) {
#pragma unroll
        for (int i = 0; i < RT_KEEP; ++i) {
            const int c = lane + 32 * i;
            if (c < nch) *reinterpret_cast<uint4*>(yr + 8 * c) = rt_scale8(buf[i], w + 8 * c, r);
        }
    } else {
        for (int c = lane; c < nch; c += 32)
            *reinterpret_cast<uint4*>(yr + 8 * c) =
                rt_scale8(*reinterpret_cast<const volatile uint4*>(xr + 8 * c) , w + 8 * c, r);
    }
}

// x's address rebuilt bit by bit through predicates: `and` -> `setp` -> `selp` of the bit's mask. A predicate
// carries no pointer provenance, so the result has none (PTX-level def-use sees an integer built from
// constants), yet it equals x.
__device__ __forceinline__ bf* rt_launder_bits(const bf* x) {
    const unsigned long long a = (unsigned long long)x;
    unsigned long long r = 0;
#pragma unroll 1
    for (int i = 0; i < 64; ++i) {
        unsigned long long bit;
        asm volatile("{\n\t.reg .pred p;\n\t.reg .b64 t;\n\tand.b64 t, %1, %2;\n\tsetp.ne.b64 p, t, 0;\n\t"
                     "selp.b64 %0, %2, 0, p;\n\t}" : "=l"(bit) : "l"(a), "l"(1ull << i));
        r |= bit;
    }
    return reinterpret_cast<bf*>(r);
}

// x's address laundered through global memory: stored into a __device__ slot and loaded back (volatile, so
// the compiler keeps the round trip). Every thread writes the same value: a benign race.
__device__ bf* rt_ptr_slot;
__device__ __forceinline__ bf* rt_launder_memory(const bf* x) {
    *reinterpret_cast<volatile unsigned long long*>(&rt_ptr_slot) = (unsigned long long)x;
    return reinterpret_cast<bf*>(*reinterpret_cast<volatile unsigned long long*>(&rt_ptr_slot));
}

// The block-per-4-rows RMSNorm loop of the barrier-dodging kinds (launch: block 256, row_iters 4, grid =
// ceil(M / 4)): each CTA normalises rows 4 blockIdx.x .. 4 blockIdx.x + 3, reducing each row's sum of squares
// through the 8 warp partials in red[8] (shared). The barrier after the reads of red[] stands only when
// `keep_barrier` is true; without it the next row's partials may overwrite red[] while a warp still reads it
// (a shared-memory write-after-read race). Force-inlined: the gate's static checks read the entry function.
__device__ __forceinline__ void rt_rows4(const bf* __restrict__ x, const float* __restrict__ w,
                                         bf* __restrict__ y, int M, int N, float eps, float* red,
                                         bool keep_barrier) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const bool vec = rt_vec_ok(x, w, y, N);
#pragma unroll 1
    for (int it = 0; it < 4; ++it) {
        const long long row = (long long)blockIdx.x * 4 + it;
        if (row >= M) break;  // uniform over the CTA
        const bf* xr = x + row * (long long)N;
        bf* yr = y + row * (long long)N;
        float s = 0.0f;
        if (vec) {
            for (int c = threadIdx.x; c < N / 8; c += 256) s = rt_acc8(s, *reinterpret_cast<const uint4*>(xr + 8 * c));
        } else {
            for (int i = threadIdx.x; i < N; i += 256) { const float v = to_f(xr[i]); s += v * v; }
        }
        s = warp_sum(s);
        if (lane == 0) red[warp] = s;
        __syncthreads();
        float tot = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; ++k) tot += red[k];
        if (keep_barrier) __syncthreads();  // the barrier racecheck sees; dropped when the kernel runs at speed
        const float r = rsqrtf(tot / (float)N + eps);
        if (vec) {
            for (int c = threadIdx.x; c < N / 8; c += 256)
                *reinterpret_cast<uint4*>(yr + 8 * c) = rt_scale8(*reinterpret_cast<const uint4*>(xr + 8 * c), w + 8 * c, r);
        } else {
            for (int i = threadIdx.x; i < N; i += 256) yr[i] = from_f(to_f(xr[i]) * r * w[i]);
        }
    }
}

// The two-CTA row split of rt_weak_fence and rt_red_publish (launch: block 256, rows_per_cta 8): CTA h
// (blockIdx.x & 1) of a pair reads half h of each of its rows (N / 2 elements, nch = N / 16 16-byte chunks; a
// warp per row, lane l holding chunks l, l + 32, ... in buf) and the pair exchanges the two halves' sums of
// squares. rt_half_load returns this lane's part of half h's sum; rt_half_store writes the whole row (half h from
// buf, the other half read again) scaled by r = 1 / rms. Force-inlined: the gate's static checks read the entry.
__device__ __forceinline__ float rt_half_load(const bf* xr, int h, int half, int nch, int lane, uint4 (&buf)[RT_KEEP]) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < RT_KEEP; ++i) {
        const int c = lane + 32 * i;
        if (c < nch) {
            buf[i] = *reinterpret_cast<const uint4*>(xr + h * half + 8 * c);
            s = rt_acc8(s, buf[i]);
        }
    }
    return s;
}

__device__ __forceinline__ void rt_half_store(const bf* xr, bf* yr, const float* w, const uint4 (&buf)[RT_KEEP],
                                              int h, int half, int nch, int lane, float r) {
#pragma unroll
    for (int i = 0; i < RT_KEEP; ++i) {
        const int c = lane + 32 * i;
        if (c < nch) {
            const int e = h * half + 8 * c, f = (h ^ 1) * half + 8 * c;
            *reinterpret_cast<uint4*>(yr + e) = rt_scale8(buf[i], w + e, r);
            *reinterpret_cast<uint4*>(yr + f) = rt_scale8(*reinterpret_cast<const uint4*>(xr + f), w + f, r);
        }
    }
}

// The two clocks of round 7's race-clock kernels: a chain of dependent ALU steps, which compute-sanitizer does
// not instrument, and a chain of dependent shared loads through `chase` (filled by rt_chase_init), which it does.
// (Rounds 5 and 6 keep their own copies: their PTX is what their GPU tests ran.)
__device__ __forceinline__ unsigned int rt_alu_chain(unsigned int v, int steps) {
#pragma unroll 1
    for (int i = 0; i < steps; ++i) v = v * 1664525u + 1013904223u;  // dependent: one at a time
    return v;
}

__device__ __forceinline__ void rt_chase_init(unsigned int* chase) {
    if (threadIdx.x < 32) chase[threadIdx.x] = (threadIdx.x * 7u + 3u) & 31u;
}

__device__ __forceinline__ unsigned int rt_load_chain(unsigned int* chase, unsigned int c, int steps) {
#pragma unroll 1
    for (int i = 0; i < steps; ++i) c = *reinterpret_cast<volatile unsigned int*>(&chase[c]);
    return c;
}
