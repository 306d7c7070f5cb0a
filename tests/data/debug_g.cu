// ptxforge-nvcc-flags: -G
// Full debug information (nvcc -G): ".target sm_90, debug", .debug_* sections with labels and data,
// unoptimised code with a local stack frame.
extern "C" __global__ void clamp_scale(const float* __restrict__ x, float* __restrict__ y, float lo, float hi, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i] * 2.f;
    y[i] = v < lo ? lo : (v > hi ? hi : v);
  }
}
