// The op front of the mixture-of-experts ops (ops.h): each op's checks (op_checks.h), its
// timing scope, and the backend's *_impl.
#include "core/error.h"
#include "ops/op_checks.h"
#include "ops/ops.h"

namespace anvil {
namespace {

OpChecks moe_checks(const Ops& ops, const char* op) {
  return OpChecks(op, ops.runtime().device(), ops.compute_dtype());
}

// The routing's tensors: topk_idx (N,K) I32 and topk_w (N,K) F32 of probs (N,E) F32.
void check_routing(const OpChecks& c, const Tensor& probs, const Tensor& topk_idx, const Tensor& topk_w) {
  c.f32("probs", probs).ensure(probs.shape.ndim == 2, "probs ", probs.shape.str(), " is not (tokens, experts)");
  const int64_t N = probs.dim(0), E = probs.dim(1), K = topk_idx.cols();
  c.i32("topk_idx", topk_idx, N * K).f32("topk_w", topk_w, N * K);
  c.ensure(K >= 1 && K <= E, "top-k ", K, " of ", E, " experts");
}

// The experts' linear layer: x (R, Kin) or (R, Nout), w (E, Nout, Kin), offsets (E+1).
void check_experts(const OpChecks& c, const Tensor& w, const Tensor& offsets, int64_t rows) {
  c.compute("w", w).ensure(w.shape.ndim == 3, "w ", w.shape.str(), " is not (experts, out, in)");
  c.i32("offsets", offsets, w.dim(0) + 1).ensure(rows >= 0, "rows ", rows);
}

}  // namespace

void Ops::moe_router_forward(Tensor probs, Tensor topk_idx, Tensor topk_w, Tensor stats, Tensor logits,
                             bool norm_topk_prob) {
  const OpChecks c = moe_checks(*this, "moe_router_forward");
  check_routing(c, probs, topk_idx, topk_w);
  c.compute("logits", logits, probs.numel()).optional("stats", stats, DType::kF32, 2 * probs.dim(1));
  const Runtime::OpScope scope(runtime(), c.op(),
                               [&] { return cat(probs.dim(0), "x", probs.dim(1), " top ", topk_idx.cols()); });
  moe_router_forward_impl(probs, topk_idx, topk_w, stats, logits, norm_topk_prob);
}

void Ops::moe_router_backward(Tensor dlogits, Tensor dtopk_w, Tensor probs, Tensor topk_idx, Tensor topk_w,
                              Tensor aux_grad, bool norm_topk_prob) {
  const OpChecks c = moe_checks(*this, "moe_router_backward");
  check_routing(c, probs, topk_idx, topk_w);
  c.compute("dlogits", dlogits, probs.numel()).f32("dtopk_w", dtopk_w, topk_w.numel());
  c.optional("aux_grad", aux_grad, DType::kF32, probs.dim(1));
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return cat(probs.dim(0), "x", probs.dim(1)); });
  moe_router_backward_impl(dlogits, dtopk_w, probs, topk_idx, topk_w, aux_grad, norm_topk_prob);
}

void Ops::moe_aux_loss(Tensor loss_sum, Tensor aux_grad, Tensor stats, int64_t tokens, float coef, float loss_weight) {
  const OpChecks c = moe_checks(*this, "moe_aux_loss");
  c.f32("stats", stats)
      .ensure(stats.shape.ndim == 3 && stats.dim(1) == 2 && stats.dim(0) >= 1, "stats ", stats.shape.str(),
              " is not (sparse layers, 2, experts)");
  c.f32("loss_sum", loss_sum, 1).f32("aux_grad", aux_grad, stats.dim(2)).ensure(tokens >= 1, "tokens ", tokens);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return cat(stats.dim(0), "x", stats.dim(2)); });
  moe_aux_loss_impl(loss_sum, aux_grad, stats, tokens, coef, loss_weight);
}

void Ops::moe_sort(Tensor order, Tensor rows, Tensor offsets, Tensor topk_idx) {
  const OpChecks c = moe_checks(*this, "moe_sort");
  const int64_t n = topk_idx.numel();
  c.i32("topk_idx", topk_idx).i32("order", order, n).i32("rows", rows, n).i32("offsets", offsets);
  c.ensure(offsets.numel() >= 2, "offsets of ", offsets.numel(), " elements: expected experts + 1");
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return cat(n, " to ", offsets.numel() - 1); });
  moe_sort_impl(order, rows, offsets, topk_idx);
}

void Ops::moe_gather(Tensor xs, Tensor x, Tensor order, int top_k) {
  const OpChecks c = moe_checks(*this, "moe_gather");
  const int64_t N = x.rows(), C = x.cols();
  c.compute("x", x).ensure(top_k >= 1, "top_k ", top_k).i32("order", order, N * top_k).compute("xs", xs, N * top_k * C);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return cat(N * top_k, "x", C); });
  moe_gather_impl(xs, x, order, top_k);
}

void Ops::moe_gather_backward(Tensor dx, Tensor dxs, Tensor rows, bool accumulate) {
  const OpChecks c = moe_checks(*this, "moe_gather_backward");
  const int64_t N = dx.rows(), C = dx.cols();
  c.compute("dx", dx).i32("rows", rows).compute("dxs", dxs, rows.numel() * C);
  c.ensure(N >= 1 && rows.numel() % N == 0, "rows of ", rows.numel(), " assignments for ", N, " tokens");
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return cat(rows.numel(), "x", C); });
  moe_gather_backward_impl(dx, dxs, rows, accumulate);
}

void Ops::moe_linear_forward(Tensor y, Tensor x, Tensor w, Tensor offsets) {
  const OpChecks c = moe_checks(*this, "moe_linear_forward");
  check_experts(c, w, offsets, x.rows());
  c.compute("x", x, x.rows() * w.dim(2)).compute("y", y, x.rows() * w.dim(1));
  const Runtime::OpScope scope(runtime(), c.op(),
                               [&] { return cat(x.rows(), "x", w.dim(1), "x", w.dim(2), " in ", w.dim(0)); });
  moe_linear_forward_impl(y, x, w, offsets);
}

void Ops::moe_linear_backward_input(Tensor dx, Tensor dy, Tensor w, Tensor offsets) {
  const OpChecks c = moe_checks(*this, "moe_linear_backward_input");
  check_experts(c, w, offsets, dy.rows());
  c.compute("dy", dy, dy.rows() * w.dim(1)).compute("dx", dx, dy.rows() * w.dim(2));
  const Runtime::OpScope scope(runtime(), c.op(),
                               [&] { return cat(dy.rows(), "x", w.dim(1), "x", w.dim(2), " in ", w.dim(0)); });
  moe_linear_backward_input_impl(dx, dy, w, offsets);
}

void Ops::moe_linear_backward_weight(Tensor dw, Tensor dy, Tensor x, Tensor offsets, bool accumulate) {
  const OpChecks c = moe_checks(*this, "moe_linear_backward_weight");
  c.grad("dw", dw, accumulate).ensure(dw.shape.ndim == 3, "dw ", dw.shape.str(), " is not (experts, out, in)");
  c.i32("offsets", offsets, dw.dim(0) + 1);
  c.compute("dy", dy, dy.rows() * dw.dim(1)).compute("x", x, dy.rows() * dw.dim(2));
  const Runtime::OpScope scope(runtime(), c.op(),
                               [&] { return cat(dy.rows(), "x", dw.dim(1), "x", dw.dim(2), " in ", dw.dim(0)); });
  moe_linear_backward_weight_impl(dw, dy, x, offsets, accumulate);
}

void Ops::moe_combine_forward(Tensor out, Tensor ys, Tensor rows, Tensor topk_w) {
  const OpChecks c = moe_checks(*this, "moe_combine_forward");
  const int64_t N = out.rows(), C = out.cols();
  c.compute("out", out).f32("topk_w", topk_w).i32("rows", rows, topk_w.numel()).compute("ys", ys, topk_w.numel() * C);
  c.ensure(topk_w.rows() == N, "topk_w ", topk_w.shape.str(), " for ", N, " tokens");
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return cat(topk_w.numel(), "x", C); });
  moe_combine_forward_impl(out, ys, rows, topk_w);
}

void Ops::moe_combine_backward(Tensor dys, Tensor dtopk_w, Tensor dout, Tensor ys, Tensor rows, Tensor topk_w) {
  const OpChecks c = moe_checks(*this, "moe_combine_backward");
  const int64_t N = dout.rows(), C = dout.cols();
  c.compute("dout", dout).f32("topk_w", topk_w).i32("rows", rows, topk_w.numel());
  c.compute("ys", ys, topk_w.numel() * C)
      .compute("dys", dys, topk_w.numel() * C)
      .f32("dtopk_w", dtopk_w, topk_w.numel());
  c.ensure(topk_w.rows() == N, "topk_w ", topk_w.shape.str(), " for ", N, " tokens");
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return cat(topk_w.numel(), "x", C); });
  moe_combine_backward_impl(dys, dtopk_w, dout, ys, rows, topk_w);
}

}  // namespace anvil
