// Deterministic second passes: column sums of a partials matrix, and one block's sum of a
// vector. Both add in an order fixed by the shape alone.
#include <type_traits>

#include "core/cuda/check.h"
#include "core/error.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/reduce.h"

namespace anvil::cuda {

namespace {
// reduce_partials: a block covers kCols columns; its kSegments rows of threads each sum
// one fixed, contiguous range of the partial rows (in order), then the first row adds the
// segments' sums in order. The order depends on nparts alone: the same bits on any GPU.
constexpr int kCols = 32, kSegments = 8;
}  // namespace

template <class Out>
static __global__ void reduce_partials_kernel(Out* out, const float* partials, int nparts, int64_t n,
                                              int64_t stride, bool accumulate) {
  __shared__ float seg_sum[kSegments][kCols];
  const int col = threadIdx.x % kCols, seg = threadIdx.x / kCols;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kCols + col;
  const int per_seg = (nparts + kSegments - 1) / kSegments;
  const int begin = seg * per_seg, end = begin + per_seg < nparts ? begin + per_seg : nparts;
  float s = 0.0f;
  if (i < n)
    for (int p = begin; p < end; ++p) s += partials[p * stride + i];
  seg_sum[seg][col] = s;
  __syncthreads();
  if (seg != 0 || i >= n) return;
  float total = 0.0f;
#pragma unroll
  for (int k = 0; k < kSegments; ++k) total += seg_sum[k][col];
  if constexpr (std::is_same_v<Out, float>)
    out[i] = accumulate ? out[i] + total : total;
  else
    out[i] = __float2bfloat16_rn(total);
}

static __global__ void sum_add_kernel(float* out, const float* x, int64_t n) {
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) out[0] += s;
}

void reduce_partials(GradOut out, const float* partials, int nparts, int64_t n, int64_t stride, bool accumulate,
                     cudaStream_t stream) {
  if (n == 0) return;
  ANVIL_ENSURE(!(out.bf16 && accumulate), kInternal, "reduce_partials: a bf16 output is written, not added to");
  const unsigned blocks = static_cast<unsigned>(ceil_div(n, kCols));
  if (out.bf16)
    reduce_partials_kernel<<<blocks, kCols * kSegments, 0, stream>>>(static_cast<__nv_bfloat16*>(out.ptr), partials,
                                                                      nparts, n, stride, accumulate);
  else
    reduce_partials_kernel<<<blocks, kCols * kSegments, 0, stream>>>(static_cast<float*>(out.ptr), partials, nparts,
                                                                      n, stride, accumulate);
  CUDA_CHECK_LAUNCH();
}

void sum_add(float* out, const float* x, int64_t n, cudaStream_t stream) {
  sum_add_kernel<<<1, 1024, 0, stream>>>(out, x, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace anvil::cuda
