#include "model/transformer.h"

#include <cmath>

#include "core/error.h"

namespace anvil {
namespace {

// A view of `shape` at element `offset` of a unit's flat buffer.
Tensor part(const Tensor& unit, int64_t offset, Shape shape) {
  ANVIL_ASSERT(offset >= 0 && offset + shape.numel() <= unit.numel());
  return Tensor(static_cast<char*>(unit.data) + static_cast<size_t>(offset) * dtype_size(unit.dtype), unit.dtype,
                shape, unit.device);
}

}  // namespace

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::kNone;
  if (name == "selective") return Recompute::kSelective;
  if (name == "full") return Recompute::kFull;
  if (name == "auto") return Recompute::kAuto;
  raise(ErrorKind::kUsage, "unknown recompute '", name, "' (none, selective, full or auto)");
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
    case Recompute::kAuto: return "auto";
  }
  return "?";
}

int64_t ActivationLayout::total(int64_t num_layers, Recompute r) const {
  switch (r) {
    case Recompute::kNone: return resident + num_layers * saved_per_block;
    case Recompute::kSelective:
      return resident + num_layers * (saved_per_block - elementwise_per_block) + elementwise_per_block;
    case Recompute::kFull: return resident + saved_per_block;
    case Recompute::kAuto: break;
  }
  raise(ErrorKind::kInternal, "activation sizes of recompute ", recompute_name(r), " (resolve auto first)");
}

ActivationLayout activation_layout(const ModelConfig& c, int64_t B, int64_t T, DType cd) {
  const int64_t N = B * T, C = c.hidden_size, I = c.intermediate_size, Q = c.qkv_dim();
  const int64_t s = static_cast<int64_t>(dtype_size(cd)), f = 4;
  ActivationLayout l;
  // h1, qkv_raw, qkv, att, x_mid, h2, gate_up; rstd1, rstd2, rstd_qk, lse.
  l.saved_per_block = s * N * (C + Q + Q + c.q_dim() + C + C + 2 * I) +
                      f * (N + N + N * (c.num_heads + c.num_kv_heads) + B * c.num_heads * T);
  l.elementwise_per_block = s * N * (C + Q + C);  // h1, qkv, h2
  // x_0..x_L; act, d_act, d_gate_up, d_att, d_qkv, d_qkv_raw, dx, dh, h_final; rstd_final, rope tables.
  l.resident = s * N * C * (c.num_layers + 1) + s * N * (I + I + 2 * I + c.q_dim() + Q + Q + C + C + C) +
               f * (N + 2 * T * (c.head_dim / 2));
  return l;
}

Transformer::Transformer(const ModelConfig& config, const ParamTable& table, Ops& ops, int64_t micro_batch,
                         int64_t seq_len, Recompute recompute)
    : c_(config), table_(table), ops_(ops), B_(micro_batch), T_(seq_len), N_(micro_batch * seq_len),
      recompute_(recompute), cd_(ops.compute_dtype()) {
  ANVIL_ENSURE(B_ >= 1 && T_ >= 2, kInvalidInput, "micro-batch ", B_, " x sequence length ", T_,
               ": need at least one sequence of two tokens");
  ANVIL_ENSURE(recompute_ != Recompute::kAuto, kInternal, "recompute auto reached the model unresolved");
  const int64_t C = c_.hidden_size, I = c_.intermediate_size, Q = c_.qkv_dim();
  const int64_t H = c_.num_heads, KV = c_.num_kv_heads, hd = c_.head_dim;
  const DType F = DType::kF32;
  for (int64_t l = 0; l <= c_.num_layers; ++l) resid_.push_back(make({N_, C}, cd_));
  acts_.resize(recompute_ == Recompute::kFull ? 1 : static_cast<size_t>(c_.num_layers));
  const bool selective = recompute_ == Recompute::kSelective;
  BlockActs shared;  // selective: the element-wise outputs, one set for every block
  if (selective) {
    shared.h1 = make({N_, C}, cd_);
    shared.qkv = make({B_, T_, H + 2 * KV, hd}, cd_);
    shared.h2 = make({N_, C}, cd_);
  }
  for (auto& a : acts_) {
    a.h1 = selective ? shared.h1 : make({N_, C}, cd_);
    a.rstd1 = make({N_}, F);
    a.qkv_raw = make({N_, H + 2 * KV, hd}, cd_);
    a.qkv = selective ? shared.qkv : make({B_, T_, H + 2 * KV, hd}, cd_);
    a.rstd_qk = make({N_, H + KV}, F);
    a.att = make({N_, H * hd}, cd_);
    a.lse = make({B_, H, T_}, F);
    a.x_mid = make({N_, C}, cd_);
    a.h2 = selective ? shared.h2 : make({N_, C}, cd_);
    a.rstd2 = make({N_}, F);
    a.gate_up = make({N_, 2 * I}, cd_);
  }
  act_ = make({N_, I}, cd_);
  d_act_ = make({N_, I}, cd_);
  d_gate_up_ = make({N_, 2 * I}, cd_);
  d_att_ = make({N_, H * hd}, cd_);
  d_qkv_ = make({B_, T_, H + 2 * KV, hd}, cd_);
  d_qkv_raw_ = make({N_, H + 2 * KV, hd}, cd_);
  dx_ = make({N_, C}, cd_);
  dh_ = make({N_, C}, cd_);
  h_final_ = make({N_, C}, cd_);
  rstd_final_ = make({N_}, F);
  (void)Q;

  // RoPE tables as transformers computes them: fp32 angles inv_freq * position, fp32 cos/sin.
  const std::vector<float> inv = rope_inv_freq(c_);
  const int64_t half = hd / 2;
  std::vector<float> cs(static_cast<size_t>(T_ * half)), sn(cs.size());
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = inv[static_cast<size_t>(i)] * static_cast<float>(t);
      cs[static_cast<size_t>(t * half + i)] = std::cos(angle);
      sn[static_cast<size_t>(t * half + i)] = std::sin(angle);
    }
  cos_ = make({T_, half}, F);
  sin_ = make({T_, half}, F);
  ops_.upload(cos_, cs.data());
  ops_.upload(sin_, sn.data());
}

Transformer::~Transformer() {
  for (void* p : buffers_) ops_.release(p);
}

Tensor Transformer::make(Shape shape, DType dtype) {
  Tensor t(nullptr, dtype, shape, ops_.device());
  t.data = ops_.alloc(t.bytes());
  buffers_.push_back(t.data);
  allocated_bytes_ += static_cast<int64_t>(t.bytes());
  return t;
}

void Transformer::block_forward(int64_t, Tensor w, Tensor x_in, BlockActs& a, Tensor x_out) {
  const BlockOffsets& o = table_.block();
  const int64_t C = c_.hidden_size, I = c_.intermediate_size, Q = c_.qkv_dim();
  const int H = static_cast<int>(c_.num_heads), KV = static_cast<int>(c_.num_kv_heads);
  const float eps = static_cast<float>(c_.rms_norm_eps);
  ops_.rmsnorm_forward(a.h1, a.rstd1, x_in, part(w, o.attn_norm, {C}), eps);
  ops_.linear_forward(a.qkv_raw.reshape({N_, Q}), a.h1, part(w, o.qkv_w, {Q, C}),
                      c_.qkv_bias ? part(w, o.qkv_b, {Q}) : Tensor());
  const Tensor qn = c_.qk_norm ? part(w, o.q_norm, {c_.head_dim}) : Tensor();
  const Tensor kn = c_.qk_norm ? part(w, o.k_norm, {c_.head_dim}) : Tensor();
  ops_.qk_norm_rope_forward(a.qkv.reshape(a.qkv_raw.shape), a.rstd_qk, a.qkv_raw, qn, kn, cos_, sin_, H, KV, eps);
  ops_.attention_forward(a.att.reshape({B_, T_, H, c_.head_dim}), a.lse, a.qkv, H, KV);
  ops_.linear_forward(a.x_mid, a.att, part(w, o.o_w, {C, c_.q_dim()}), Tensor());
  ops_.add_rmsnorm_forward(a.x_mid, a.h2, a.rstd2, a.x_mid, x_in, part(w, o.mlp_norm, {C}), eps);
  ops_.linear_forward(a.gate_up, a.h2, part(w, o.gate_up_w, {2 * I, C}), Tensor());
  if (x_out.data) {
    ops_.swiglu_forward(act_, a.gate_up);
    ops_.linear_forward(x_out, act_, part(w, o.down_w, {C, I}), Tensor());
    ops_.add(x_out, x_out, a.x_mid);
  }
}

void Transformer::recompute_elementwise(Tensor w, Tensor x_in, BlockActs& a) {
  // The same ops on the same inputs as block_forward: the same bits.
  const BlockOffsets& o = table_.block();
  const int64_t C = c_.hidden_size;
  const int H = static_cast<int>(c_.num_heads), KV = static_cast<int>(c_.num_kv_heads);
  const float eps = static_cast<float>(c_.rms_norm_eps);
  ops_.rmsnorm_forward(a.h1, a.rstd1, x_in, part(w, o.attn_norm, {C}), eps);
  const Tensor qn = c_.qk_norm ? part(w, o.q_norm, {c_.head_dim}) : Tensor();
  const Tensor kn = c_.qk_norm ? part(w, o.k_norm, {c_.head_dim}) : Tensor();
  ops_.qk_norm_rope_forward(a.qkv.reshape(a.qkv_raw.shape), a.rstd_qk, a.qkv_raw, qn, kn, cos_, sin_, H, KV, eps);
  ops_.rmsnorm_forward(a.h2, a.rstd2, a.x_mid, part(w, o.mlp_norm, {C}), eps);
}

void Transformer::block_backward(int64_t, Tensor w, Tensor g, bool acc, Tensor x_in, BlockActs& a) {
  // dx_ holds d loss / d x_out on entry and d loss / d x_in on return.
  const BlockOffsets& o = table_.block();
  const int64_t C = c_.hidden_size, I = c_.intermediate_size, Q = c_.qkv_dim(), hd = c_.head_dim;
  const int H = static_cast<int>(c_.num_heads), KV = static_cast<int>(c_.num_kv_heads);
  // MLP (the SwiGLU's output, not kept from the forward, comes from its backward's pass)
  ops_.linear_backward_input(d_act_, dx_, part(w, o.down_w, {C, I}), false);
  ops_.swiglu_backward(d_gate_up_, d_act_, a.gate_up, act_);
  ops_.linear_backward_weight(part(g, o.down_w, {C, I}), Tensor(), dx_, act_, acc);
  ops_.linear_backward_weight(part(g, o.gate_up_w, {2 * I, C}), Tensor(), d_gate_up_, a.h2, acc);
  ops_.linear_backward_input(dh_, d_gate_up_, part(w, o.gate_up_w, {2 * I, C}), false);
  ops_.rmsnorm_backward(dx_, part(g, o.mlp_norm, {C}), dh_, a.x_mid, part(w, o.mlp_norm, {C}), a.rstd2, true, acc);
  // attention
  ops_.linear_backward_weight(part(g, o.o_w, {C, c_.q_dim()}), Tensor(), dx_, a.att, acc);
  ops_.linear_backward_input(d_att_, dx_, part(w, o.o_w, {C, c_.q_dim()}), false);
  ops_.attention_backward(d_qkv_, d_att_.reshape({B_, T_, H, hd}), a.qkv, a.att.reshape({B_, T_, H, hd}), a.lse,
                          H, KV);
  const Tensor qn = c_.qk_norm ? part(w, o.q_norm, {hd}) : Tensor();
  const Tensor kn = c_.qk_norm ? part(w, o.k_norm, {hd}) : Tensor();
  const Tensor dqn = c_.qk_norm ? part(g, o.q_norm, {hd}) : Tensor();
  const Tensor dkn = c_.qk_norm ? part(g, o.k_norm, {hd}) : Tensor();
  ops_.qk_norm_rope_backward(d_qkv_raw_, dqn, dkn, d_qkv_.reshape(d_qkv_raw_.shape), a.qkv_raw, qn, kn, a.rstd_qk,
                             cos_, sin_, H, KV, acc);
  const Tensor d_qkv_flat = d_qkv_raw_.reshape({N_, Q});
  ops_.linear_backward_weight(part(g, o.qkv_w, {Q, C}), c_.qkv_bias ? part(g, o.qkv_b, {Q}) : Tensor(), d_qkv_flat,
                              a.h1, acc);
  ops_.linear_backward_input(dh_, d_qkv_flat, part(w, o.qkv_w, {Q, C}), false);
  ops_.rmsnorm_backward(dx_, part(g, o.attn_norm, {C}), dh_, x_in, part(w, o.attn_norm, {C}), a.rstd1, true, acc);
}

void Transformer::forward_blocks(UnitSource& src, Tensor ids) {
  ANVIL_ENSURE(ids.numel() == N_, kInternal, "transformer: ", ids.numel(), " ids for a model built for ", N_,
               " tokens");
  const int64_t C = c_.hidden_size, V = c_.vocab_size, L = c_.num_layers;
  const int embed = table_.embed_unit(), norm = table_.norm_unit();
  Tensor we = src.weights(embed);
  ops_.embedding_forward(resid_[0], ids, part(we, 0, {V, C}));
  src.release(embed);
  for (int64_t l = 0; l < L; ++l) {
    const int u = table_.block_unit(l);
    Tensor w = src.weights(u);
    src.prefetch(l + 1 < L ? table_.block_unit(l + 1) : norm);
    BlockActs& a = acts_[recompute_ == Recompute::kFull ? 0 : static_cast<size_t>(l)];
    block_forward(l, w, resid_[static_cast<size_t>(l)], a, resid_[static_cast<size_t>(l + 1)]);
    src.release(u);
  }
}

void Transformer::forward_loss(UnitSource& src, Tensor ids, Tensor targets, Tensor loss_sum) {
  ANVIL_ENSURE(targets.numel() == N_, kInternal, "forward_loss: ", targets.numel(), " targets for ", N_, " tokens");
  const int64_t C = c_.hidden_size, V = c_.vocab_size;
  const int norm = table_.norm_unit(), head = table_.lm_head_unit();
  forward_blocks(src, ids);
  Tensor wn = src.weights(norm);
  if (head != norm) src.prefetch(head);
  ops_.rmsnorm_forward(h_final_, rstd_final_, resid_[static_cast<size_t>(c_.num_layers)], part(wn, 0, {C}),
                       static_cast<float>(c_.rms_norm_eps));
  Tensor wh = src.weights(head);
  // No dh, no dw: the op computes the loss and skips both gradient GEMMs.
  ops_.cross_entropy_forward_backward(loss_sum, Tensor(), Tensor(), h_final_, part(wh, 0, {V, C}), targets, 1.0f,
                                      Tensor());
  src.release(head);
  src.release(norm);
}

void Transformer::forward_backward(UnitSource& src, Tensor ids, Tensor targets, float loss_scale, Tensor loss_sum,
                                   Tensor logits) {
  ANVIL_ENSURE(targets.numel() == N_, kInternal, "forward_backward: ", targets.numel(), " targets for ", N_,
               " tokens");
  const int64_t C = c_.hidden_size, V = c_.vocab_size, L = c_.num_layers;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  const int embed = table_.embed_unit(), norm = table_.norm_unit(), head = table_.lm_head_unit();
  forward_blocks(src, ids);
  // Final norm, output projection and loss, and their backward.
  Tensor wn = src.weights(norm);
  if (head != norm) src.prefetch(head);
  const Tensor x_last = resid_[static_cast<size_t>(L)];
  ops_.rmsnorm_forward(h_final_, rstd_final_, x_last, part(wn, 0, {C}), eps);
  if (forward_done_) forward_done_();
  Tensor wh = src.weights(head);
  // Each part of a unit has one writer per micro-batch, but the tied embedding has two: the
  // output projection's (first) and the lookup's.
  const bool head_acc = !src.overwrite_grads(head);
  ops_.cross_entropy_forward_backward(loss_sum, dh_, part(src.grads(head), 0, {V, C}), h_final_,
                                      part(wh, 0, {V, C}), targets, loss_scale, logits, head_acc);
  src.release(head);
  if (head != embed) src.grads_ready(head);
  ops_.rmsnorm_backward(dx_, part(src.grads(norm), 0, {C}), dh_, x_last, part(wn, 0, {C}), rstd_final_, false,
                        !src.overwrite_grads(norm));
  src.release(norm);
  src.grads_ready(norm);
  for (int64_t l = L - 1; l >= 0; --l) {
    const int u = table_.block_unit(l);
    Tensor w = src.weights(u);
    if (l > 0) src.prefetch(table_.block_unit(l - 1));
    BlockActs& a = acts_[recompute_ == Recompute::kFull ? 0 : static_cast<size_t>(l)];
    if (recompute_ == Recompute::kFull) block_forward(l, w, resid_[static_cast<size_t>(l)], a, Tensor());
    if (recompute_ == Recompute::kSelective) recompute_elementwise(w, resid_[static_cast<size_t>(l)], a);
    block_backward(l, w, src.grads(u), !src.overwrite_grads(u), resid_[static_cast<size_t>(l)], a);
    src.release(u);
    src.grads_ready(u);
  }
  ops_.embedding_backward(part(src.grads(embed), 0, {V, C}), ids, dx_, head == embed || !src.overwrite_grads(embed));
  src.grads_ready(embed);
}

}  // namespace anvil
