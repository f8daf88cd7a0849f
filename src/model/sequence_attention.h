// Attention over whole sequences, the block's attention in training and evaluation: B
// sequences of T tokens (each one document, or documents packed in it: Documents), qk-norm
// and RoPE from the model's tables, then the ops' attention_forward, and the backward of both.
//
// Context parallel (model/context_parallel.h): each of the group's P ranks holds B sequences
// of T/P tokens (its slice); the all-to-alls around attention give qk-norm, RoPE and attention
// all T tokens of H/P and KV/P heads, and give attention's output (and, in the backward, the
// gradient of qkv) back in this rank's tokens. In the activations (model/activations.h) the
// attention section's buffers hold the heads layout.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/comm.h"
#include "model/block.h"
#include "model/context_parallel.h"
#include "ops/documents.h"

namespace anvil {

class SequenceAttention final : public BlockAttention {
 public:
  // seq_len: the whole sequence's; context_parallel: the group that shares each sequence (its
  // world; null: none), which must divide seq_len and the heads.
  SequenceAttention(const ModelConfig& c, Ops& ops, int64_t micro_batch, int64_t seq_len, Comm* context_parallel);

  int ranks() const { return cp_.size(); }
  // The model's buffers (any set): uploads the RoPE tables and hands the all-to-all its chunks.
  void set_buffers(const Activations& a);
  void set_documents(const Documents& documents) { documents_ = documents; }  // the pass's, or none

  Tensor forward(const BlockWeights& w, const Activations& a) override;
  // a[kQkvRaw] -> a[kQkv] and a[kRstdQk]: the per-head RMSNorm of q and k (where the model
  // has one), then RoPE; in the heads layout.
  void qk_norm_rope(const BlockWeights& w, const Activations& a);
  // Attention's output in this rank's tokens (rows, H*hd): a[kAtt], or under context parallel
  // a[kAtt] exchanged into the staging buffer.
  Tensor output_tokens(const Activations& a);
  // a[kDAtt] (d loss / d the output, this rank's tokens; overwritten) -> a[kDQkvRaw] (this
  // rank's tokens) and the qk-norm weights' gradients in g, added (accumulate) or written.
  void backward(const BlockWeights& w, const BlockWeights& g, bool accumulate, const Activations& a);

 private:
  Shape qkv_rows() const { return {B_ * T_, H_ + 2 * KV_, c_.head_dim}; }
  Shape qkv_seqs() const { return {B_, T_, H_ + 2 * KV_, c_.head_dim}; }
  Shape att_seqs() const { return {B_, T_, H_, c_.head_dim}; }
  Shape lse_seqs() const { return {B_, H_, T_}; }
  Shape rstd_qk_rows() const { return {B_ * T_, H_ + KV_}; }
  std::vector<int64_t> qkv_segments() const;  // the q, k and v heads' widths of a qkv row

  const ModelConfig& c_;
  Ops& ops_;
  int64_t B_, T_;  // T_: the sequence's tokens
  int H_, KV_;     // this rank's share of the heads
  ContextParallel cp_;
  Tensor rope_cos_, rope_sin_;  // (T_, hd/2) F32
  Documents documents_;
};

}  // namespace anvil
