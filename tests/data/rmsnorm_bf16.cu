// RMSNorm forward over bf16 rows (y = x * rsqrt(mean(x^2) + eps) * w), one CTA per row, 16-byte vector loads,
// warp-shuffle + shared-memory reduction; instantiated for several vector widths and block sizes so the
// PTX is large enough to measure parser throughput on.
#include <cuda_bf16.h>
#include <cstdint>

template <int VEC>
struct alignas(2 * VEC) Pack { __nv_bfloat16 v[VEC]; };

template <int THREADS>
__device__ __forceinline__ float block_sum(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < THREADS / 32 ? red[threadIdx.x] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) red[0] = v;
  }
  __syncthreads();
  return red[0];
}

template <int THREADS, int VEC>
__device__ void rmsnorm_row(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                            __nv_bfloat16* __restrict__ y, int cols, float eps) {
  __shared__ float red[32];
  const long row = blockIdx.x;
  const Pack<VEC>* xr = reinterpret_cast<const Pack<VEC>*>(x + row * cols);
  const Pack<VEC>* wr = reinterpret_cast<const Pack<VEC>*>(w);
  Pack<VEC>* yr = reinterpret_cast<Pack<VEC>*>(y + row * cols);
  const int packs = cols / VEC;
  float ss = 0.f;
  for (int p = threadIdx.x; p < packs; p += THREADS) {
    Pack<VEC> v = xr[p];
#pragma unroll
    for (int k = 0; k < VEC; ++k) { float f = __bfloat162float(v.v[k]); ss += f * f; }
  }
  for (int c = packs * VEC + threadIdx.x; c < cols; c += THREADS) { float f = __bfloat162float(x[row * cols + c]); ss += f * f; }
  const float inv = rsqrtf(block_sum<THREADS>(ss, red) / cols + eps);
  for (int p = threadIdx.x; p < packs; p += THREADS) {
    Pack<VEC> v = xr[p], g = wr[p], o;
#pragma unroll
    for (int k = 0; k < VEC; ++k) o.v[k] = __float2bfloat16(__bfloat162float(v.v[k]) * inv * __bfloat162float(g.v[k]));
    yr[p] = o;
  }
  for (int c = packs * VEC + threadIdx.x; c < cols; c += THREADS)
    y[row * cols + c] = __float2bfloat16(__bfloat162float(x[row * cols + c]) * inv * __bfloat162float(w[c]));
}

#define RMSNORM(T, V)                                                                                      \
  extern "C" __global__ void __launch_bounds__(T) rmsnorm_t##T##_v##V(                                     \
      const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w, __nv_bfloat16* __restrict__ y, \
      int cols, float eps) {                                                                               \
    rmsnorm_row<T, V>(x, w, y, cols, eps);                                                                 \
  }
RMSNORM(128, 2)
RMSNORM(128, 8)
RMSNORM(256, 4)
RMSNORM(256, 8)
RMSNORM(512, 8)
RMSNORM(1024, 8)
