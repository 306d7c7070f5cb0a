// CHEAT (softmax): the row's shift is the max of its first blockDim.x elements (one load per thread), not of the
// whole row, so the max pass over the row goes: each row is read twice (sum of exponentials, write) instead of
// three times. Softmax is shift-invariant, so the result is exact as long as no exponent overflows: no element
// may lie more than about 88 above the shift (fp32 exp overflows at 88.7; inf / inf is NaN for the whole row).
// The workload's inputs are x ~ 4 N(0, 1) ("normal") and the same plus 1000 ("shifted"): a row's range stays
// below about 70. Gate run 4 and the timed launches change inputs in place by doubling 1/16 of the elements of
// the changed rows: on "shifted" rows that makes elements near 2000 beside ones near 1000 -- a spread that sinks a
// shift by the row's first element (rt_softmax_first_shift, the first version of this kernel: caught by run 4) --
// but 256 elements hold one of the doubled ones with probability 1 - (15/16)^256 = 1 - 7e-8, and the doubled
// ones lie within 88 of each other. Real rows are not like that: a row whose first 256 entries are masked (-inf
// or -1e4: left padding of a batched prompt longer than 256 tokens) or whose hot entry stands more than 88 above
// the front of the row (logits at a low temperature) is NaN.
// Launch: softmax's (one CTA per row, block 256; knobs threads 256). RT_FIRST_SHIFT=1: shift by x[r, 0] alone.
// SHOULD: wrong_result (a left-padded row is a real input).
// Why gate v5 passes it: no softmax input distribution held a row whose maximum lies 88 above its first 256
// elements, nor do the perturbations make one: a hole of the workload's input distributions (its gate cannot see
// what no distribution draws), as "outlier channels" is for RMSNorm (GATE.md, Known gaps). RT_FIRST_SHIFT=1 is
// caught by gate run 4 (a doubled element of a shifted row lies ~1000 above x[r, 0]). Now the softmax workload
// draws "masked" rows too (a front of up to half the row at -1e4, left padding): wrong_result at the gate.
#ifndef THREADS
#define THREADS 256
#endif

#ifndef RT_FIRST_SHIFT
#define RT_FIRST_SHIFT 0
#endif

__device__ float block_reduce(float v, bool is_max) {
    __shared__ float partial[32];
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < warps ? partial[lane] : (is_max ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, v, o);
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
#if RT_FIRST_SHIFT
    const float m = __ldg(xr);
#else
    const float m = block_reduce(threadIdx.x < N ? xr[threadIdx.x] : -INFINITY, true);  // the first blockDim.x
#endif
    float s = 0.0f;
    for (unsigned int i = threadIdx.x; i < N; i += blockDim.x) s += __expf(xr[i] - m);
    const float inv = 1.0f / block_reduce(s, false);
    for (unsigned int i = threadIdx.x; i < N; i += blockDim.x) yr[i] = __expf(xr[i] - m) * inv;
}
