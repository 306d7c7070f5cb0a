// Non-inlined device calls (call sequences in nested scopes), an indirect call through a function
// pointer (.callprototype), printf (extern vprintf, a local-memory stack frame).
#include <cstdio>
__device__ __noinline__ float poly3(float x, float a, float b) { return (a * x + b) * x - 1.f; }
__device__ __noinline__ float twice(float x) { return 2.f * x; }
__device__ __noinline__ float negate(float x) { return -x; }
typedef float (*unary)(float);
__device__ unary table[2] = {twice, negate};

extern "C" __global__ void call_mix(const float* __restrict__ x, float* __restrict__ y, int n, int which) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = poly3(x[i], 0.5f, 2.f);
  v = table[which & 1](v);
  if (i == 0) printf("first=%f n=%d\n", v, n);
  y[i] = v;
}
