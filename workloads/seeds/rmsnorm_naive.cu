// RMSNorm forward, naive seed: y = x * rsqrt(mean(x^2) + eps) * w.
//
// One CTA per row (launch: grid = M, any blockDim.x that is a multiple of 32, up to 1024; 256 by default),
// scalar loads, two passes over the row in global memory (sum of squares, then normalise and scale).
// ABI shared by every RMSNorm seed: (x, w, y, M, N, eps); x, y: M*N elements of DTYPE, row-major;
// w: N floats; M, N: int32; eps: float32.
#include "rmsnorm_common.cuh"

extern "C" __global__ void rmsnorm(const S* __restrict__ x, const float* __restrict__ w, S* __restrict__ y,
                                   int M, int N, float eps) {
    __shared__ float warp_sums[32];
    const long long row = blockIdx.x;
    if (row >= M) return;  // uniform across the CTA: no thread reaches a barrier alone
    const S* xr = x + row * (long long)N;
    S* yr = y + row * (long long)N;

    float ss = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = to_f(xr[i]);
        ss += v * v;
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_sums[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        ss = lane < (int)(blockDim.x / 32) ? warp_sums[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) warp_sums[0] = ss;
    }
    __syncthreads();
    const float r = rsqrtf(warp_sums[0] / (float)N + eps);

    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        yr[i] = from_f(to_f(xr[i]) * r * w[i]);
    }
}
