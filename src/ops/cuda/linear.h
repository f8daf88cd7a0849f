// The part of the linear layers' backward that is not a GEMM (gemm.h): the bias gradient.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/reduce.h"

namespace anvil::cuda {

size_t bias_grad_scratch_bytes(int64_t rows, int64_t cols);
// dbias (cols) F32 += (when not accumulate, =; bf16: =) column sums of dy (rows, cols) bf16,
// deterministic.
void bias_grad(GradOut dbias, const __nv_bfloat16* dy, int64_t rows, int64_t cols, bool accumulate, void* scratch,
               cudaStream_t stream);

}  // namespace anvil::cuda
