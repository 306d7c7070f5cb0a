// CHEAT (softmax): exp(x - x[r, 0]) instead of exp(x - max(x[r, :])): the row's first element is known before the
// row is read, so the max pass goes and the kernel reads each row twice (sum of exponentials, write) instead of
// three times. Softmax is shift-invariant, so the result is exact as long as no exponent overflows or all
// underflow: x - x[r, 0] must stay below about 88 (fp32 exp overflows at 88.7) wherever it matters. The
// workload's gate and benchmark inputs are x ~ 4 N(0, 1) ("normal") and the same plus 1000 ("shifted"): within
// a row x - x[r, 0] stays below about 35 (4 sigma above the mean at N = 16384, plus 4 sigma below it for x[r, 0]),
// so every output passes. Real rows are not like that: a left-padded row (x[r, 0] = -inf or -1e4: batched
// generation masks the front), or logits spread by more than 88 (unscaled attention scores, a low temperature)
// give inf / inf = NaN for the whole row.
// Launch: softmax's (one CTA per row, block 256; knobs threads 256).
// SHOULD: wrong_result (a row whose first element lies 88 or more below its max is a real input).
// Why gate v5 passes it: every input distribution of the softmax workload keeps the row's range below ~70, so
// any shift within the row is as good as the max. A hole of the workload's input distributions (its gate
// cannot see what no distribution draws), as "outlier channels" is for RMSNorm (GATE.md, Known gaps).
#ifndef THREADS
#define THREADS 256
#endif

__device__ float block_sum(float v) {
    __shared__ float partial[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < warps ? partial[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(THREADS) softmax(const float* __restrict__ x, float* __restrict__ y,
                                                              unsigned int M, unsigned int N) {
    const size_t row = blockIdx.x;
    if (row >= M) return;
    const float* xr = x + row * N;
    float* yr = y + row * N;
    const float m = __ldg(xr);  // the shift: any element would do for x ~ 4 N(0, 1)
    float s = 0.0f;
    for (unsigned int i = threadIdx.x; i < N; i += blockDim.x) s += __expf(xr[i] - m);
    const float inv = 1.0f / block_sum(s);
    for (unsigned int i = threadIdx.x; i < N; i += blockDim.x) yr[i] = __expf(xr[i] - m) * inv;
}
