// The op front (ops.h): what every backend shares. Each public op checks its tensors once,
// for every backend (op_checks.h: device, dtype and shape, an error naming the op and the
// tensor), brackets the call for op timing (Runtime::OpScope: the runtime's begin_op/end_op,
// with the op's name and shape as `anvil bench step --op-times` prints them) and then calls
// the backend's *_impl.
#include "ops/ops.h"

#include "core/error.h"
#include "ops/op_checks.h"

namespace anvil {

namespace {

OpChecks checks_of(const Ops& ops, const char* op) {
  return OpChecks(op, ops.runtime().device(), ops.compute_dtype());
}

// qk_norm_rope's packed rows (rows, H+2KV, head_dim) and its cos and sin tables.
struct QkRopeRows {
  int64_t rows, head_dim;
};
QkRopeRows qk_rope_rows(const OpChecks& c, const Tensor& in, const Tensor& cos, const Tensor& sin, int n_heads,
                        int n_kv_heads) {
  const int64_t hd = in.cols(), heads = n_heads + 2 * n_kv_heads;
  c.compute("in", in).f32("cos", cos).f32("sin", sin);
  c.ensure(heads > 0 && hd > 0 && in.numel() % (heads * hd) == 0, "in ", in.shape.str(), " is not (rows, ", heads,
           ", head_dim)");
  c.ensure(cos.cols() == hd / 2 && sin.numel() == cos.numel(), "cos ", cos.shape.str(), " sin ", sin.shape.str(),
           " for head_dim ", hd);
  return {in.numel() / (heads * hd), hd};
}

// qk_norm_rope's norm weights (hd each) and rstd (rows, H+KV).
void check_qk_weights(const OpChecks& c, const Tensor& q_w, const Tensor& k_w, const Tensor& rstd, const QkRopeRows& s,
                      int64_t normed_heads) {
  c.compute("q_w", q_w, s.head_dim).compute("k_w", k_w, s.head_dim).f32("rstd", rstd, s.rows * normed_heads);
}

// attention's qkv (B, T, H+2KV, hd), with whole groups of q heads per kv head.
void check_qkv(const OpChecks& c, const Tensor& qkv, int n_heads, int n_kv_heads) {
  c.compute("qkv", qkv).ensure(qkv.shape.ndim == 4 && qkv.dim(2) == n_heads + 2 * n_kv_heads, "qkv ",
                               qkv.shape.str(), " is not (B, T, ", n_heads + 2 * n_kv_heads, ", head_dim)");
  c.ensure(n_kv_heads > 0 && n_heads % n_kv_heads == 0, n_heads, " heads do not share ", n_kv_heads, " kv heads");
}

// Packed documents' positions (B*T) I32, and their lengths, where given, positive, none across
// a sequence's end, B*T in all.
void check_documents(const OpChecks& c, const Documents& documents, const Tensor& qkv) {
  const int64_t T = qkv.dim(1);
  c.optional("positions", documents.positions, DType::kI32, qkv.dim(0) * T);
  if (documents.lengths.empty()) return;
  c.ensure(documents.positions.data != nullptr, "document lengths are given without positions");
  int64_t at = 0;
  for (const int32_t n : documents.lengths) {
    c.ensure(n > 0 && at / T == (at + n - 1) / T, "a document of ", n, " tokens at token ", at,
             " is empty or crosses the end of its sequence of ", T);
    at += n;
  }
  c.ensure(at == qkv.dim(0) * T, "the documents hold ", at, " tokens, the sequences ", qkv.dim(0) * T);
}

// The shape, and " documents" where documents are packed (a different op in the timings).
std::string attention_label(const Tensor& qkv, int n_heads, int n_kv_heads, const Tensor& positions) {
  return cat(qkv.dim(0), "x", qkv.dim(1), "x", n_heads, "/", n_kv_heads, "x", qkv.dim(3),
             positions.data ? " documents" : "");
}

}  // namespace

// ---- linear layers
namespace {

// A GEMM's M x N x K, the linear ops' timing label.
struct GemmShape {
  int64_t m, n, k;
  std::string label() const { return cat(m, "x", n, "x", k); }
};

// The shapes of linear_forward's tensors: x (M, K), w (N, K), y (M, N), bias (N) or absent; y F32
// when f32_out, else the compute dtype.
GemmShape check_linear_forward(const OpChecks& c, DType compute, Tensor y, Tensor x, Tensor w, Tensor bias,
                                 bool f32_out) {
  const int64_t M = x.rows(), K = x.cols(), N = w.dim(0);
  c.tensor("y", y, f32_out ? DType::kF32 : compute).compute("x", x).compute("w", w);
  c.optional("bias", bias, compute, N);
  c.ensure(w.cols() == K && y.rows() == M && y.cols() == N, "shapes x ", x.shape.str(), " w ", w.shape.str(), " y ",
           y.shape.str(), " are not (M, K), (N, K), (M, N)");
  return {M, N, K};
}

GemmShape check_linear_backward_input(const OpChecks& c, Tensor dx, Tensor dy, Tensor w) {
  const int64_t M = dy.rows(), N = dy.cols(), K = w.cols();
  c.compute("dx", dx).compute("dy", dy).compute("w", w);
  c.ensure(w.dim(0) == N && dx.rows() == M && dx.cols() == K, "shapes dy ", dy.shape.str(), " w ", w.shape.str(),
           " dx ", dx.shape.str(), " are not (M, N), (N, K), (M, K)");
  return {M, N, K};
}

GemmShape check_linear_backward_weight(const OpChecks& c, Tensor dw, Tensor dbias, Tensor dy, Tensor x,
                                       bool accumulate) {
  const int64_t M = dy.rows(), N = dy.cols(), K = x.cols();
  c.grad("dw", dw, accumulate).compute("dy", dy).compute("x", x);
  if (dbias.data) c.grad("dbias", dbias, accumulate, N);
  c.ensure(x.rows() == M && dw.dim(0) == N && dw.cols() == K, "shapes dy ", dy.shape.str(), " x ", x.shape.str(),
           " dw ", dw.shape.str(), " are not (M, N), (M, K), (N, K)");
  return {M, N, K};
}

void check_fp8_recipe(const OpChecks& c, Fp8Recipe recipe, const Fp8Amax& amax) {
  c.ensure(recipe != Fp8Recipe::kOff, "called with the fp8 recipe off (use the bf16 linear ops)");
  c.optional("amax slot", amax.slot, DType::kF32, 2);
  c.ensure(!amax.slot.data || recipe == Fp8Recipe::kTensorwise, "an amax slot with the ", fp8_recipe_name(recipe),
           " recipe (a slot holds tensorwise amaxes)");
  c.ensure(amax.slot.data || !(amax.x_known || amax.w_known), "an amax known without a slot");
}

}  // namespace

void Ops::linear_forward(Tensor y, Tensor x, Tensor w, Tensor bias) {
  const OpChecks c = checks_of(*this, "linear_forward");
  const bool f32_out = y.dtype == DType::kF32 && !bias.data;  // inference logits
  const GemmShape shape = check_linear_forward(c, compute_dtype(), y, x, w, bias, f32_out);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return shape.label(); });
  linear_forward_impl(y, x, w, bias);
}

void Ops::linear_backward_input(Tensor dx, Tensor dy, Tensor w, bool accumulate) {
  const OpChecks c = checks_of(*this, "linear_backward_input");
  const GemmShape shape = check_linear_backward_input(c, dx, dy, w);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return shape.label(); });
  linear_backward_input_impl(dx, dy, w, accumulate);
}

void Ops::linear_backward_weight(Tensor dw, Tensor dbias, Tensor dy, Tensor x, bool accumulate) {
  const OpChecks c = checks_of(*this, "linear_backward_weight");
  const GemmShape shape = check_linear_backward_weight(c, dw, dbias, dy, x, accumulate);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return shape.label(); });
  linear_backward_weight_impl(dw, dbias, dy, x, accumulate);
}

void Ops::linear_fp8_forward(Tensor y, Tensor x, Tensor w, Tensor bias, Fp8Recipe recipe, const Fp8Amax& amax) {
  const OpChecks c = checks_of(*this, "linear_fp8_forward");
  check_fp8_recipe(c, recipe, amax);
  const GemmShape shape = check_linear_forward(c, compute_dtype(), y, x, w, bias, false);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return shape.label(); });
  linear_fp8_forward_impl(y, x, w, bias, recipe, amax);
}

void Ops::linear_fp8_backward_input(Tensor dx, Tensor dy, Tensor w, Fp8Recipe recipe, bool accumulate,
                                    const Fp8Amax& amax) {
  const OpChecks c = checks_of(*this, "linear_fp8_backward_input");
  check_fp8_recipe(c, recipe, amax);
  const GemmShape shape = check_linear_backward_input(c, dx, dy, w);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return shape.label(); });
  linear_fp8_backward_input_impl(dx, dy, w, recipe, accumulate, amax);
}

void Ops::linear_fp8_backward_weight(Tensor dw, Tensor dbias, Tensor dy, Tensor x, Fp8Recipe recipe,
                                     bool accumulate, const Fp8Amax& amax) {
  const OpChecks c = checks_of(*this, "linear_fp8_backward_weight");
  check_fp8_recipe(c, recipe, amax);
  const GemmShape shape = check_linear_backward_weight(c, dw, dbias, dy, x, accumulate);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return shape.label(); });
  linear_fp8_backward_weight_impl(dw, dbias, dy, x, recipe, accumulate, amax);
}

void Ops::linear_fp8_backward(Tensor dx, Tensor dw, Tensor dbias, Tensor dy, Tensor x, Tensor w, Fp8Recipe recipe,
                              bool accumulate, const Fp8Amax& amax) {
  const OpChecks c = checks_of(*this, "linear_fp8_backward");
  check_fp8_recipe(c, recipe, amax);
  const GemmShape shape = check_linear_backward_weight(c, dw, dbias, dy, x, accumulate);
  check_linear_backward_input(c, dx, dy, w);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return shape.label(); });
  linear_fp8_backward_impl(dx, dw, dbias, dy, x, w, recipe, accumulate, amax);
}

void Ops::linear_fp8_backward_impl(Tensor dx, Tensor dw, Tensor dbias, Tensor dy, Tensor x, Tensor w,
                                   Fp8Recipe recipe, bool accumulate, const Fp8Amax& amax) {
  linear_fp8_backward_weight_impl(dw, dbias, dy, x, recipe, accumulate, amax);
  linear_fp8_backward_input_impl(dx, dy, w, recipe, false, amax);
}

// ---- embedding
void Ops::embedding_forward(Tensor out, Tensor ids, Tensor table) {
  const int64_t N = ids.numel(), C = table.cols();
  checks_of(*this, "embedding_forward").i32("ids", ids).compute("table", table).compute("out", out, N * C);
  const Runtime::OpScope scope(runtime(), "embedding_forward", [&] { return cat(N, "x", C); });
  embedding_forward_impl(out, ids, table);
}

void Ops::embedding_backward(Tensor dtable, Tensor ids, Tensor dout, bool accumulate) {
  const int64_t N = ids.numel(), C = dtable.cols();
  checks_of(*this, "embedding_backward").f32("dtable", dtable).i32("ids", ids).compute("dout", dout, N * C);
  const Runtime::OpScope scope(runtime(), "embedding_backward", [&] { return cat(N, "x", C); });
  embedding_backward_impl(dtable, ids, dout, accumulate);
}

// ---- RMSNorm
void Ops::rmsnorm_forward(Tensor out, Tensor rstd, Tensor x, Tensor w, float eps, Tensor amax) {
  const int64_t R = x.rows(), C = x.cols();
  const OpChecks c = checks_of(*this, "rmsnorm_forward");
  c.compute("x", x).compute("w", w, C).compute("out", out, R * C).f32("rstd", rstd, R).optional("amax", amax,
                                                                                                  DType::kF32, 1);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return cat(R, "x", C); });
  rmsnorm_forward_impl(out, rstd, x, w, eps, amax);
}

void Ops::add_rmsnorm_forward(Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b, Tensor w, float eps,
                              Tensor amax) {
  const int64_t R = a.rows(), C = a.cols();
  const OpChecks c = checks_of(*this, "add_rmsnorm_forward");
  c.compute("a", a).compute("b", b, R * C).compute("w", w, C).compute("sum", sum, R * C);
  c.compute("out", out, R * C).f32("rstd", rstd, R).optional("amax", amax, DType::kF32, 1);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return cat(R, "x", C); });
  add_rmsnorm_forward_impl(sum, out, rstd, a, b, w, eps, amax);
}

void Ops::add_rmsnorm_forward_impl(Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b, Tensor w, float eps,
                                   Tensor amax) {
  add_impl(sum, a, b);
  rmsnorm_forward_impl(out, rstd, sum, w, eps, amax);
}

void Ops::rmsnorm_backward(Tensor dx, Tensor dw, Tensor dout, Tensor x, Tensor w, Tensor rstd, bool accumulate,
                           bool accumulate_dw) {
  const int64_t R = x.rows(), C = x.cols();
  const OpChecks c = checks_of(*this, "rmsnorm_backward");
  c.compute("x", x).compute("w", w, C).f32("rstd", rstd, R).compute("dout", dout, R * C);
  c.compute("dx", dx, R * C).grad("dw", dw, accumulate_dw, C);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return cat(R, "x", C); });
  rmsnorm_backward_impl(dx, dw, dout, x, w, rstd, accumulate, accumulate_dw);
}

// ---- qk-norm + RoPE
void Ops::qk_norm_rope_forward(Tensor out, Tensor rstd, Tensor in, Tensor q_w, Tensor k_w, Tensor cos, Tensor sin,
                               int n_heads, int n_kv_heads, float eps, Tensor positions) {
  const OpChecks c = checks_of(*this, "qk_norm_rope_forward");
  const QkRopeRows s = qk_rope_rows(c, in, cos, sin, n_heads, n_kv_heads);
  c.compute("out", out, in.numel()).optional("positions", positions, DType::kI32, s.rows);
  if (q_w.data) check_qk_weights(c, q_w, k_w, rstd, s, n_heads + n_kv_heads);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return cat(s.rows, "x", n_heads, "+", n_kv_heads, "x", s.head_dim); });
  qk_norm_rope_forward_impl(out, rstd, in, q_w, k_w, cos, sin, n_heads, n_kv_heads, eps, positions);
}

void Ops::qk_norm_rope_backward(Tensor din, Tensor dq_w, Tensor dk_w, Tensor dout, Tensor in, Tensor q_w, Tensor k_w,
                                Tensor rstd, Tensor cos, Tensor sin, int n_heads, int n_kv_heads, bool accumulate_dw,
                                Tensor positions) {
  const OpChecks c = checks_of(*this, "qk_norm_rope_backward");
  const QkRopeRows s = qk_rope_rows(c, in, cos, sin, n_heads, n_kv_heads);
  c.compute("din", din, in.numel()).compute("dout", dout, in.numel());
  c.optional("positions", positions, DType::kI32, s.rows);
  if (q_w.data) {
    check_qk_weights(c, q_w, k_w, rstd, s, n_heads + n_kv_heads);
    c.grad("dq_w", dq_w, accumulate_dw, s.head_dim).grad("dk_w", dk_w, accumulate_dw, s.head_dim);
  }
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return cat(s.rows, "x", n_heads, "+", n_kv_heads, "x", s.head_dim); });
  qk_norm_rope_backward_impl(din, dq_w, dk_w, dout, in, q_w, k_w, rstd, cos, sin, n_heads, n_kv_heads, accumulate_dw,
                             positions);
}

// ---- attention
void Ops::attention_forward(Tensor out, Tensor lse, Tensor qkv, int n_heads, int n_kv_heads,
                            const Documents& documents) {
  const OpChecks c = checks_of(*this, "attention_forward");
  check_qkv(c, qkv, n_heads, n_kv_heads);
  const int64_t rows = qkv.dim(0) * qkv.dim(1);
  c.compute("out", out, rows * n_heads * qkv.dim(3)).f32("lse", lse, rows * n_heads);
  check_documents(c, documents, qkv);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return attention_label(qkv, n_heads, n_kv_heads, documents.positions); });
  attention_forward_impl(out, lse, qkv, n_heads, n_kv_heads, documents);
}

void Ops::attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int n_heads,
                             int n_kv_heads, const Documents& documents) {
  const OpChecks c = checks_of(*this, "attention_backward");
  check_qkv(c, qkv, n_heads, n_kv_heads);
  const int64_t rows = qkv.dim(0) * qkv.dim(1);
  c.compute("out", out, rows * n_heads * qkv.dim(3)).f32("lse", lse, rows * n_heads);
  c.compute("dout", dout, out.numel()).compute("dqkv", dqkv, qkv.numel());
  check_documents(c, documents, qkv);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return attention_label(qkv, n_heads, n_kv_heads, documents.positions); });
  attention_backward_impl(dqkv, dout, qkv, out, lse, n_heads, n_kv_heads, documents);
}

void Ops::attention_cached(Tensor out, Tensor qkv, Tensor k_cache, Tensor v_cache, Tensor slots, Tensor positions,
                           int n_heads, int n_kv_heads) {
  const OpChecks c = checks_of(*this, "attention_cached");
  c.compute("k_cache", k_cache).compute("v_cache", v_cache);
  c.ensure(k_cache.shape.ndim == 4 && k_cache.dim(1) == n_kv_heads && k_cache.shape == v_cache.shape, "cache ",
           k_cache.shape.str(), " and ", v_cache.shape.str(), " are not (S, ", n_kv_heads, ", P, head_dim)");
  c.ensure(n_kv_heads > 0 && n_heads % n_kv_heads == 0, n_heads, " heads do not share ", n_kv_heads, " kv heads");
  const int64_t rows = slots.numel(), hd = k_cache.dim(3);
  c.i32("slots", slots).i32("positions", positions, rows).compute("out", out, rows * n_heads * hd);
  c.compute("qkv", qkv, rows * (n_heads + 2 * n_kv_heads) * hd).ensure(qkv.cols() == hd, "qkv ", qkv.shape.str(),
                                                                      " is not (rows, heads, ", hd, ")");
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return cat(rows, " rows"); });
  attention_cached_impl(out, qkv, k_cache, v_cache, slots, positions, n_heads, n_kv_heads);
}

void Ops::argmax_rows(Tensor out, Tensor x) {
  checks_of(*this, "argmax_rows").f32("x", x).i32("out", out, x.rows());
  const Runtime::OpScope scope(runtime(), "argmax_rows", [&] { return cat(x.rows(), "x", x.cols()); });
  argmax_rows_impl(out, x);
}

// ---- SwiGLU, add
void Ops::swiglu_forward(Tensor out, Tensor gate_up, Tensor amax) {
  const int64_t N = gate_up.rows(), I = gate_up.cols() / 2;
  const OpChecks c = checks_of(*this, "swiglu_forward");
  c.compute("gate_up", gate_up).ensure(gate_up.cols() % 2 == 0, "gate_up ", gate_up.shape.str(), " has an odd width");
  c.compute("out", out, N * I).optional("amax", amax, DType::kF32, 1);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return cat(N, "x", I); });
  swiglu_forward_impl(out, gate_up, amax);
}

void Ops::swiglu_backward(Tensor dgate_up, Tensor dout, Tensor gate_up, Tensor act) {
  const int64_t N = gate_up.rows(), I = gate_up.cols() / 2;
  const OpChecks c = checks_of(*this, "swiglu_backward");
  c.compute("gate_up", gate_up).ensure(gate_up.cols() % 2 == 0, "gate_up ", gate_up.shape.str(), " has an odd width");
  c.compute("dout", dout, N * I).compute("dgate_up", dgate_up, N * 2 * I).optional("act", act, compute_dtype(), N * I);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return cat(N, "x", I); });
  swiglu_backward_impl(dgate_up, dout, gate_up, act);
}

void Ops::add(Tensor out, Tensor a, Tensor b) {
  const int64_t n = out.numel();
  checks_of(*this, "add").f32_or_compute("out", out).tensor("a", a, out.dtype, n).tensor("b", b, out.dtype, n);
  const Runtime::OpScope scope(runtime(), "add", [&] { return cat(dtype_name(out.dtype), " ", n); });
  add_impl(out, a, b);
}

// ---- output projection + cross-entropy
void Ops::cross_entropy_forward_backward(Tensor loss_sum, Tensor dh, Tensor dw, Tensor h, Tensor w, Tensor targets,
                                         float loss_scale, Tensor logits, bool accumulate_dw, Tensor row_weights,
                                         Tensor row_losses) {
  const OpChecks c = checks_of(*this, "cross_entropy_forward_backward");
  const int64_t N = h.rows(), C = h.cols(), V = w.dim(0);
  const bool grads = dh.data != nullptr;
  c.ensure(grads == (dw.data != nullptr), "dh and dw are given together or not at all");
  c.compute("h", h).compute("w", w).ensure(w.cols() == C, "shapes h ", h.shape.str(), " w ", w.shape.str(),
                                           " are not (N, C), (V, C)");
  c.f32("loss_sum", loss_sum, 1).i32("targets", targets, N).optional("logits", logits, DType::kF32, N * V);
  c.optional("row_weights", row_weights, DType::kF32, N).optional("row_losses", row_losses, DType::kF32, N);
  if (grads) c.compute("dh", dh, N * C).f32("dw", dw, V * C);
  const Runtime::OpScope scope(runtime(), grads ? c.op() : "cross_entropy_forward", [&] { return cat(N, "x", V, "x", C); });
  cross_entropy_forward_backward_impl(loss_sum, dh, dw, h, w, targets, loss_scale, logits, accumulate_dw, row_weights,
                                      row_losses);
}

// ---- optimizer
void Ops::adamw_step(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWHyper& h, float grad_scale,
                     Tensor copy, bool zero_grad) {
  const int64_t n = param.numel();
  const OpChecks c = checks_of(*this, "adamw_step");
  c.f32("param", param).grad("grad", grad, false, n).f32("m", m, n).f32("v", v, n);
  c.optional("copy", copy, compute_dtype(), n);
  const Runtime::OpScope scope(runtime(), c.op(), [&] { return cat(n); });
  adamw_step_impl(param, grad, m, v, h, grad_scale, copy, zero_grad);
}

void Ops::adamw_step_split(Tensor hi, Tensor lo, Tensor grad, Tensor m, Tensor v, const AdamWHyper& h,
                           float grad_scale) {
  const int64_t n = hi.numel();
  const OpChecks c = checks_of(*this, "adamw_step_split");
  c.tensor("hi", hi, DType::kBF16).tensor("lo", lo, DType::kI16, n).grad("grad", grad, false, n);
  c.f32("m", m, n).f32("v", v, n);
  const Runtime::OpScope scope(runtime(), "adamw_step", [&] { return cat("split ", n); });
  adamw_step_split_impl(hi, lo, grad, m, v, h, grad_scale);
}

void Ops::sum_squares(Tensor out, Tensor x) {
  checks_of(*this, "sum_squares").f32("out", out, 1).f32_or_compute("x", x);
  const Runtime::OpScope scope(runtime(), "sum_squares", [&] { return cat(dtype_name(x.dtype), " ", x.numel()); });
  sum_squares_impl(out, x);
}

}  // namespace anvil
