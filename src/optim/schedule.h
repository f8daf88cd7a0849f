// The learning-rate schedule (linear warm-up, then constant or a cosine decay to a floor)
// and the optimizer's section of the run's config: AdamW's hyper-parameters beside it.
//
// The cosine decays from the peak lr after warm-up to lr_min at the last step:
// lr_min + (lr - lr_min) * 0.5 * (1 + cos(pi * progress)). With lr_min 0 it computes the
// same doubles as lr * 0.5 * (1 + cos(pi * progress)).
#pragma once

#include <cstdint>
#include <string>

#include "optim/adamw.h"

namespace anvil {

struct ScheduleConfig {
  double lr = 1e-5;                // the peak learning rate (--lr)
  int64_t warmup_steps = 0;        // linear warm-up from 0 (--warmup)
  std::string decay = "constant";  // after warm-up: constant | cosine (--schedule)
  double lr_min = 0.0;             // cosine: the rate reached at the last step (--lr-min)
  bool operator==(const ScheduleConfig&) const = default;
};

// The optimizer section: AdamW and clipping, and the schedule of its learning rate.
struct OptimSection {
  OptimizerConfig adamw;
  ScheduleConfig schedule;
  bool operator==(const OptimSection&) const = default;
};

// The learning rate of 1-based step `step` of `total_steps`.
double lr_at(const ScheduleConfig& s, int64_t step, int64_t total_steps);

}  // namespace anvil
