// The recomputation before a block's backward (model/recompute.h).
#include "model/recompute.h"

#include "core/error.h"

namespace anvil {

RecomputePolicy::RecomputePolicy(Recompute r) : mode_(r) {
  ANVIL_ENSURE(r != Recompute::kAuto, kInternal, "recompute auto reached the model unresolved");
}

size_t RecomputePolicy::set(int64_t layer) const {
  return mode_ == Recompute::kFull ? 0 : static_cast<size_t>(layer);
}

void RecomputePolicy::before_backward(Block& block, const BlockWeights& w, SequenceAttention& attention,
                                      const Activations& a, Tensor x_in) const {
  if (mode_ == Recompute::kFull) block.forward(w, attention, a, x_in, Tensor());
  if (mode_ == Recompute::kSelective) block.recompute_elementwise(w, attention, a, x_in);
}

}  // namespace anvil
