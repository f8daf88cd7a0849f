// AdamW's dispatch (CudaOps, cuda_ops.h) to the kernels of adamw.cu, on fp32 params or on
// split masters.
#include <cmath>

#include "ops/cuda/adamw.h"
#include "ops/cuda/cuda_ops.h"

namespace anvil {

using cuda::nv_bf16;
using cuda::p;

namespace {

// Scalars as torch.optim.AdamW computes them (Python floats), then used in fp32.
cuda::AdamWArgs adamw_args(const AdamWHyper& h, float grad_scale) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step));
  return {h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, static_cast<float>(bc1), static_cast<float>(std::sqrt(bc2)),
          grad_scale};
}

}  // namespace

void CudaOps::adamw_step_impl(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWHyper& h, float grad_scale,
                              Tensor copy, bool zero_grad) {
  const cuda::GradOut g = cuda::grad_out(grad);
  cuda::adamw_step(p<float>(param), g.ptr, g.bf16, p<float>(m), p<float>(v),
                   cuda::present(copy) ? p<nv_bf16>(copy) : nullptr, zero_grad, param.numel(),
                   adamw_args(h, grad_scale), queue());
}

void CudaOps::adamw_step_split_impl(Tensor hi, Tensor lo, Tensor grad, Tensor m, Tensor v, const AdamWHyper& h,
                                    float grad_scale) {
  const cuda::GradOut g = cuda::grad_out(grad);
  cuda::adamw_step_split(p<uint16_t>(hi), p<int16_t>(lo), g.ptr, g.bf16, p<float>(m), p<float>(v), hi.numel(),
                         adamw_args(h, grad_scale), queue());
}

}  // namespace anvil
