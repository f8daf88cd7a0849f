// Activation recomputation (model/activations.h's Recompute) as the block loop applies it.
// With Recompute::kFull only each block's input is kept; the block's forward runs again, into
// one shared set of buffers, just before its backward. With Recompute::kSelective every block
// keeps what the GEMMs and attention wrote (qkv before qk-norm and RoPE, attention's output,
// the residual sum, gate_up) and the statistics; the element-wise outputs (both RMSNorms',
// qk-norm + RoPE's) live in one shared set and are recomputed, by the same kernels from the
// same inputs (the same bits), before the block's backward.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/block.h"
#include "model/sequence_attention.h"

namespace anvil {

class RecomputePolicy {
 public:
  explicit RecomputePolicy(Recompute r);

  Recompute mode() const { return mode_; }
  size_t set(int64_t layer) const;  // the set of block buffers a block's forward writes and its backward reads
  // Before a block's backward: what its policy dropped in the forward, again.
  void before_backward(Block& block, const BlockWeights& w, SequenceAttention& attention, const Activations& a,
                       Tensor x_in) const;

 private:
  Recompute mode_;
};

}  // namespace anvil
