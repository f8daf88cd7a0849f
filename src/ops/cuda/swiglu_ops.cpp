// SwiGLU's dispatch (CudaOps, cuda_ops.h) to the kernels of swiglu.cu.
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/swiglu.h"

namespace anvil {

using cuda::nv_bf16;
using cuda::p;

void CudaOps::swiglu_forward_impl(Tensor out, Tensor gate_up, Tensor amax) {
  cuda::swiglu_forward(p<nv_bf16>(out), p<nv_bf16>(gate_up), gate_up.rows(), gate_up.cols() / 2, queue(),
                       cuda::present(amax) ? p<float>(amax) : nullptr);
}

void CudaOps::swiglu_backward_impl(Tensor dgate_up, Tensor dout, Tensor gate_up, Tensor act) {
  cuda::swiglu_backward(p<nv_bf16>(dgate_up), cuda::present(act) ? p<nv_bf16>(act) : nullptr, p<nv_bf16>(dout),
                        p<nv_bf16>(gate_up), gate_up.rows(), gate_up.cols() / 2, queue());
}

}  // namespace anvil
