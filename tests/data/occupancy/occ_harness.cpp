// Reads "major minor threads_per_sm smem_per_sm optin reserved block regs static_smem dyn_smem barriers" lines
// on stdin and prints cuda_occupancy.h's cudaOccMaxActiveBlocksPerMultiprocessor result for each:
// "status blocks limit_regs limit_smem limit_warps limit_blocks limit_barriers alloc_regs alloc_smem".
// Built by tests/test_occupancy_header.py against the installed CUDA's cuda_occupancy.h.
#include <cstdio>
#include <climits>
#include "cuda_occupancy.h"

int main() {
    int major, minor, threads_sm, block, regs, barriers;
    long smem_sm, optin, reserved, static_smem, dyn;
    while (std::scanf("%d %d %d %ld %ld %ld %d %d %ld %ld %d", &major, &minor, &threads_sm, &smem_sm, &optin,
                      &reserved, &block, &regs, &static_smem, &dyn, &barriers) == 11) {
        cudaOccDeviceProp p;
        p.computeMajor = major;
        p.computeMinor = minor;
        p.maxThreadsPerBlock = 1024;
        p.maxThreadsPerMultiprocessor = threads_sm;
        p.regsPerBlock = 65536;
        p.regsPerMultiprocessor = 65536;
        p.warpSize = 32;
        p.sharedMemPerBlock = 48 * 1024;
        p.sharedMemPerMultiprocessor = smem_sm;
        p.numSms = 1;
        p.sharedMemPerBlockOptin = optin;
        p.reservedSharedMemPerBlock = reserved;
        cudaOccFuncAttributes a;
        a.maxThreadsPerBlock = 1024;
        a.numRegs = regs;
        a.sharedSizeBytes = static_smem;
        a.partitionedGCConfig = PARTITIONED_GC_OFF;
        a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
        a.maxDynamicSharedSizeBytes = dyn;
        a.numBlockBarriers = barriers;
        a.virtualResourceCount = 0;
        cudaOccDeviceState s;
        cudaOccResult r;
        cudaOccError e = cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, block, dyn);
        std::printf("%d %d %d %d %d %d %d %d %ld\n", (int)e, r.activeBlocksPerMultiprocessor, r.blockLimitRegs,
                    r.blockLimitSharedMem, r.blockLimitWarps, r.blockLimitBlocks, r.blockLimitBarriers,
                    r.allocatedRegistersPerBlock, (long)r.allocatedSharedMemPerBlock);
    }
    return 0;
}
