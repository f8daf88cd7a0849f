// The transformer's forward and backward pass, written once against the op interface.
//
// One micro-batch of B sequences of T tokens: embedding -> L blocks -> final RMSNorm ->
// output projection fused with cross-entropy -> and back. Parameter gradients are
// accumulated into each unit's F32 gradient buffer, or overwrite it where the source says
// the buffer holds nothing of this step yet (UnitSource::overwrite_grads). The model never
// owns parameters: it asks a UnitSource for each unit's compute weights just before use and
// hands them back right after, and says when a unit's gradient is complete, which is where
// the parallel layer gathers shards (FSDP) or starts the gradient's all-reduce (DDP).
//
// Activations are allocated once, at construction, for the given micro-batch and
// sequence length. With Recompute::kFull only each block's input is kept; the block's
// forward runs again, into one shared set of buffers, just before its backward. With
// Recompute::kSelective every block keeps what the GEMMs and attention wrote (qkv before
// qk-norm and RoPE, attention's output, the residual sum, gate_up) and the statistics;
// the element-wise outputs (both RMSNorms', qk-norm + RoPE's) live in one shared set and
// are recomputed, by the same kernels from the same inputs (the same bits), before the
// block's backward.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/params.h"
#include "ops/ops.h"

namespace anvil {

// Activation recomputation. kAuto is a request (the fastest that fits the memory plan,
// plan/memory_plan.h), resolved to one of the others before a model is built.
enum class Recompute { kNone, kSelective, kFull, kAuto };
Recompute parse_recompute(const std::string& name);  // none | selective | full | auto
const char* recompute_name(Recompute r);

class UnitSource {
 public:
  virtual ~UnitSource() = default;
  virtual Tensor weights(int unit) = 0;    // compute dtype, the whole unit; valid until release
  virtual void release(int unit) = 0;      // the pass is done with the weights for now
  virtual Tensor grads(int unit) = 0;      // F32, the whole unit; accumulated into
  // True when the unit's gradient buffer holds nothing of this step yet (the last step's
  // values): every part's first write overwrites instead of adding. Until grads_ready.
  virtual bool overwrite_grads(int unit) { (void)unit; return false; }
  virtual void grads_ready(int unit) = 0;  // this micro-batch's contribution is complete
  // The unit whose weights will be asked for next: a sharded source starts gathering it so
  // that the transfer overlaps the current unit's compute.
  virtual void prefetch(int unit) { (void)unit; }
};

// Activation sizes, for the memory plan (sys/) and the allocation below: one formula.
struct ActivationLayout {
  int64_t saved_per_block = 0;        // bytes kept per block between forward and backward
  int64_t elementwise_per_block = 0;  // the part of them kSelective recomputes
  int64_t resident = 0;               // block inputs, scratch, gradients of activations, tables
  int64_t total(int64_t num_layers, Recompute r) const;
};
ActivationLayout activation_layout(const ModelConfig& c, int64_t micro_batch, int64_t seq_len,
                                   DType compute_dtype);

class Transformer {
 public:
  Transformer(const ModelConfig& config, const ParamTable& table, Ops& ops, int64_t micro_batch,
              int64_t seq_len, Recompute recompute);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  // ids, targets: (B*T) I32 on the ops' device; targets[i] is the token that position i
  // predicts (-100: none). loss_sum (1) F32 += the summed token losses; gradients are of
  // loss_sum * loss_scale. logits (B*T, V) F32, when given, receives the logits.
  void forward_backward(UnitSource& source, Tensor ids, Tensor targets, float loss_scale, Tensor loss_sum,
                        Tensor logits = Tensor());

  // The forward and the loss only (evaluation): loss_sum (1) F32 += the summed token losses.
  // Reads weights from `source` as forward_backward does and touches no gradient.
  void forward_loss(UnitSource& source, Tensor ids, Tensor targets, Tensor loss_sum);

  // Called between the forward (through the final norm) and the loss and backward: the
  // step benchmark's phase clock.
  void set_forward_done_hook(std::function<void()> hook) { forward_done_ = std::move(hook); }

  int64_t micro_batch() const { return B_; }
  int64_t seq_len() const { return T_; }
  int64_t activation_bytes() const { return allocated_bytes_; }

 private:
  struct BlockActs {
    Tensor h1, rstd1, qkv_raw, qkv, rstd_qk, att, lse, x_mid, h2, rstd2, gate_up;
  };
  Tensor make(Shape shape, DType dtype);
  // Embedding and blocks into resid_[0..L].
  void forward_blocks(UnitSource& source, Tensor ids);
  void block_forward(int64_t layer, Tensor weights, Tensor x_in, BlockActs& a, Tensor x_out);
  // accumulate: add to the unit's gradients (false: overwrite them, UnitSource::overwrite_grads)
  void block_backward(int64_t layer, Tensor weights, Tensor grads, bool accumulate, Tensor x_in, BlockActs& a);
  void recompute_elementwise(Tensor weights, Tensor x_in, BlockActs& a);  // Recompute::kSelective

  const ModelConfig& c_;
  const ParamTable& table_;
  Ops& ops_;
  int64_t B_, T_, N_;
  Recompute recompute_;
  DType cd_;
  std::vector<void*> buffers_;
  int64_t allocated_bytes_ = 0;
  std::function<void()> forward_done_;

  std::vector<Tensor> resid_;  // x_0 .. x_L, (N, C)
  std::vector<BlockActs> acts_;
  Tensor cos_, sin_;                                     // (T, hd/2) F32
  Tensor act_, d_act_, d_gate_up_, d_att_, d_qkv_, d_qkv_raw_, dx_, dh_, h_final_, rstd_final_;
};

}  // namespace anvil
