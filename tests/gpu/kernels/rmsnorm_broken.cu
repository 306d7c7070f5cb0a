// Deliberately broken RMSNorm kernels (bf16 x, fp32 w), each with the workload ABI (x, w, y, M, N, eps) and
// one defect chosen by BROKEN; the gate / supervisor must reject each with the right status:
//   1 writes only the first half of the rows                     -> wrong_result (unwritten)
//   2 reads shared memory nothing in this CTA wrote              -> nondeterministic (race lint rule 5, .shared form)
//   3 misses the barrier between the warp sums and their reader  -> wrong_result or nondeterministic
//   4 never terminates                                            -> timeout
//   5 stores far out of bounds (unmapped address)                 -> crash
//   6 stores just past the end of y (into the guard zone)         -> wrong_result (bounds)
// Launch: one 256-thread CTA per row.
#include <cuda_bf16.h>

__device__ __forceinline__ float to_f(unsigned short b) { return __uint_as_float(((unsigned int)b) << 16); }
__device__ __forceinline__ unsigned short from_f(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

extern "C" __global__ void rmsnorm(const unsigned short* __restrict__ x, const float* __restrict__ w,
                                   unsigned short* __restrict__ y, int M, int N, float eps) {
    __shared__ float warp_sums[32];
    __shared__ float stash[2048];
    const long long row = blockIdx.x;
    if (row >= M) return;
#if BROKEN == 1
    if (row >= (M + 1) / 2) return;
#endif
    const unsigned short* xr = x + row * (long long)N;
    unsigned short* yr = y + row * (long long)N;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = to_f(xr[i]);
        ss += v * v;
    }
#if BROKEN == 2
    ss += stash[threadIdx.x];  // never written in this CTA: whatever an earlier CTA left there
#endif
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_sums[warp] = ss;
#if BROKEN != 3
    __syncthreads();
#endif
    if (warp == 0) {
        ss = lane < (int)(blockDim.x / 32) ? warp_sums[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) warp_sums[0] = ss;
    }
#if BROKEN != 3
    __syncthreads();
#endif
    const float r = rsqrtf(warp_sums[0] / (float)N + eps);
#if BROKEN == 4
    // r is never NaN for finite inputs: spins forever (no nanosleep: race lint rule 6 rejects a sleeping wait
    // before any GPU time; the empty volatile asm keeps the compiler from deleting the loop)
    while (r == r) asm volatile("");
#endif
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        const float v = to_f(xr[i]) * r * w[i];
        yr[i] = from_f(v);
        stash[i % 2048] = v;  // leaves row data behind in shared memory for the next CTA on this SM
    }
#if BROKEN == 5
    if (threadIdx.x == 0) y[(1LL << 40) + row] = 0;
#endif
#if BROKEN == 6
    if (threadIdx.x == 0 && row == M - 1) y[(long long)M * N + 7] = 0;
#endif
}
