// Deterministic second passes of the two-pass reductions (kernel_util.cuh says why).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace anvil::cuda {

// out[i] += (or, when not accumulate, =) the sum over p < nparts of
// partials[p * stride + i], for i < n: eight contiguous ranges of p, each summed in order,
// then the eight sums in order (fixed by nparts).
void reduce_partials(float* out, const float* partials, int nparts, int64_t n, int64_t stride, bool accumulate,
                     cudaStream_t stream);

// out[0] += sum of x[0..n), by one block in a fixed order.
void sum_add(float* out, const float* x, int64_t n, cudaStream_t stream);

}  // namespace anvil::cuda
