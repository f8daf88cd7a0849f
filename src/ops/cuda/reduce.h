// Deterministic second passes of the two-pass reductions (kernel_util.cuh says why).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace anvil::cuda {

// out[i] += sum over p < nparts of partials[p * stride + i], for i < n, p in order.
void reduce_partials_add(float* out, const float* partials, int nparts, int64_t n, int64_t stride,
                         cudaStream_t stream);

// out[0] += sum of x[0..n), by one block in a fixed order.
void sum_add(float* out, const float* x, int64_t n, cudaStream_t stream);

}  // namespace anvil::cuda
