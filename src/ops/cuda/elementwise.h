// Elementwise ops of the CUDA backend: out = a + b, and dtype conversion F32 <-> BF16.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace anvil::cuda {

// out = a + b over n elements; out may alias a or b.
void add_bf16(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n,
              cudaStream_t stream);
void add_f32(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream);

// Round to nearest even (as PyTorch's .to(bfloat16)); bf16 -> f32 is exact.
void convert_f32_to_bf16(__nv_bfloat16* out, const float* in, int64_t n, cudaStream_t stream);
void convert_bf16_to_f32(float* out, const __nv_bfloat16* in, int64_t n, cudaStream_t stream);

}  // namespace anvil::cuda
