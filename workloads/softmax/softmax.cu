// Row softmax, fp32: y[r, :] = exp(x[r, :] - max(x[r, :])) / sum(exp(x[r, :] - max(x[r, :]))).
// One CTA per row (grid = M), any multiple of 32 threads up to 1024 (blockDim.x); three passes over the row
// (max, sum of exponentials, write), each a strided loop plus a warp-shuffle and shared-memory reduction.
// THREADS only sets __launch_bounds__ (the template knob); the code reads blockDim.x.
#ifndef THREADS
#define THREADS 256
#endif

__device__ float block_reduce(float v, bool is_max) {
    __shared__ float partial[32];
    for (int o = 16; o > 0; o >>= 1) {
        float other = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < warps ? partial[lane] : (is_max ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
        float other = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    __syncthreads();  // partial[] is reused by the next reduction
    return v;
}

extern "C" __global__ void __launch_bounds__(THREADS) softmax(const float* __restrict__ x, float* __restrict__ y,
                                                              unsigned int M, unsigned int N) {
    const size_t row = blockIdx.x;
    if (row >= M) return;
    const float* xr = x + row * N;
    float* yr = y + row * N;
    float m = -INFINITY;
    for (unsigned int i = threadIdx.x; i < N; i += blockDim.x) m = fmaxf(m, xr[i]);
    m = block_reduce(m, true);
    float s = 0.0f;
    for (unsigned int i = threadIdx.x; i < N; i += blockDim.x) s += __expf(xr[i] - m);
    const float inv = 1.0f / block_reduce(s, false);
    for (unsigned int i = threadIdx.x; i < N; i += blockDim.x) yr[i] = __expf(xr[i] - m) * inv;
}
