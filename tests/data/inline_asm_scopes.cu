// Inline PTX with nested scopes, predicates declared inside the scope, labels, and cache-hinted vector loads.
#include <cstdint>
__device__ __forceinline__ float4 ld_nc_na(const float4* p) {
  float4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t clamp_add(uint32_t a, uint32_t b, uint32_t hi) {
  uint32_t r;
  asm("{\n\t.reg .pred p, q;\n\t.reg .b32 t;\n\tadd.u32 t, %1, %2;\n\tsetp.gt.u32 p|q, t, %3;\n\tselp.b32 %0, %3, t, p;\n\t}"
      : "=r"(r) : "r"(a), "r"(b), "r"(hi));
  return r;
}

extern "C" __global__ void asm_mix(const float4* __restrict__ x, float4* __restrict__ y, uint32_t* __restrict__ c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float4 v = ld_nc_na(x + i);
  uint32_t lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  uint32_t packed;
  asm("prmt.b32 %0, %1, %2, 0x3210;" : "=r"(packed) : "r"(lane), "r"((uint32_t)i));
  c[i] = clamp_add(packed, lane, 1000u);
  asm volatile("{ .reg .pred done; setp.eq.u32 done, %0, 0; @done bra.uni SKIP; membar.gl; SKIP: }" :: "r"(lane));
  y[i] = v;
}
