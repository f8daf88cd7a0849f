// The qk-norm + RoPE dispatch (CudaOps, cuda_ops.h) to the kernels of qk_norm_rope.cu.
#include <cstdint>

#include "core/error.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/qk_norm_rope.h"

namespace anvil {

using cuda::nv_bf16;
using cuda::p;
using cuda::present;

namespace {

// The kernels' shape of the packed rows (the front has checked them), and their limit: they
// read angle pairs as float2.
cuda::QkRopeShape qk_shape(const char* op, const Tensor& in, const Tensor& cos, const Tensor& sin, int n_heads,
                           int n_kv_heads, const Tensor& positions) {
  ANVIL_ENSURE(reinterpret_cast<uintptr_t>(cos.data) % 8 == 0 && reinterpret_cast<uintptr_t>(sin.data) % 8 == 0,
               kInternal, op, ": cos and sin must be 8-byte aligned");
  cuda::QkRopeShape s;
  s.head_dim = static_cast<int>(in.cols());
  s.n_heads = n_heads;
  s.n_kv_heads = n_kv_heads;
  s.rows = in.numel() / ((n_heads + 2 * n_kv_heads) * s.head_dim);
  s.seq = cos.dim(0);
  s.positions = present(positions) ? p<int32_t>(positions) : nullptr;
  return s;
}

}  // namespace

void CudaOps::qk_norm_rope_forward_impl(Tensor out, Tensor rstd, Tensor in, Tensor q_w, Tensor k_w, Tensor cos,
                                        Tensor sin, int n_heads, int n_kv_heads, float eps, Tensor positions) {
  const cuda::QkRopeShape s = qk_shape("qk_norm_rope_forward", in, cos, sin, n_heads, n_kv_heads, positions);
  const bool norm = present(q_w);
  cuda::qk_norm_rope_forward(p<nv_bf16>(out), norm ? p<float>(rstd) : nullptr, p<nv_bf16>(in),
                             norm ? p<nv_bf16>(q_w) : nullptr, norm ? p<nv_bf16>(k_w) : nullptr, p<float>(cos),
                             p<float>(sin), s, eps, queue());
}

void CudaOps::qk_norm_rope_backward_impl(Tensor din, Tensor dq_w, Tensor dk_w, Tensor dout, Tensor in, Tensor q_w,
                                         Tensor k_w, Tensor rstd, Tensor cos, Tensor sin, int n_heads, int n_kv_heads,
                                         bool accumulate_dw, Tensor positions) {
  const cuda::QkRopeShape s = qk_shape("qk_norm_rope_backward", in, cos, sin, n_heads, n_kv_heads, positions);
  const bool norm = present(q_w);
  const cuda::GradOut dq_out = norm ? cuda::grad_out(dq_w) : cuda::GradOut{};
  const cuda::GradOut dk_out = norm ? cuda::grad_out(dk_w) : cuda::GradOut{};
  cuda::qk_norm_rope_backward(p<nv_bf16>(din), dq_out, dk_out, p<nv_bf16>(dout), p<nv_bf16>(in),
                              norm ? p<nv_bf16>(q_w) : nullptr, norm ? p<nv_bf16>(k_w) : nullptr,
                              norm ? p<float>(rstd) : nullptr, p<float>(cos), p<float>(sin), s, accumulate_dw,
                              scratch(cuda::qk_norm_rope_backward_scratch_bytes(s)), queue());
}

}  // namespace anvil
