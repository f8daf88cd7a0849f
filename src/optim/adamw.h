// AdamW over flat units and global-norm clipping (the learning-rate schedule: optim/schedule.h).
//
// Numerics follow torch.optim.AdamW and torch.nn.utils.clip_grad_norm_: the pre-clip norm
// is the L2 norm over every gradient element (across shards: the caller sums the squares
// over ranks); the clipping coefficient min(1, max_norm / (norm + 1e-6)) multiplies each
// gradient as AdamW reads it, which is what clip_grad_norm_'s in-place scaling amounts to.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/ops.h"

namespace anvil {

// AdamW's hyper-parameters and clipping (the learning rate comes from the schedule).
struct OptimizerConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  double max_grad_norm = 1.0;  // <= 0: no clipping
  bool operator==(const OptimizerConfig&) const = default;
};

// Sum of squares of every gradient buffer, as a double on the host (one device sync).
double grad_sum_squares(Ops& ops, const std::vector<Tensor>& grads, Tensor scratch);

// min(1, max_norm / (norm + 1e-6)); 1 when clipping is off.
float clip_coefficient(double norm, double max_norm);

// The hyper-parameters of 1-based step `step` at learning rate lr, in the ops' form.
AdamWHyper adamw_hyper(const OptimizerConfig& c, int64_t step, double lr);

}  // namespace anvil
