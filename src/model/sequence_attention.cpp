// Attention over whole sequences (model/sequence_attention.h).
#include "model/sequence_attention.h"

#include "core/error.h"

namespace anvil {

SequenceAttention::SequenceAttention(const ModelConfig& c, Ops& ops, int64_t micro_batch, int64_t seq_len,
                                     Comm* context_parallel)
    : c_(c), ops_(ops), B_(micro_batch), T_(seq_len), H_(static_cast<int>(c.num_heads)),
      KV_(static_cast<int>(c.num_kv_heads)),
      cp_(context_parallel, context_parallel ? context_parallel->world() : 1) {
  const int P = cp_.size();
  ANVIL_ENSURE(T_ % P == 0 && H_ % P == 0 && KV_ % P == 0, kInternal, "context parallel ", P,
               " does not divide the sequence (", T_, ") and the heads (", H_, ", ", KV_, ")");
  H_ /= P, KV_ /= P;
}

// RoPE tables as transformers computes them (rope_row): fp32 angles, fp32 cos/sin.
void SequenceAttention::set_buffers(const Activations& a) {
  using enum Activation;
  cp_.set_buffers(a[kCpSend], a[kCpRecv]);
  rope_cos_ = a[kRopeCos], rope_sin_ = a[kRopeSin];
  const std::vector<float> inv = rope_inv_freq(c_);
  const int64_t half = c_.head_dim / 2;
  std::vector<float> cs(static_cast<size_t>(T_ * half)), sn(cs.size());
  for (int64_t t = 0; t < T_; ++t)
    rope_row(c_, inv, t, &cs[static_cast<size_t>(t * half)], &sn[static_cast<size_t>(t * half)]);
  ops_.runtime().upload(rope_cos_, cs.data());
  ops_.runtime().upload(rope_sin_, sn.data());
}

std::vector<int64_t> SequenceAttention::qkv_segments() const {
  return {c_.q_dim(), c_.num_kv_heads * c_.head_dim, c_.num_kv_heads * c_.head_dim};
}

Tensor SequenceAttention::forward(const BlockWeights& w, const Activations& a) {
  using enum Activation;
  if (cp_.size() > 1) cp_.to_heads(ops_, a[kQkvRaw], a[kQkvRaw], B_, qkv_segments());
  qk_norm_rope(w, a);
  ops_.attention_forward(a[kAtt].reshape(att_seqs()), a[kLse].reshape(lse_seqs()), a[kQkv].reshape(qkv_seqs()), H_,
                         KV_, documents_);
  return output_tokens(a);
}

void SequenceAttention::qk_norm_rope(const BlockWeights& w, const Activations& a) {
  using enum Activation;
  ops_.qk_norm_rope_forward(a[kQkv].reshape(qkv_rows()), a[kRstdQk].reshape(rstd_qk_rows()),
                            a[kQkvRaw].reshape(qkv_rows()), w.q_norm, w.k_norm, rope_cos_, rope_sin_, H_, KV_,
                            static_cast<float>(c_.rms_norm_eps), documents_.positions);
}

Tensor SequenceAttention::output_tokens(const Activations& a) {
  const Tensor& att = a[Activation::kAtt];
  if (cp_.size() == 1) return att;
  const Tensor tokens = cp_.staging({att.numel() / c_.q_dim(), c_.q_dim()});
  cp_.to_tokens(ops_, tokens, att, B_, {c_.q_dim()});
  return tokens;
}

void SequenceAttention::backward(const BlockWeights& w, const BlockWeights& g, bool acc, const Activations& a) {
  using enum Activation;
  if (cp_.size() > 1) cp_.to_heads(ops_, a[kDAtt], a[kDAtt], B_, {c_.q_dim()});
  ops_.attention_backward(a[kDQkv].reshape(qkv_seqs()), a[kDAtt].reshape(att_seqs()), a[kQkv].reshape(qkv_seqs()),
                          a[kAtt].reshape(att_seqs()), a[kLse].reshape(lse_seqs()), H_, KV_, documents_);
  ops_.qk_norm_rope_backward(a[kDQkvRaw].reshape(qkv_rows()), g.q_norm, g.k_norm, a[kDQkv].reshape(qkv_rows()),
                             a[kQkvRaw].reshape(qkv_rows()), w.q_norm, w.k_norm, a[kRstdQk].reshape(rstd_qk_rows()),
                             rope_cos_, rope_sin_, H_, KV_, acc, documents_.positions);
  if (cp_.size() > 1) cp_.to_tokens(ops_, a[kDQkvRaw], a[kDQkvRaw], B_, qkv_segments());
}

}  // namespace anvil
