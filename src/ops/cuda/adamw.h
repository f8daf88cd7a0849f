// Fused AdamW on flat F32 buffers, CUDA backend (PyTorch's AdamW, ops.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace anvil::cuda {

struct AdamWArgs {
  float lr, beta1, beta2, eps, weight_decay;
  float bias_correction1;       // 1 - beta1^step
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float grad_scale;             // the clipping coefficient, applied as grad is read
};

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWArgs& a,
                cudaStream_t stream);

}  // namespace anvil::cuda
