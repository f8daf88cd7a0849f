// Row-wise argmax of F32 logits (ops.h argmax_rows): greedy decoding on the GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace anvil::cuda {

// out (rows) = index of the largest of each row of x (rows, cols), the first on ties.
void argmax_rows(int32_t* out, const float* x, int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace anvil::cuda
