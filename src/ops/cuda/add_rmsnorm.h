// The residual add and the next RMSNorm of an inference step in one pass (ops.h
// add_rmsnorm_forward): x += a (rounded to bf16, as add() does), then out = RMSNorm(x) * w.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace anvil::cuda {

// x, a, out (rows, cols) bf16; w (cols) bf16; rstd (rows) F32.
void add_rmsnorm_forward(__nv_bfloat16* x, __nv_bfloat16* out, float* rstd, const __nv_bfloat16* a,
                         const __nv_bfloat16* w, int64_t rows, int64_t cols, float eps, cudaStream_t stream);

}  // namespace anvil::cuda
