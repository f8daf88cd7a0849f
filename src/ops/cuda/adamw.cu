// Fused AdamW: one pass reads param, grad, m, v and writes param, m, v (28 bytes per
// element), in the order of operations of PyTorch's single-tensor AdamW:
//   param *= 1 - lr * wd;  m = lerp(m, g, 1 - beta1);  v = beta2 v + (1 - beta2) g^2
//   param -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// The bias corrections are computed once on the host in double precision. The same pass
// may write the bf16 compute copy of the new param (32 -> 30 bytes per element beside a
// separate convert) and zero the gradient it has read (instead of a memset pass).
#include "core/cuda/check.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/kernel_util.cuh"

namespace anvil::cuda {

template <bool COPY, bool ZERO>
static __global__ void adamw_kernel(float* param, float* grad, float* m, float* v, __nv_bfloat16* copy, int64_t n,
                                    AdamWArgs a) {
  const float step_size = a.lr / a.bias_correction1;
  const float decay = 1.0f - a.lr * a.weight_decay;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = grad[i] * a.grad_scale;
    float p = param[i] * decay;
    float mi = m[i];
    mi = mi + (1.0f - a.beta1) * (g - mi);
    const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
    const float denom = sqrtf(vi) / a.bias_correction2_sqrt + a.eps;
    p -= step_size * (mi / denom);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
    if constexpr (COPY) copy[i] = __float2bfloat16_rn(p);
    if constexpr (ZERO) grad[i] = 0.0f;
  }
}

void adamw_step(float* param, float* grad, float* m, float* v, __nv_bfloat16* copy, bool zero_grad, int64_t n,
                const AdamWArgs& a, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = grid_stride_blocks(n, 256);
  if (copy && zero_grad)
    adamw_kernel<true, true><<<blocks, 256, 0, stream>>>(param, grad, m, v, copy, n, a);
  else if (copy)
    adamw_kernel<true, false><<<blocks, 256, 0, stream>>>(param, grad, m, v, copy, n, a);
  else if (zero_grad)
    adamw_kernel<false, true><<<blocks, 256, 0, stream>>>(param, grad, m, v, copy, n, a);
  else
    adamw_kernel<false, false><<<blocks, 256, 0, stream>>>(param, grad, m, v, copy, n, a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace anvil::cuda
