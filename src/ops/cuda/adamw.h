// Fused AdamW on flat F32 buffers, CUDA backend (PyTorch's AdamW, ops.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace anvil::cuda {

struct AdamWArgs {
  float lr, beta1, beta2, eps, weight_decay;
  float bias_correction1;       // 1 - beta1^step
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float grad_scale;             // the clipping coefficient, applied as grad is read
};

// grad: F32, or BF16 (widened exactly as it is read: the same update as from an F32 buffer
// holding the same values). copy (may be null): the new param in bf16 (round to nearest
// even, as convert); an F32 grad is zeroed after it is read when zero_grad.
void adamw_step(float* param, void* grad, bool grad_bf16, float* m, float* v, __nv_bfloat16* copy, bool zero_grad,
                int64_t n, const AdamWArgs& a, cudaStream_t stream);

// The same update of split masters (core/bf16.h, split_master): hi (bf16, the compute
// weight) and lo (int16) hold the fp32 param; read, updated and written back as halves (8
// bytes per element instead of fp32's 8 plus a bf16 copy's 2). Bit for bit adamw_step's
// param, with its copy rounded half away from zero.
void adamw_step_split(uint16_t* hi, int16_t* lo, const void* grad, bool grad_bf16, float* m, float* v, int64_t n,
                      const AdamWArgs& a, cudaStream_t stream);

}  // namespace anvil::cuda
