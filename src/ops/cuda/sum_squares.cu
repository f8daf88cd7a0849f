// Sum of squares in two deterministic passes: kPartialBlocks blocks each sum a fixed
// strided subset into one partial, then one block adds the partials in a fixed tree.
#include "core/cuda/check.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/reduce.h"
#include "ops/cuda/sum_squares.h"

namespace anvil::cuda {

static __global__ void sum_squares_kernel(float* partials, const float* x, int64_t n) {
  float s = 0.0f;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    s += x[i] * x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

size_t sum_squares_scratch_bytes(int64_t) { return kPartialBlocks * sizeof(float); }

void sum_squares(float* out, const float* x, int64_t n, void* scratch, cudaStream_t stream) {
  if (n == 0) return;
  float* partials = static_cast<float*>(scratch);
  sum_squares_kernel<<<kPartialBlocks, 512, 0, stream>>>(partials, x, n);
  CUDA_CHECK_LAUNCH();
  sum_add(out, partials, kPartialBlocks, stream);
}

}  // namespace anvil::cuda
