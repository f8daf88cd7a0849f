// The transformer's pass (model/transformer.h): the activations allocated from their table,
// the blocks' forward, recomputation and backward, and the head's loss and its backward.
#include "model/transformer.h"

#include <algorithm>
#include <cmath>

#include "core/env.h"
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

Transformer::Transformer(const ModelConfig& config, const ParamTable& table, Ops& ops, int64_t micro_batch,
                         int64_t seq_len, Recompute recompute, int64_t mlp_tile, DType grad_dtype,
                         Comm* context_parallel, Fp8Recipe fp8, bool offload)
    : c_(config), table_(table), ops_(ops), B_(micro_batch), T_(seq_len), N_(micro_batch * seq_len), Ta_(seq_len),
      Ha_(static_cast<int>(config.num_heads)), KVa_(static_cast<int>(config.num_kv_heads)),
      cp_(context_parallel, context_parallel ? context_parallel->world() : 1), recompute_(recompute), fp8_(fp8),
      compute_dtype_(ops.compute_dtype()), offload_(offload) {
  ANVIL_ENSURE(B_ >= 1 && T_ >= 2, kInvalidInput, "micro-batch ", B_, " x sequence length ", T_,
               ": need at least one sequence of two tokens");
  ANVIL_ENSURE(recompute_ != Recompute::kAuto, kInternal, "recompute auto reached the model unresolved");
  const int P = cp_.size();
  ANVIL_ENSURE(T_ % P == 0 && Ha_ % P == 0 && KVa_ % P == 0, kInternal, "context parallel ", P,
               " does not divide the sequence (", T_, ") and the heads (", Ha_, ", ", KVa_, ")");
  T_ /= P, N_ /= P, Ha_ /= P, KVa_ /= P;
  resid_.resize(static_cast<size_t>(c_.num_layers + 1));
  host_resid_.resize(resid_.size());
  acts_.resize(static_cast<size_t>(block_sets(c_, recompute_)));
  mlp_tile_ = effective_mlp_tile(c_, N_, compute_dtype_, mlp_tile);
  for (const ActivationBuffer& b :
       activation_buffers(c_, B_, Ta_, recompute_, compute_dtype_, mlp_tile_, grad_dtype, P, offload_))
    allocate(b);
  for (int64_t l = 0; l <= c_.num_layers; ++l)
    if (offloaded(l)) resid_[static_cast<size_t>(l)] = ring_[static_cast<size_t>(ring_slot(l))];
  cp_.set_buffers(cp_send_, cp_recv_);
  upload_rope_tables();
  if (fp8_ == Fp8Recipe::kTensorwise && env_int("ANVIL_FP8_AMAX_REUSE", 1) != 0) {
    fp8_amax_ = Tensor(nullptr, DType::kF32, {c_.num_layers, kBlockLinears, 2}, ops_.runtime().device());
    fp8_amax_.data = ops_.runtime().alloc(fp8_amax_.bytes());
    buffers_.push_back(fp8_amax_.data);
  }
}

Transformer::~Transformer() {
  try {
    if (offload_) ops_.runtime().synchronize();  // no copy in flight to or from the buffers
  } catch (const Error&) {  // a failed device: the op that met it has thrown already
  }
  for (void* p : buffers_) ops_.runtime().release(p);
  for (void* p : host_resid_) ops_.runtime().release_host(p);
}

void Transformer::allocate(const ActivationBuffer& b) {
  Tensor t(nullptr, b.dtype, b.shape, ops_.runtime().device());
  if (b.host) {
    host_resid_[static_cast<size_t>(b.index)] = ops_.runtime().alloc_host(static_cast<size_t>(t.bytes()));
    return;
  }
  t.data = ops_.runtime().alloc(t.bytes());
  buffers_.push_back(t.data);
  if (b.what == Activation::kResidual) {
    resid_[static_cast<size_t>(b.index)] = t;
  } else if (b.what == Activation::kResidualRing) {
    ring_.push_back(t);
  } else if (!is_block_activation(b.what)) {
    one_of_each(b.what) = t;
  } else {
    for (size_t set = 0; set < acts_.size(); ++set)
      if (b.index == kEveryBlockSet || b.index == static_cast<int64_t>(set)) acts_[set].of(b.what) = t;
  }
}

Tensor& Transformer::BlockActs::of(Activation what) {
  switch (what) {
    case Activation::kH1: return h1;
    case Activation::kRstd1: return rstd1;
    case Activation::kQkvRaw: return qkv_raw;
    case Activation::kQkv: return qkv;
    case Activation::kRstdQk: return rstd_qk;
    case Activation::kAtt: return att;
    case Activation::kLse: return lse;
    case Activation::kXMid: return x_mid;
    case Activation::kH2: return h2;
    case Activation::kRstd2: return rstd2;
    case Activation::kGateUp: return gate_up;
    default: raise(ErrorKind::kInternal, "not a block activation");
  }
}

Tensor& Transformer::one_of_each(Activation what) {
  switch (what) {
    case Activation::kAct: return act_;
    case Activation::kDAct: return d_act_;
    case Activation::kDGateUp: return d_gate_up_;
    case Activation::kGateUpTile: return gate_up_tile_;
    case Activation::kMlpDw: return mlp_dw_;
    case Activation::kDAtt: return d_att_;
    case Activation::kDQkv: return d_qkv_;
    case Activation::kDQkvRaw: return d_qkv_raw_;
    case Activation::kDx: return dx_;
    case Activation::kDh: return dh_;
    case Activation::kHFinal: return h_final_;
    case Activation::kRstdFinal: return rstd_final_;
    case Activation::kRopeCos: return rope_cos_;
    case Activation::kRopeSin: return rope_sin_;
    case Activation::kCpSend: return cp_send_;
    case Activation::kCpRecv: return cp_recv_;
    default: raise(ErrorKind::kInternal, "not an activation the model has one of");
  }
}

// RoPE tables as transformers computes them (rope_row): fp32 angles, fp32 cos/sin.
void Transformer::upload_rope_tables() {
  const std::vector<float> inv = rope_inv_freq(c_);
  const int64_t half = c_.head_dim / 2;
  std::vector<float> cs(static_cast<size_t>(Ta_ * half)), sn(cs.size());
  for (int64_t t = 0; t < Ta_; ++t)
    rope_row(c_, inv, t, &cs[static_cast<size_t>(t * half)], &sn[static_cast<size_t>(t * half)]);
  ops_.runtime().upload(rope_cos_, cs.data());
  ops_.runtime().upload(rope_sin_, sn.data());
}

std::vector<int64_t> Transformer::qkv_segments() const {
  return {c_.q_dim(), c_.num_kv_heads * c_.head_dim, c_.num_kv_heads * c_.head_dim};
}

Tensor Transformer::att_tokens(BlockActs& a) {
  if (cp_.size() == 1) return a.att;
  const Tensor tokens = cp_.staging({N_, c_.q_dim()});
  cp_.to_tokens(ops_, tokens, a.att, B_, {c_.q_dim()});
  return tokens;
}

// qkv_raw -> qkv (attention's layout): the per-head RMSNorm of q and k (where the model has
// one), then RoPE.
void Transformer::qk_norm_rope_forward(Tensor w, BlockActs& a) {
  const BlockOffsets& o = table_.block();
  const Tensor qn = c_.qk_norm ? part(w, o.q_norm, {c_.head_dim}) : Tensor();
  const Tensor kn = c_.qk_norm ? part(w, o.k_norm, {c_.head_dim}) : Tensor();
  ops_.qk_norm_rope_forward(a.qkv.reshape(qkv_rows()), a.rstd_qk.reshape({B_ * Ta_, Ha_ + KVa_}),
                            a.qkv_raw.reshape(qkv_rows()), qn, kn, rope_cos_, rope_sin_, Ha_, KVa_,
                            static_cast<float>(c_.rms_norm_eps), documents_.positions);
}

void Transformer::block_forward(Tensor w, Tensor x_in, BlockActs& a, Tensor x_out) {
  const BlockOffsets& o = table_.block();
  const int64_t C = c_.hidden_size, I = c_.intermediate_size, Q = c_.qkv_dim();
  const float eps = static_cast<float>(c_.rms_norm_eps);
  const bool untiled = mlp_tile_ == N_;
  ops_.rmsnorm_forward(a.h1, a.rstd1, x_in, part(w, o.attn_norm, {C}), eps, x_amax(kQkvLinear));
  block_linear(kQkvLinear, a.qkv_raw.reshape({N_, Q}), a.h1, part(w, o.qkv_w, {Q, C}),
               c_.qkv_bias ? part(w, o.qkv_b, {Q}) : Tensor(), true, false);
  if (cp_.size() > 1) cp_.to_heads(ops_, a.qkv_raw, a.qkv_raw, B_, qkv_segments());
  qk_norm_rope_forward(w, a);
  ops_.attention_forward(a.att.reshape(att_seqs()), a.lse.reshape({B_, Ha_, Ta_}), a.qkv.reshape(qkv_seqs()), Ha_,
                         KVa_, documents_);
  block_linear(kOLinear, a.x_mid, att_tokens(a), part(w, o.o_w, {C, c_.q_dim()}), Tensor(), false, false);
  ops_.add_rmsnorm_forward(a.x_mid, a.h2, a.rstd2, a.x_mid, x_in, part(w, o.mlp_norm, {C}), eps,
                           x_amax(kGateUpLinear, untiled));
  if (untiled) block_linear(kGateUpLinear, a.gate_up, a.h2, part(w, o.gate_up_w, {2 * I, C}), Tensor(), true, false);
  if (x_out.data) {
    mlp_forward(w, a, x_out);
    ops_.add(x_out, x_out, a.x_mid);
  }
}

void Transformer::mlp_forward(Tensor w, BlockActs& a, Tensor x_out) {
  const BlockOffsets& o = table_.block();
  const int64_t C = c_.hidden_size, I = c_.intermediate_size;
  const Tensor w_gate_up = part(w, o.gate_up_w, {2 * I, C}), w_down = part(w, o.down_w, {C, I});
  if (mlp_tile_ == N_) {  // gate_up: block_forward's, kept for the backward
    ops_.swiglu_forward(act_, a.gate_up, x_amax(kDownLinear));
    block_linear(kDownLinear, x_out, act_, w_down, Tensor(), true, false);
    return;
  }
  for (int64_t r0 = 0; r0 < N_; r0 += mlp_tile_) {
    const int64_t r1 = std::min(N_, r0 + mlp_tile_), rows = r1 - r0;
    const Tensor gate_up = gate_up_tile_.slice_rows(0, rows), act = act_.slice_rows(0, rows);
    block_linear(kGateUpLinear, gate_up, a.h2.slice_rows(r0, r1), w_gate_up, Tensor(), false, r0 > 0);
    ops_.swiglu_forward(act, gate_up);
    block_linear(kDownLinear, x_out.slice_rows(r0, r1), act, w_down, Tensor(), false, r0 > 0);
  }
}

void Transformer::mlp_backward(Tensor w, Tensor g, bool acc, BlockActs& a) {
  if (mlp_tile_ < N_) return mlp_backward_tiled(w, g, acc, a);
  // The SwiGLU's output, not kept from the forward, comes from its backward's pass.
  const BlockOffsets& o = table_.block();
  const int64_t C = c_.hidden_size, I = c_.intermediate_size;
  block_linear_dx(kDownLinear, d_act_, dx_, part(w, o.down_w, {C, I}));
  ops_.swiglu_backward(d_gate_up_, d_act_, a.gate_up, act_);
  block_linear_dw(kDownLinear, part(g, o.down_w, {C, I}), Tensor(), dx_, act_, acc, true);
  block_linear_backward(kGateUpLinear, dh_, part(g, o.gate_up_w, {2 * I, C}), Tensor(), d_gate_up_, a.h2,
                        part(w, o.gate_up_w, {2 * I, C}), acc);
}

// Tile by tile the untiled ops on the tile's rows, gate_up recomputed first. The weight
// gradients of the tiles add up in the gradient (the first tile's write overwrites it when
// the step's first write does), or, for bf16 gradients, in mlp_dw_, rounded once at the end.
void Transformer::mlp_backward_tiled(Tensor w, Tensor g, bool acc, BlockActs& a) {
  const BlockOffsets& o = table_.block();
  const int64_t C = c_.hidden_size, I = c_.intermediate_size;
  const Tensor w_gate_up = part(w, o.gate_up_w, {2 * I, C}), w_down = part(w, o.down_w, {C, I});
  const bool f32 = g.dtype == DType::kF32;
  ANVIL_ENSURE(f32 || (mlp_dw_.data && !acc), kInternal, "tiled MLP: ", dtype_name(g.dtype),
               " gradients need the F32 sum of the tiles (mlp_dw) and a first write");
  const Tensor dw_down = f32 ? part(g, o.down_w, {C, I}) : part(mlp_dw_, 0, {C, I});
  const Tensor dw_gate_up = f32 ? part(g, o.gate_up_w, {2 * I, C}) : part(mlp_dw_, C * I, {2 * I, C});
  for (int64_t r0 = 0; r0 < N_; r0 += mlp_tile_) {
    const int64_t r1 = std::min(N_, r0 + mlp_tile_), rows = r1 - r0;
    const Tensor gate_up = gate_up_tile_.slice_rows(0, rows), act = act_.slice_rows(0, rows);
    const Tensor d_act = d_act_.slice_rows(0, rows), d_gate_up = d_gate_up_.slice_rows(0, rows);
    const Tensor h2 = a.h2.slice_rows(r0, r1), dy = dx_.slice_rows(r0, r1);
    const bool tile_acc = r0 > 0 || acc;
    block_linear(kGateUpLinear, gate_up, h2, w_gate_up, Tensor(), false, true);
    block_linear_dx(kDownLinear, d_act, dy, w_down);
    ops_.swiglu_backward(d_gate_up, d_act, gate_up, act);
    block_linear_dw(kDownLinear, dw_down, Tensor(), dy, act, tile_acc, false);
    block_linear_dw(kGateUpLinear, dw_gate_up, Tensor(), d_gate_up, h2, tile_acc, false);
    block_linear_dx(kGateUpLinear, dh_.slice_rows(r0, r1), d_gate_up, w_gate_up);
  }
  if (f32) return;
  ops_.runtime().convert(part(g, o.down_w, {C, I}), dw_down);
  ops_.runtime().convert(part(g, o.gate_up_w, {2 * I, C}), dw_gate_up);
}

Fp8Amax Transformer::fp8_amax(Linear linear, bool x_known, bool w_known) const {
  if (!fp8_amax_.data) return {};
  return {part(fp8_amax_, (layer_ * kBlockLinears + linear) * 2, {2}), x_known, w_known};
}

Tensor Transformer::x_amax(Linear linear, bool when) const {
  if (!fp8_amax_.data || !when) return Tensor();
  return part(fp8_amax_, (layer_ * kBlockLinears + linear) * 2, {1});
}

void Transformer::block_linear(Linear linear, Tensor y, Tensor x, Tensor w, Tensor bias, bool x_known,
                               bool w_known) {
  if (fp8_ == Fp8Recipe::kOff)
    ops_.linear_forward(y, x, w, bias);
  else
    ops_.linear_fp8_forward(y, x, w, bias, fp8_, fp8_amax(linear, x_known, w_known));
}

void Transformer::block_linear_dx(Linear linear, Tensor dx, Tensor dy, Tensor w) {
  if (fp8_ == Fp8Recipe::kOff)
    ops_.linear_backward_input(dx, dy, w, false);
  else
    ops_.linear_fp8_backward_input(dx, dy, w, fp8_, false, fp8_amax(linear, false, true));
}

void Transformer::block_linear_dw(Linear linear, Tensor dw, Tensor dbias, Tensor dy, Tensor x, bool accumulate,
                                  bool x_known) {
  if (fp8_ == Fp8Recipe::kOff)
    ops_.linear_backward_weight(dw, dbias, dy, x, accumulate);
  else
    ops_.linear_fp8_backward_weight(dw, dbias, dy, x, fp8_, accumulate, fp8_amax(linear, x_known, false));
}

void Transformer::block_linear_backward(Linear linear, Tensor dx, Tensor dw, Tensor dbias, Tensor dy, Tensor x,
                                        Tensor w, bool accumulate) {
  if (fp8_ == Fp8Recipe::kOff) {
    ops_.linear_backward_weight(dw, dbias, dy, x, accumulate);
    ops_.linear_backward_input(dx, dy, w, false);
  } else {
    ops_.linear_fp8_backward(dx, dw, dbias, dy, x, w, fp8_, accumulate, fp8_amax(linear, true, true));
  }
}

void Transformer::recompute_elementwise(Tensor w, Tensor x_in, BlockActs& a) {
  // The same ops on the same inputs as block_forward: the same bits (the norms' amax slots
  // still hold the forward's).
  const BlockOffsets& o = table_.block();
  const int64_t C = c_.hidden_size;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  ops_.rmsnorm_forward(a.h1, a.rstd1, x_in, part(w, o.attn_norm, {C}), eps);
  qk_norm_rope_forward(w, a);
  ops_.rmsnorm_forward(a.h2, a.rstd2, a.x_mid, part(w, o.mlp_norm, {C}), eps);
}

void Transformer::block_backward(Tensor w, Tensor g, bool acc, Tensor x_in, BlockActs& a) {
  // dx_ holds d loss / d x_out on entry and d loss / d x_in on return.
  const BlockOffsets& o = table_.block();
  const int64_t C = c_.hidden_size, Q = c_.qkv_dim(), hd = c_.head_dim;
  mlp_backward(w, g, acc, a);
  ops_.rmsnorm_backward(dx_, part(g, o.mlp_norm, {C}), dh_, a.x_mid, part(w, o.mlp_norm, {C}), a.rstd2, true, acc);
  // attention (context parallel: its output exchanged again, its input's gradient exchanged back)
  block_linear_backward(kOLinear, d_att_, part(g, o.o_w, {C, c_.q_dim()}), Tensor(), dx_, att_tokens(a),
                        part(w, o.o_w, {C, c_.q_dim()}), acc);
  if (cp_.size() > 1) cp_.to_heads(ops_, d_att_, d_att_, B_, {c_.q_dim()});
  ops_.attention_backward(d_qkv_.reshape(qkv_seqs()), d_att_.reshape(att_seqs()), a.qkv.reshape(qkv_seqs()),
                          a.att.reshape(att_seqs()), a.lse.reshape({B_, Ha_, Ta_}), Ha_, KVa_, documents_);
  const Tensor qn = c_.qk_norm ? part(w, o.q_norm, {hd}) : Tensor();
  const Tensor kn = c_.qk_norm ? part(w, o.k_norm, {hd}) : Tensor();
  const Tensor dqn = c_.qk_norm ? part(g, o.q_norm, {hd}) : Tensor();
  const Tensor dkn = c_.qk_norm ? part(g, o.k_norm, {hd}) : Tensor();
  ops_.qk_norm_rope_backward(d_qkv_raw_.reshape(qkv_rows()), dqn, dkn, d_qkv_.reshape(qkv_rows()),
                             a.qkv_raw.reshape(qkv_rows()), qn, kn, a.rstd_qk.reshape({B_ * Ta_, Ha_ + KVa_}),
                             rope_cos_, rope_sin_, Ha_, KVa_, acc, documents_.positions);
  if (cp_.size() > 1) cp_.to_tokens(ops_, d_qkv_raw_, d_qkv_raw_, B_, qkv_segments());
  const Tensor d_qkv_flat = d_qkv_raw_.reshape({N_, Q});
  block_linear_backward(kQkvLinear, dh_, part(g, o.qkv_w, {Q, C}), c_.qkv_bias ? part(g, o.qkv_b, {Q}) : Tensor(),
                        d_qkv_flat, a.h1, part(w, o.qkv_w, {Q, C}), acc);
  ops_.rmsnorm_backward(dx_, part(g, o.attn_norm, {C}), dh_, x_in, part(w, o.attn_norm, {C}), a.rstd1, true, acc);
}

void Transformer::forward_blocks(UnitSource& src, Tensor ids, const Documents& documents) {
  ANVIL_ENSURE(ids.numel() == N_, kInternal, "transformer: ", ids.numel(), " ids for a model built for ", N_,
               " tokens");
  const Tensor& positions = documents.positions;
  ANVIL_ENSURE(!positions.data || positions.numel() == B_ * Ta_, kInternal, "transformer: ", positions.numel(),
               " positions for ", B_ * Ta_, " tokens");
  documents_ = documents;
  const int64_t C = c_.hidden_size, V = c_.vocab_size, L = c_.num_layers;
  const int embed = table_.embed_unit(), norm = table_.norm_unit();
  Tensor we = src.weights(embed);
  ops_.embedding_forward(resid_[0], ids, part(we, 0, {V, C}));
  src.release(embed);
  for (int64_t l = 0; l < L; ++l) {
    const int u = table_.block_unit(l);
    Tensor w = src.weights(u);
    src.prefetch(l + 1 < L ? table_.block_unit(l + 1) : norm);
    before_write(l + 1);
    layer_ = l;
    block_forward(w, resid_[static_cast<size_t>(l)], block_acts(l), resid_[static_cast<size_t>(l + 1)]);
    after_write(l + 1);
    src.release(u);
  }
}

void Transformer::before_write(int64_t l) {
  if (offloaded(l)) ops_.runtime().wait_copy(2 * ring_slot(l));
}

void Transformer::after_write(int64_t l) {
  if (offloaded(l)) ops_.runtime().copy_to_host(host_resid_[static_cast<size_t>(l)], resid_[static_cast<size_t>(l)],
                                      2 * ring_slot(l));
}

// x_l's ring slot was overwritten in the forward by x_{l+ring} where that is offloaded too;
// its last reader, that block's backward, is enqueued by now.
void Transformer::prefetch_residual(int64_t l) {
  if (offloaded(l) && offloaded(l + static_cast<int64_t>(ring_.size())))
    ops_.runtime().copy_to_device(resid_[static_cast<size_t>(l)], host_resid_[static_cast<size_t>(l)], 2 * ring_slot(l) + 1);
}

void Transformer::before_read(int64_t l) {
  if (offloaded(l) && offloaded(l + static_cast<int64_t>(ring_.size()))) ops_.runtime().wait_copy(2 * ring_slot(l) + 1);
}

void Transformer::forward_loss(UnitSource& src, Tensor ids, Tensor targets, Tensor loss_sum,
                               const Documents& documents) {
  ANVIL_ENSURE(targets.numel() == N_, kInternal, "forward_loss: ", targets.numel(), " targets for ", N_, " tokens");
  const int64_t C = c_.hidden_size, V = c_.vocab_size;
  const int norm = table_.norm_unit(), head = table_.lm_head_unit();
  forward_blocks(src, ids, documents);
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

Transformer::BlockActs& Transformer::block_acts(int64_t layer) {
  return acts_[recompute_ == Recompute::kFull ? 0 : static_cast<size_t>(layer)];
}

void Transformer::head_forward_backward(UnitSource& src, Tensor targets, float loss_scale, Tensor loss_sum,
                                        Tensor logits) {
  const int64_t C = c_.hidden_size, V = c_.vocab_size;
  const int embed = table_.embed_unit(), norm = table_.norm_unit(), head = table_.lm_head_unit();
  Tensor wn = src.weights(norm);
  if (head != norm) src.prefetch(head);
  const Tensor x_last = resid_[static_cast<size_t>(c_.num_layers)];
  ops_.rmsnorm_forward(h_final_, rstd_final_, x_last, part(wn, 0, {C}), static_cast<float>(c_.rms_norm_eps));
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
}

void Transformer::backward_blocks(UnitSource& src) {
  for (int64_t l = c_.num_layers - 1; l >= 0; --l) {
    const int u = table_.block_unit(l);
    Tensor w = src.weights(u);
    if (l > 0) src.prefetch(table_.block_unit(l - 1));
    prefetch_residual(l - 1);
    before_read(l);
    BlockActs& a = block_acts(l);
    layer_ = l;
    if (recompute_ == Recompute::kFull) block_forward(w, resid_[static_cast<size_t>(l)], a, Tensor());
    if (recompute_ == Recompute::kSelective) recompute_elementwise(w, resid_[static_cast<size_t>(l)], a);
    block_backward(w, src.grads(u), !src.overwrite_grads(u), resid_[static_cast<size_t>(l)], a);
    src.release(u);
    src.grads_ready(u);
  }
}

void Transformer::forward_backward(UnitSource& src, Tensor ids, Tensor targets, float loss_scale, Tensor loss_sum,
                                   Tensor logits, const Documents& documents) {
  ANVIL_ENSURE(targets.numel() == N_, kInternal, "forward_backward: ", targets.numel(), " targets for ", N_,
               " tokens");
  const int64_t C = c_.hidden_size, V = c_.vocab_size;
  const int embed = table_.embed_unit(), head = table_.lm_head_unit();
  forward_blocks(src, ids, documents);
  head_forward_backward(src, targets, loss_scale, loss_sum, logits);
  backward_blocks(src);
  ops_.embedding_backward(part(src.grads(embed), 0, {V, C}), ids, dx_, head == embed || !src.overwrite_grads(embed));
  src.grads_ready(embed);
}

}  // namespace anvil
