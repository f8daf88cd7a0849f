// The FP8 linear layers' dispatch (CudaOps, ops.h's linear_fp8_*): each GEMM's two operands
// quantized into the shared scratch by fp8_cast.h (amax, scales, cast, transposed where the
// TN layout needs it; x's and w's amax from or into the caller's slot, Fp8Amax), then one
// cuBLASLt FP8 GEMM (gemm_fp8.h); the bias gradient from the bf16 dy as the bf16 path
// computes it (linear.h).
#include "core/error.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/fp8_cast.h"
#include "ops/cuda/linear.h"

namespace anvil {

using cuda::nv_bf16;
using cuda::p;
using cuda::present;

namespace {

// x's (index 0) or w's (1) amax slot of an Fp8Amax, or none.
cuda::AmaxSlot amax_slot(const Fp8Amax& a, int index) {
  if (!present(a.slot)) return {};
  return {static_cast<float*>(a.slot.data) + index, index == 0 ? a.x_known : a.w_known};
}

}  // namespace

std::string CudaOps::fp8_unsupported(Fp8Recipe recipe) const {
  if (rt_.sm() < 89)
    return cat("FP8 tensor cores need compute capability 8.9 or newer (Ada, Hopper, Blackwell); this GPU is ",
               rt_.sm() / 10, ".", rt_.sm() % 10);
  // Measured on an H200 with CUDA 13.0's cuBLASLt: no algorithm for outer-vector (per-row)
  // scales on compute capability 9.0, at any shape of the blocks' GEMMs.
  if (recipe == Fp8Recipe::kRowwise && rt_.sm() / 10 == 9)
    return "cuBLASLt has no FP8 GEMM with per-row scales on compute capability 9.0 (Hopper)";
  return "";
}

std::pair<cuda::Fp8Operand, cuda::Fp8Operand> CudaOps::quantize_fp8_pair(Fp8Source ps, Fp8Source qs, int64_t k,
                                                                         Fp8Recipe recipe) {
  const bool rowwise = recipe == Fp8Recipe::kRowwise;
  const Fp8Scratch layout = fp8_scratch(ps.rows, qs.rows, k);
  char* s = static_cast<char*>(scratch(static_cast<size_t>(layout.total())));
  auto* p8 = reinterpret_cast<uint8_t*>(s);
  auto* q8 = reinterpret_cast<uint8_t*>(s + layout.p_bytes);
  auto* p_stat = reinterpret_cast<float*>(s + layout.p_bytes + layout.q_bytes);
  auto* q_stat = reinterpret_cast<float*>(s + layout.p_bytes + layout.q_bytes + layout.p_stats);
  const float* p_inv = cuda::quantize_fp8(p8, p_stat, static_cast<const nv_bf16*>(ps.src), ps.rows, k, ps.transposed,
                                          rowwise, queue(), nullptr, ps.amax);
  const float* q_inv = cuda::quantize_fp8(q8, q_stat, static_cast<const nv_bf16*>(qs.src), qs.rows, k, qs.transposed,
                                          rowwise, queue(), nullptr, qs.amax);
  return {{p8, p_inv}, {q8, q_inv}};
}

void CudaOps::linear_fp8_forward_impl(Tensor y, Tensor x, Tensor w, Tensor bias, Fp8Recipe recipe,
                                      const Fp8Amax& amax) {
  const int64_t M = x.rows(), K = x.cols(), N = w.dim(0);
  cuda::Fp8Gemm& g = fp8_gemm("linear_fp8_forward");
  const auto [xq, wq] =
      quantize_fp8_pair({x.data, M, false, amax_slot(amax, 0)}, {w.data, N, false, amax_slot(amax, 1)}, K, recipe);
  g.run(y.data, CUDA_R_16BF, N, xq, wq, M, N, K, 0.0f, present(bias) ? bias.data : nullptr,
        recipe == Fp8Recipe::kRowwise);
}

void CudaOps::linear_fp8_backward_input_impl(Tensor dx, Tensor dy, Tensor w, Fp8Recipe recipe, bool accumulate,
                                             const Fp8Amax& amax) {
  const int64_t M = dy.rows(), N = dy.cols(), K = w.cols();
  cuda::Fp8Gemm& g = fp8_gemm("linear_fp8_backward_input");
  // dx (M, K) = dy (M, N) . w (N, K): the reduction runs over N, so w goes in as w^T (K, N).
  const auto [dyq, wq] = quantize_fp8_pair({dy.data, M, false}, {w.data, K, true, amax_slot(amax, 1)}, N, recipe);
  g.run(dx.data, CUDA_R_16BF, K, dyq, wq, M, K, N, accumulate ? 1.0f : 0.0f, nullptr, recipe == Fp8Recipe::kRowwise);
}

void CudaOps::linear_fp8_backward_weight_impl(Tensor dw, Tensor dbias, Tensor dy, Tensor x, Fp8Recipe recipe,
                                              bool accumulate, const Fp8Amax& amax) {
  const int64_t M = dy.rows(), N = dy.cols(), K = x.cols();
  const cuda::GradOut dw_out = cuda::grad_out(dw);
  if (M > 0) {
    cuda::Fp8Gemm& g = fp8_gemm("linear_fp8_backward_weight");
    // dw (N, K) = dy^T (N, M) . x (M, K): the reduction runs over the M tokens, both transposed.
    const auto [dyq, xq] = quantize_fp8_pair({dy.data, N, true}, {x.data, K, true, amax_slot(amax, 0)}, M, recipe);
    g.run(dw.data, dw_out.bf16 ? CUDA_R_16BF : CUDA_R_32F, K, dyq, xq, N, K, M, accumulate ? 1.0f : 0.0f, nullptr,
          recipe == Fp8Recipe::kRowwise);
  } else if (!accumulate) {
    rt_.zero(dw);
  }
  if (present(dbias))
    cuda::bias_grad(cuda::grad_out(dbias), p<nv_bf16>(dy), M, N, accumulate,
                    scratch(cuda::bias_grad_scratch_bytes(M, N)), queue());
}

// Tensorwise: dy quantized once, both ways from one amax and one read (fp8_cast.h's straight
// copy), into the scratch laid out by fp8_backward_scratch; x^T and then w^T take the other
// slot in turn. The same bytes, scales and GEMM plans as the two ops, so the same results.
void CudaOps::linear_fp8_backward_impl(Tensor dx, Tensor dw, Tensor dbias, Tensor dy, Tensor x, Tensor w,
                                       Fp8Recipe recipe, bool accumulate, const Fp8Amax& amax) {
  const int64_t M = dy.rows(), N = dy.cols(), K = x.cols();
  if (recipe != Fp8Recipe::kTensorwise || M == 0)
    return Ops::linear_fp8_backward_impl(dx, dw, dbias, dy, x, w, recipe, accumulate, amax);
  cuda::Fp8Gemm& g = fp8_gemm("linear_fp8_backward");
  const Fp8Scratch layout = fp8_backward_scratch(M, N, K);
  char* s = static_cast<char*>(scratch(static_cast<size_t>(layout.total())));
  auto* dy_t8 = reinterpret_cast<uint8_t*>(s);
  auto* dy8 = dy_t8 + layout.p_bytes / 2;
  auto* other8 = reinterpret_cast<uint8_t*>(s + layout.p_bytes);
  auto* dy_stat = reinterpret_cast<float*>(s + layout.p_bytes + layout.q_bytes);
  auto* other_stat = reinterpret_cast<float*>(s + layout.p_bytes + layout.q_bytes + layout.p_stats);
  const auto bf = [](const Tensor& t) { return static_cast<const nv_bf16*>(t.data); };
  const float* dy_inv = cuda::quantize_fp8(dy_t8, dy_stat, bf(dy), N, M, true, false, queue(), dy8);
  // dw (N, K) = dy^T (N, M) . x (M, K), as linear_fp8_backward_weight_impl.
  const float* x_inv = cuda::quantize_fp8(other8, other_stat, bf(x), K, M, true, false, queue(), nullptr,
                                          amax_slot(amax, 0));
  g.run(dw.data, cuda::grad_out(dw).bf16 ? CUDA_R_16BF : CUDA_R_32F, K, {dy_t8, dy_inv}, {other8, x_inv}, N, K, M,
        accumulate ? 1.0f : 0.0f, nullptr, false);
  // dx (M, K) = dy (M, N) . w (N, K), as linear_fp8_backward_input_impl.
  const float* w_inv = cuda::quantize_fp8(other8, other_stat, bf(w), K, N, true, false, queue(), nullptr,
                                          amax_slot(amax, 1));
  g.run(dx.data, CUDA_R_16BF, K, {dy8, dy_inv}, {other8, w_inv}, M, K, N, 0.0f, nullptr, false);
  if (present(dbias))
    cuda::bias_grad(cuda::grad_out(dbias), p<nv_bf16>(dy), M, N, accumulate,
                    scratch(cuda::bias_grad_scratch_bytes(M, N)), queue());
}

}  // namespace anvil
