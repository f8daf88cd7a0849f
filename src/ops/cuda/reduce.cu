// Deterministic second passes: column sums of a partials matrix, and one block's sum of a
// vector. Both add in an order fixed by the shape alone.
#include "core/cuda/check.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/reduce.h"

namespace anvil::cuda {

static __global__ void reduce_partials_kernel(float* out, const float* partials, int nparts, int64_t n,
                                              int64_t stride) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s = 0.0f;
  for (int p = 0; p < nparts; ++p) s += partials[p * stride + i];
  out[i] += s;
}

static __global__ void sum_add_kernel(float* out, const float* x, int64_t n) {
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) out[0] += s;
}

void reduce_partials_add(float* out, const float* partials, int nparts, int64_t n, int64_t stride,
                         cudaStream_t stream) {
  if (n == 0) return;
  const int threads = 256;
  reduce_partials_kernel<<<static_cast<unsigned>(ceil_div(n, threads)), threads, 0, stream>>>(
      out, partials, nparts, n, stride);
  CUDA_CHECK_LAUNCH();
}

void sum_add(float* out, const float* x, int64_t n, cudaStream_t stream) {
  sum_add_kernel<<<1, 1024, 0, stream>>>(out, x, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace anvil::cuda
