// Bias gradient: column sums of dy in two deterministic passes. Block b of a fixed grid
// sums rows b, b + G, b + 2G, ... of every column (threads over columns, so each row read
// is coalesced); reduce_partials then adds the G partial rows in a fixed order.
#include "core/cuda/check.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/linear.h"
#include "ops/cuda/reduce.h"

namespace anvil::cuda {

static __global__ void bias_grad_kernel(float* partials, const __nv_bfloat16* dy, int64_t rows, int64_t cols) {
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float s = 0.0f;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) s += __bfloat162float(dy[r * cols + c]);
    partials[blockIdx.x * cols + c] = s;
  }
}

static int blocks_for(int64_t rows) { return static_cast<int>(rows < kPartialBlocks ? rows : kPartialBlocks); }

size_t bias_grad_scratch_bytes(int64_t rows, int64_t cols) {
  return static_cast<size_t>(blocks_for(rows)) * static_cast<size_t>(cols) * sizeof(float);
}

void bias_grad(GradOut dbias, const __nv_bfloat16* dy, int64_t rows, int64_t cols, bool accumulate, void* scratch,
               cudaStream_t stream) {
  if (cols == 0) return;
  if (rows == 0) {
    if (!accumulate) CUDA_CHECK(cudaMemsetAsync(dbias.ptr, 0, dbias.bytes(cols), stream));
    return;
  }
  const int blocks = blocks_for(rows);
  float* partials = static_cast<float*>(scratch);
  bias_grad_kernel<<<blocks, 256, 0, stream>>>(partials, dy, rows, cols);
  CUDA_CHECK_LAUNCH();
  reduce_partials(dbias, partials, blocks, cols, cols, accumulate, stream);
}

}  // namespace anvil::cuda
