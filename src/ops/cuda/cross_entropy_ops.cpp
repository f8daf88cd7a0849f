// The dispatch of the output projection fused with cross-entropy (CudaOps, cuda_ops.h) to
// cross_entropy.cu, with its chunk's logits in the shared scratch (ops/cross_entropy_chunks.h).
#include "ops/cross_entropy_chunks.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/cuda_ops.h"

namespace anvil {

using cuda::nv_bf16;
using cuda::p;
using cuda::present;

void CudaOps::cross_entropy_forward_backward_impl(Tensor loss_sum, Tensor dh, Tensor dw, Tensor h, Tensor w,
                                                  Tensor targets, float loss_scale, Tensor logits,
                                                  bool accumulate_dw, Tensor row_weights, Tensor row_losses) {
  const bool grads = present(dh);
  const int64_t N = h.rows(), C = h.cols(), V = w.dim(0);
  cuda::CrossEntropyArgs a{p<float>(loss_sum), grads ? p<nv_bf16>(dh) : nullptr, grads ? p<float>(dw) : nullptr,
                           p<nv_bf16>(h),      p<nv_bf16>(w),       p<int32_t>(targets),
                           present(logits) ? p<float>(logits) : nullptr,
                           present(row_weights) ? p<float>(row_weights) : nullptr,
                           present(row_losses) ? p<float>(row_losses) : nullptr,
                           N,                  V,                   C,
                           loss_scale,         accumulate_dw};
  cuda::cross_entropy_forward_backward(a, scratch(static_cast<size_t>(cross_entropy_chunks(N, V).bytes)),
                                       gemm("cross_entropy_forward_backward"), queue());
}

}  // namespace anvil
