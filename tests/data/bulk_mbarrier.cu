// Hopper bulk copy (cp.async.bulk) into shared memory completed through an mbarrier transaction count,
// then a bulk store back to global memory.
#include <cstdint>
extern "C" __global__ void bulk_roundtrip(const float* __restrict__ src, float* __restrict__ dst) {
  __shared__ alignas(128) float tile[2048];
  __shared__ alignas(8) uint64_t bar;
  uint32_t b = (uint32_t)__cvta_generic_to_shared(&bar);
  uint32_t s = (uint32_t)__cvta_generic_to_shared(tile);
  const uint32_t bytes = sizeof(tile);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
    asm volatile("fence.proxy.async.shared::cta;");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(bytes));
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(s), "l"(src + blockIdx.x * 2048), "r"(bytes), "r"(b) : "memory");
  }
  uint32_t ready = 0;
  while (!ready) {
    asm volatile("{\n\t.reg .pred P;\n\tmbarrier.try_wait.parity.shared::cta.b64 P, [%1], %2;\n\tselp.u32 %0, 1, 0, P;\n\t}"
                 : "=r"(ready) : "r"(b), "r"(0u) : "memory");
  }
  for (int i = threadIdx.x; i < 2048; i += blockDim.x) tile[i] *= 2.f;
  asm volatile("fence.proxy.async.shared::cta;");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 :: "l"(dst + blockIdx.x * 2048), "r"(s), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  }
}
