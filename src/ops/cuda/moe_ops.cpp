// The mixture-of-experts ops' dispatch (CudaOps, cuda_ops.h) to the kernels of moe.cu, and the
// experts' linear layers as one grouped GEMM per op (cuBLAS's cublasGemmGroupedBatchedEx,
// through cuda::Gemm::run_grouped): one problem per expert with rows. cuBLAS reads the
// problems' sizes from the host, so each of the three ops downloads the offsets (a wait for the
// queue; no CUDA graph can hold it: the decoder does not record MoE models) and builds the
// operands' addresses from the same host offsets, uploaded by one small copy right after the
// download, while the queue is empty (a kernel building them on the device would still need
// the host's sizes). A weight gradient in F32 (cuda::grad_out) runs as a loop of cuBLASLt
// GEMMs, one per expert with rows: cuBLAS's grouped GEMM writes bf16 from bf16 operands only.
// The same offsets give the same problem set, so the same kernels and the same bits.
#include <vector>

#include "core/cuda/check.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/moe.h"

namespace anvil {

using cuda::nv_bf16;
using cuda::p;
using cuda::present;

namespace {

// The experts' row offsets (E + 1) on the host.
std::vector<int32_t> host_offsets(Runtime& rt, const Tensor& offsets) {
  std::vector<int32_t> h(static_cast<size_t>(offsets.numel()));
  rt.download(h.data(), offsets);
  return h;
}

// Expert e's first row and row count.
int64_t first_row(const std::vector<int32_t>& off, int64_t e) { return off[static_cast<size_t>(e)]; }
int64_t rows_of(const std::vector<int32_t>& off, int64_t e) {
  return off[static_cast<size_t>(e) + 1] - off[static_cast<size_t>(e)];
}

}  // namespace

void CudaOps::moe_router_forward_impl(Tensor probs, Tensor topk_idx, Tensor topk_w, Tensor stats, Tensor logits,
                                      bool norm_topk_prob) {
  ANVIL_ENSURE(probs.dim(1) <= cuda::kMaxRouterExperts, kUnsupported, "the CUDA router takes at most ",
               cuda::kMaxRouterExperts, " experts; the model has ", probs.dim(1));
  cuda::moe_router_forward(p<float>(probs), p<int32_t>(topk_idx), p<float>(topk_w),
                           present(stats) ? p<float>(stats) : nullptr, p<nv_bf16>(logits), probs.dim(0), probs.dim(1),
                           topk_idx.cols(), norm_topk_prob, queue());
}

void CudaOps::moe_router_backward_impl(Tensor dlogits, Tensor dtopk_w, Tensor probs, Tensor topk_idx, Tensor topk_w,
                                       Tensor aux_grad, bool norm_topk_prob) {
  cuda::moe_router_backward(p<nv_bf16>(dlogits), p<float>(dtopk_w), p<float>(probs), p<int32_t>(topk_idx),
                            p<float>(topk_w), present(aux_grad) ? p<float>(aux_grad) : nullptr, probs.dim(0),
                            probs.dim(1), topk_idx.cols(), norm_topk_prob, queue());
}

void CudaOps::moe_aux_loss_impl(Tensor loss_sum, Tensor aux_grad, Tensor stats, int64_t tokens, float coef,
                                float loss_weight) {
  cuda::moe_aux_loss(p<float>(loss_sum), p<float>(aux_grad), p<float>(stats), stats.dim(0), stats.dim(2), tokens, coef,
                     loss_weight, queue());
}

void CudaOps::moe_sort_impl(Tensor order, Tensor rows, Tensor offsets, Tensor topk_idx) {
  const int64_t n = topk_idx.numel(), E = offsets.numel() - 1;
  cuda::moe_sort(p<int32_t>(order), p<int32_t>(rows), p<int32_t>(offsets), p<int32_t>(topk_idx), n, E,
                 scratch(cuda::moe_sort_scratch_bytes(n, E)), queue());
}

void CudaOps::moe_gather_impl(Tensor xs, Tensor x, Tensor order, int top_k) {
  cuda::moe_gather(p<nv_bf16>(xs), p<nv_bf16>(x), p<int32_t>(order), order.numel(), x.cols(), top_k, queue());
}

void CudaOps::moe_gather_backward_impl(Tensor dx, Tensor dxs, Tensor rows, bool accumulate) {
  cuda::moe_gather_backward(p<nv_bf16>(dx), p<nv_bf16>(dxs), p<int32_t>(rows), dx.rows(), dx.cols(),
                            rows.numel() / dx.rows(), accumulate, queue());
}

void CudaOps::moe_linear_forward_impl(Tensor y, Tensor x, Tensor w, Tensor offsets) {
  const int64_t E = w.dim(0), Nout = w.dim(1), Kin = w.dim(2);
  const std::vector<int32_t> off = host_offsets(rt_, offsets);
  std::vector<cuda::GemmProblem> problems;
  for (int64_t e = 0; e < E; ++e)
    if (const int64_t r0 = first_row(off, e), m = rows_of(off, e); m > 0)
      problems.push_back({p<nv_bf16>(y) + r0 * Nout, Nout, {p<nv_bf16>(x) + r0 * Kin, Kin, false},
                          {p<nv_bf16>(w) + e * Nout * Kin, Kin, true}, m, Nout, Kin});
  gemm("moe_linear_forward").run_grouped(problems, 0.0f, scratch(3 * sizeof(void*) * static_cast<size_t>(E)));
}

void CudaOps::moe_linear_backward_input_impl(Tensor dx, Tensor dy, Tensor w, Tensor offsets) {
  const int64_t E = w.dim(0), Nout = w.dim(1), Kin = w.dim(2);
  const std::vector<int32_t> off = host_offsets(rt_, offsets);
  std::vector<cuda::GemmProblem> problems;
  for (int64_t e = 0; e < E; ++e)
    if (const int64_t r0 = first_row(off, e), m = rows_of(off, e); m > 0)
      problems.push_back({p<nv_bf16>(dx) + r0 * Kin, Kin, {p<nv_bf16>(dy) + r0 * Nout, Nout, false},
                          {p<nv_bf16>(w) + e * Nout * Kin, Kin, false}, m, Kin, Nout});
  gemm("moe_linear_backward_input").run_grouped(problems, 0.0f, scratch(3 * sizeof(void*) * static_cast<size_t>(E)));
}

// dw_e (Nout, Kin) = dy_e^T x_e over expert e's rows; an expert without rows gets zeros (or
// keeps its sum when accumulating).
void CudaOps::moe_linear_backward_weight_impl(Tensor dw, Tensor dy, Tensor x, Tensor offsets, bool accumulate) {
  const int64_t E = dw.dim(0), Nout = dw.dim(1), Kin = dw.dim(2);
  const cuda::GradOut out = cuda::grad_out(dw);
  const std::vector<int32_t> off = host_offsets(rt_, offsets);
  cuda::Gemm& g = gemm("moe_linear_backward_weight");
  std::vector<cuda::GemmProblem> problems;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = first_row(off, e), m = rows_of(off, e);
    void* dw_e = static_cast<char*>(dw.data) + out.bytes(e * Nout * Kin);
    if (m == 0) {
      if (!accumulate) CUDA_CHECK(cudaMemsetAsync(dw_e, 0, out.bytes(Nout * Kin), queue()));
      continue;
    }
    const cuda::GemmProblem q{
        dw_e, Kin, {p<nv_bf16>(dy) + r0 * Nout, Nout, true}, {p<nv_bf16>(x) + r0 * Kin, Kin, false}, Nout, Kin, m};
    if (out.bf16)
      problems.push_back(q);
    else
      g.run(q.out, CUDA_R_32F, q.ldo, q.a, q.b, q.m, q.n, q.k, accumulate ? 1.0f : 0.0f, nullptr);
  }
  g.run_grouped(problems, accumulate ? 1.0f : 0.0f, scratch(3 * sizeof(void*) * static_cast<size_t>(E)));
}

void CudaOps::moe_combine_forward_impl(Tensor out, Tensor ys, Tensor rows, Tensor topk_w) {
  cuda::moe_combine_forward(p<nv_bf16>(out), p<nv_bf16>(ys), p<int32_t>(rows), p<float>(topk_w), out.rows(), out.cols(),
                            topk_w.cols(), queue());
}

void CudaOps::moe_combine_backward_impl(Tensor dys, Tensor dtopk_w, Tensor dout, Tensor ys, Tensor rows,
                                        Tensor topk_w) {
  cuda::moe_combine_backward(p<nv_bf16>(dys), p<float>(dtopk_w), p<nv_bf16>(dout), p<nv_bf16>(ys), p<int32_t>(rows),
                             p<float>(topk_w), dout.rows(), dout.cols(), topk_w.cols(), queue());
}

}  // namespace anvil
