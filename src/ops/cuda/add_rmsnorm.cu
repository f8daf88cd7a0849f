// One block per row. Each thread owns the same columns in both passes, so the second pass
// reads back what it wrote in the first.
#include "core/cuda/check.h"
#include "ops/cuda/add_rmsnorm.h"
#include "ops/cuda/kernel_util.cuh"

namespace anvil::cuda {

namespace {

constexpr int kThreads = 256;

template <int VEC>
__global__ void add_rmsnorm_kernel(__nv_bfloat16* x, __nv_bfloat16* out, float* rstd, const __nv_bfloat16* a,
                                   const __nv_bfloat16* w, int cols, float eps) {
  const int64_t r = blockIdx.x;
  __nv_bfloat16* xr = x + r * cols;
  float ss = 0.0f;
  for (int c = threadIdx.x * VEC; c < cols; c += blockDim.x * VEC) {
    float v[VEC], av[VEC];
    load_bf16<VEC>(xr + c, v);
    load_bf16<VEC>(a + r * cols + c, av);
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = __bfloat162float(__float2bfloat16_rn(v[i] + av[i]));
    store_bf16<VEC>(xr + c, v);
#pragma unroll
    for (int i = 0; i < VEC; ++i) ss += v[i] * v[i];
  }
  ss = block_sum(ss);
  const float rs = rsqrtf(ss / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  for (int c = threadIdx.x * VEC; c < cols; c += blockDim.x * VEC) {
    float v[VEC], wv[VEC];
    load_bf16<VEC>(xr + c, v);
    load_bf16<VEC>(w + c, wv);
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = v[i] * rs * wv[i];
    store_bf16<VEC>(out + r * cols + c, v);
  }
}

}  // namespace

void add_rmsnorm_forward(__nv_bfloat16* x, __nv_bfloat16* out, float* rstd, const __nv_bfloat16* a,
                         const __nv_bfloat16* w, int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  if (rows == 0) return;
  const int c = static_cast<int>(cols);
  if (cols % 8 == 0 && aligned16(x) && aligned16(out) && aligned16(a) && aligned16(w))
    add_rmsnorm_kernel<8><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, out, rstd, a, w, c, eps);
  else
    add_rmsnorm_kernel<1><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, out, rstd, a, w, c, eps);
  CUDA_CHECK_LAUNCH();
}

}  // namespace anvil::cuda
