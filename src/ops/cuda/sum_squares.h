// Sum of squares of a flat F32 buffer (the global gradient norm's local part), CUDA backend.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace anvil::cuda {

size_t sum_squares_scratch_bytes(int64_t n);
// out[0] += sum of x[i]^2, deterministic.
void sum_squares(float* out, const float* x, int64_t n, void* scratch, cudaStream_t stream);

}  // namespace anvil::cuda
