// Thread-block clusters: each CTA of a 2-CTA cluster reads its neighbour's shared memory (DSMEM)
// after a cluster barrier.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void __cluster_dims__(2, 1, 1) cluster_swap(const int* __restrict__ in, int* __restrict__ out) {
  __shared__ int local[256];
  cg::cluster_group cluster = cg::this_cluster();
  unsigned rank = cluster.block_rank();
  local[threadIdx.x] = in[blockIdx.x * 256 + threadIdx.x];
  cluster.sync();
  int* remote = cluster.map_shared_rank(local, rank ^ 1u);
  out[blockIdx.x * 256 + threadIdx.x] = remote[threadIdx.x] + (int)cluster.num_blocks();
  cluster.sync();
}
