#include "optim/adamw.h"

#include <cmath>

#include "core/error.h"

namespace anvil {

double grad_sum_squares(Ops& ops, const std::vector<Tensor>& grads, Tensor scratch) {
  ops.runtime().zero(scratch);
  for (const Tensor& g : grads) ops.sum_squares(scratch, g);
  float s = 0;
  ops.runtime().download(&s, scratch);
  return s;
}

float clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double coef = max_norm / (norm + 1e-6);
  return static_cast<float>(std::min(1.0, coef));
}

AdamWHyper adamw_hyper(const OptimizerConfig& c, int64_t step, double lr) {
  AdamWHyper h;
  h.lr = static_cast<float>(lr);
  h.beta1 = static_cast<float>(c.beta1);
  h.beta2 = static_cast<float>(c.beta2);
  h.eps = static_cast<float>(c.eps);
  h.weight_decay = static_cast<float>(c.weight_decay);
  h.step = step;
  return h;
}

}  // namespace anvil
