// Deterministic second passes of the two-pass reductions (kernel_util.cuh says why).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace anvil::cuda {

// Where a parameter gradient goes: fp32 (written, or added to), or bf16 (written only: one
// backward's gradient rounded once to nearest even, as PyTorch rounds the gradient of a
// bf16 weight copy; parallel/param_store.h says when).
struct GradOut {
  void* ptr = nullptr;
  bool bf16 = false;
  size_t bytes(int64_t n) const { return static_cast<size_t>(n) * (bf16 ? 2 : 4); }
};

// out[i] += (or, when not accumulate, =) the sum over p < nparts of
// partials[p * stride + i], for i < n: eight contiguous ranges of p, each summed in order,
// then the eight sums in order (fixed by nparts). A bf16 out is written (accumulate must be
// false), the fp32 sum rounded once.
void reduce_partials(GradOut out, const float* partials, int nparts, int64_t n, int64_t stride, bool accumulate,
                     cudaStream_t stream);

// out[0] += sum of x[0..n), by one block in a fixed order.
void sum_add(float* out, const float* x, int64_t n, cudaStream_t stream);

}  // namespace anvil::cuda
