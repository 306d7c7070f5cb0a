// fp16 / bf16 conversions and packed arithmetic: half2 FMA, bf16 round trips, rounding-mode conversions.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void half_ops(const __half2* __restrict__ a, const __half2* __restrict__ b, __half2* __restrict__ c,
                                    float* __restrict__ f, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half2 r = __hfma2(a[i], b[i], __float2half2_rn(0.5f));
  c[i] = r;
  f[i] = __low2float(r) + __high2float(r);
}

extern "C" __global__ void bf16_convert(const float* __restrict__ x, __nv_bfloat16* __restrict__ y,
                                        __nv_bfloat162* __restrict__ y2, float* __restrict__ back, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  __nv_bfloat16 h = __float2bfloat16_rn(v);
  y[i] = h;
  y2[i] = __floats2bfloat162_rn(v, -v);
  back[i] = __bfloat162float(h) + __half2float(__float2half_rz(v));
}
