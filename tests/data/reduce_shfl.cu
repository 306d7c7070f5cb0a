// Block sum reduction: warp shuffles, a shared-memory stage across warps, one atomic per block.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
  __shared__ float partial[32];
  float v = 0.f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += x[i];
  v = warp_sum(v);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (blockDim.x + 31) / 32 ? partial[lane] : 0.f;
    v = warp_sum(v);
    if (lane == 0) atomicAdd(out, v);
  }
}

extern "C" __global__ void argmax_rows(const float* __restrict__ x, int* __restrict__ idx, int cols) {
  const float* row = x + (long)blockIdx.x * cols;
  float best = -__int_as_float(0x7f800000);
  int at = 0;
  for (int c = threadIdx.x; c < cols; c += 32) {
    float v = row[c];
    if (v > best) { best = v; at = c; }
  }
  for (int o = 16; o > 0; o >>= 1) {
    float ob = __shfl_down_sync(0xffffffffu, best, o);
    int oa = __shfl_down_sync(0xffffffffu, at, o);
    if (ob > best || (ob == best && oa < at)) { best = ob; at = oa; }
  }
  if (threadIdx.x == 0) idx[blockIdx.x] = at;
}
