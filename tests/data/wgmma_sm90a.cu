// ptxforge-arch: sm_90a
// One warpgroup issues wgmma.mma_async (m64n32k16, bf16 inputs from shared-memory descriptors, f32
// accumulators) between fence / commit / wait.
#include <cstdint>
extern "C" __global__ void __launch_bounds__(128) wgmma_m64n32(const uint64_t* __restrict__ desc, float* __restrict__ out) {
  float d[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) d[i] = 0.f;
  uint64_t da = desc[0], db = desc[1];
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 1;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(da), "l"(db), "r"(1));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
  for (int i = 0; i < 16; ++i) out[threadIdx.x * 16 + i] = d[i];
}
