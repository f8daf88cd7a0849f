// The learning-rate schedule: see optim/schedule.h.
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

namespace anvil {

double lr_at(const ScheduleConfig& s, int64_t step, int64_t total_steps) {
  if (s.warmup_steps > 0 && step <= s.warmup_steps)
    return s.lr * static_cast<double>(step) / static_cast<double>(s.warmup_steps);
  if (s.decay == "cosine" && total_steps > s.warmup_steps) {
    const double progress =
        static_cast<double>(step - s.warmup_steps) / static_cast<double>(total_steps - s.warmup_steps);
    const double cosine = 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
    return s.lr_min + (s.lr - s.lr_min) * cosine;
  }
  return s.lr;
}

}  // namespace anvil
