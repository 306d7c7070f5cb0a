// Ampere-style cp.async double buffering (cp.async.cg 16-byte copies, commit/wait groups).
#include <cstdint>
extern "C" __global__ void cp_async_sum(const float4* __restrict__ src, float* __restrict__ dst, int tiles) {
  __shared__ __align__(16) float4 buf[2][128];
  float acc = 0.f;
  auto issue = [&](int t, int s) {
    uint32_t saddr = (uint32_t)__cvta_generic_to_shared(&buf[s][threadIdx.x]);
    const float4* g = src + ((long)blockIdx.x * tiles + t) * 128 + threadIdx.x;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(saddr), "l"(g) : "memory");
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  issue(0, 0);
  for (int t = 0; t < tiles; ++t) {
    if (t + 1 < tiles) {
      issue(t + 1, (t + 1) & 1);
      asm volatile("cp.async.wait_group 1;" ::: "memory");
    } else {
      asm volatile("cp.async.wait_all;" ::: "memory");
    }
    __syncthreads();
    float4 v = buf[t & 1][threadIdx.x];
    acc += v.x + v.y + v.z + v.w;
    __syncthreads();
  }
  dst[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
