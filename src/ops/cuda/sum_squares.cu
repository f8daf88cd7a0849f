// Sum of squares in two deterministic passes: kPartialBlocks blocks each sum a fixed
// strided subset into one partial, then one block adds the partials in a fixed tree.
// The first pass reads 16-byte vectors (4 floats or 8 bf16), four in flight per thread
// (where x is aligned for it), so that it runs at the memory's rate: it reads every
// gradient once per step.
#include "core/cuda/check.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/reduce.h"
#include "ops/cuda/sum_squares.h"

namespace anvil::cuda {

namespace {

constexpr int kThreads = 1024, kUnroll = 4;

__device__ __forceinline__ float squares(float v) { return v * v; }
__device__ __forceinline__ float squares(__nv_bfloat16 v) { return squares(__bfloat162float(v)); }
__device__ __forceinline__ float squares(__nv_bfloat162 v) {
  const float2 f = __bfloat1622float2(v);
  return f.x * f.x + f.y * f.y;
}
// One 16-byte vector: 4 floats, or 8 bf16 (as four pairs).
__device__ __forceinline__ float squares(float4 v, const float*) {
  return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
}
__device__ __forceinline__ float squares(float4 v, const __nv_bfloat16*) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
  return squares(p[0]) + squares(p[1]) + squares(p[2]) + squares(p[3]);
}

template <class T>
__global__ void sum_squares_kernel(float* partials, const T* x, int64_t n, bool vec) {
  constexpr int64_t kPer = 16 / sizeof(T);  // elements per vector
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t nv = vec ? n / kPer : 0;
  const float4* xv = reinterpret_cast<const float4*>(x);
  float s = 0.0f;
  int64_t q = first;
  for (; q + (kUnroll - 1) * stride < nv; q += kUnroll * stride) {
    float4 v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) v[k] = xv[q + k * stride];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) s += squares(v[k], x);
  }
  for (; q < nv; q += stride) s += squares(xv[q], x);
  for (int64_t i = kPer * nv + first; i < n; i += stride) s += squares(x[i]);
  s = block_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

}  // namespace

size_t sum_squares_scratch_bytes(int64_t) { return kPartialBlocks * sizeof(float); }

void sum_squares(float* out, const void* x, bool x_bf16, int64_t n, void* scratch, cudaStream_t stream) {
  if (n == 0) return;
  float* partials = static_cast<float*>(scratch);
  const bool vec = aligned16(x);
  if (x_bf16)
    sum_squares_kernel<<<kPartialBlocks, kThreads, 0, stream>>>(partials, static_cast<const __nv_bfloat16*>(x), n, vec);
  else
    sum_squares_kernel<<<kPartialBlocks, kThreads, 0, stream>>>(partials, static_cast<const float*>(x), n, vec);
  CUDA_CHECK_LAUNCH();
  sum_add(out, partials, kPartialBlocks, stream);
}

}  // namespace anvil::cuda
