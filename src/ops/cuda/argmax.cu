#include "core/cuda/check.h"
#include "core/error.h"
#include "ops/cuda/argmax.h"

namespace anvil::cuda {

namespace {

constexpr int kThreads = 1024;

// (value, index) with the larger value winning and the lower index on ties; NaN never wins.
__device__ __forceinline__ void better(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(int32_t* out, const float* x, int cols) {
  __shared__ float sv[kThreads / 32];
  __shared__ int si[kThreads / 32];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * cols;
  float v = -INFINITY;
  int i = cols;  // none yet
  for (int c = threadIdx.x; c < cols; c += kThreads) better(v, i, row[c], c);
  for (int o = 16; o > 0; o >>= 1)
    better(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = i;
  }
  __syncthreads();
  if (warp == 0) {
    v = sv[lane];
    i = si[lane];
    for (int o = 16; o > 0; o >>= 1)
      better(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
    if (lane == 0) out[blockIdx.x] = i < cols ? i : 0;
  }
}

}  // namespace

void argmax_rows(int32_t* out, const float* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0) return;
  ANVIL_ENSURE(cols < (int64_t{1} << 31), kUnsupported, "argmax_rows: ", cols, " columns");
  argmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(out, x, static_cast<int>(cols));
  CUDA_CHECK_LAUNCH();
}

}  // namespace anvil::cuda
