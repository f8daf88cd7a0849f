// RMSNorm's dispatch (CudaOps, cuda_ops.h) to the kernels of rmsnorm.cu, the fused residual
// add included.
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/rmsnorm.h"

namespace anvil {

using cuda::nv_bf16;
using cuda::p;

void CudaOps::rmsnorm_forward_impl(Tensor out, Tensor rstd, Tensor x, Tensor w, float eps, Tensor amax) {
  cuda::rmsnorm_forward(p<nv_bf16>(out), p<float>(rstd), p<nv_bf16>(x), p<nv_bf16>(w), x.rows(), x.cols(), eps,
                        queue(), cuda::present(amax) ? p<float>(amax) : nullptr);
}

void CudaOps::add_rmsnorm_forward_impl(Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b, Tensor w, float eps,
                                       Tensor amax) {
  cuda::add_rmsnorm_forward(p<nv_bf16>(sum), p<nv_bf16>(out), p<float>(rstd), p<nv_bf16>(a), p<nv_bf16>(b),
                            p<nv_bf16>(w), a.rows(), a.cols(), eps, queue(),
                            cuda::present(amax) ? p<float>(amax) : nullptr);
}

void CudaOps::rmsnorm_backward_impl(Tensor dx, Tensor dw, Tensor dout, Tensor x, Tensor w, Tensor rstd,
                                    bool accumulate, bool accumulate_dw) {
  const int64_t R = x.rows(), C = x.cols();
  cuda::rmsnorm_backward(p<nv_bf16>(dx), cuda::grad_out(dw), p<nv_bf16>(dout), p<nv_bf16>(x), p<nv_bf16>(w),
                         p<float>(rstd), R, C, accumulate, accumulate_dw,
                         scratch(cuda::rmsnorm_backward_scratch_bytes(R, C)), queue());
}

}  // namespace anvil
