// Sum of squares of a flat F32 or BF16 buffer (the global gradient norm's local part), CUDA
// backend.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace anvil::cuda {

size_t sum_squares_scratch_bytes(int64_t n);
// out[0] += sum of x[i]^2 in fp32, deterministic; x is bf16 when x_bf16.
void sum_squares(float* out, const void* x, bool x_bf16, int64_t n, void* scratch, cudaStream_t stream);

}  // namespace anvil::cuda
