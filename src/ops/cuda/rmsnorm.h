// RMSNorm over the last dimension, CUDA backend: out = x * rstd * w, rstd = 1/sqrt(mean(x^2)+eps).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/reduce.h"

namespace anvil::cuda {

// x, out (rows, cols) bf16; w (cols) bf16; rstd (rows) F32; amax, unless null, = the largest
// |element| of out as stored (for the FP8 linear that reads it).
void rmsnorm_forward(__nv_bfloat16* out, float* rstd, const __nv_bfloat16* x, const __nv_bfloat16* w,
                     int64_t rows, int64_t cols, float eps, cudaStream_t stream, float* amax = nullptr);

// sum = a + b (sum may alias a or b), then rmsnorm_forward(out, rstd, sum, w): one pass,
// the same bits as the two launches.
void add_rmsnorm_forward(__nv_bfloat16* sum, __nv_bfloat16* out, float* rstd, const __nv_bfloat16* a,
                         const __nv_bfloat16* b, const __nv_bfloat16* w, int64_t rows, int64_t cols, float eps,
                         cudaStream_t stream, float* amax = nullptr);

// Scratch (device memory) that rmsnorm_backward needs for the partial sums of dw.
size_t rmsnorm_backward_scratch_bytes(int64_t rows, int64_t cols);
// dx (rows, cols) bf16: written, or added to when accumulate; dw (cols) F32 +=, or = when
// not accumulate_dw (bf16: =). dx may alias dout.
void rmsnorm_backward(__nv_bfloat16* dx, GradOut dw, const __nv_bfloat16* dout, const __nv_bfloat16* x,
                      const __nv_bfloat16* w, const float* rstd, int64_t rows, int64_t cols,
                      bool accumulate, bool accumulate_dw, void* scratch, cudaStream_t stream);

}  // namespace anvil::cuda
