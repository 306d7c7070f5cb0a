// Shared-memory tiled transpose (static tile with padding) and a dynamic-shared-memory row stage.
#define TILE 32
extern "C" __global__ void transpose(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
  __shared__ float tile[TILE][TILE + 1];
  int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += 8)
    if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(long)(y + j) * cols + x];
  __syncthreads();
  x = blockIdx.y * TILE + threadIdx.x; y = blockIdx.x * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += 8)
    if (x < rows && y + j < cols) out[(long)(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}

extern "C" __global__ void __launch_bounds__(256, 2) row_stage(const double* __restrict__ in, double* __restrict__ out, int cols) {
  extern __shared__ double stage[];
  const double* row = in + (long)blockIdx.x * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) stage[c] = row[c];
  __syncthreads();
  for (int c = threadIdx.x; c < cols; c += blockDim.x) out[(long)blockIdx.x * cols + c] = stage[cols - 1 - c];
}
