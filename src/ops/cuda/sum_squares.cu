// Sum of squares in two deterministic passes: kPartialBlocks blocks each sum a fixed
// strided subset into one partial, then one block adds the partials in a fixed tree.
// The first pass reads 16-byte vectors, four in flight per thread (where x is aligned for
// it), so that it runs at the memory's rate: it reads every gradient once per step.
#include "core/cuda/check.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/reduce.h"
#include "ops/cuda/sum_squares.h"

namespace anvil::cuda {

namespace {

constexpr int kThreads = 1024, kUnroll = 4;

__device__ __forceinline__ float squares(float4 v) { return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w; }

__global__ void sum_squares_kernel(float* partials, const float* x, int64_t n, bool vec) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t n4 = vec ? n / 4 : 0;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float s = 0.0f;
  int64_t q = first;
  for (; q + (kUnroll - 1) * stride < n4; q += kUnroll * stride) {
    float4 v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) v[k] = x4[q + k * stride];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) s += squares(v[k]);
  }
  for (; q < n4; q += stride) s += squares(x4[q]);
  for (int64_t i = 4 * n4 + first; i < n; i += stride) s += x[i] * x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

}  // namespace

size_t sum_squares_scratch_bytes(int64_t) { return kPartialBlocks * sizeof(float); }

void sum_squares(float* out, const float* x, int64_t n, void* scratch, cudaStream_t stream) {
  if (n == 0) return;
  float* partials = static_cast<float*>(scratch);
  sum_squares_kernel<<<kPartialBlocks, kThreads, 0, stream>>>(partials, x, n, aligned16(x));
  CUDA_CHECK_LAUNCH();
  sum_add(out, partials, kPartialBlocks, stream);
}

}  // namespace anvil::cuda
