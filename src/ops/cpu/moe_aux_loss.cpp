// The CPU reference of the MoE load-balancing loss (ops.h): transformers'
// load_balancing_loss_func over the sparse layers' counts and probability sums.
#include "ops/cpu/cpu_ops.h"

#include <vector>

#include "ops/cpu/cpu_math.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

void CpuOps::moe_aux_loss_impl(Tensor loss_sum, Tensor aux_grad, Tensor stats, int64_t tokens, float coef,
                               float loss_weight) {
  const int64_t Ls = stats.dim(0), E = stats.dim(2);
  const float* S = f32(stats);
  float* G = f32(aux_grad);
  const double rows = static_cast<double>(Ls) * static_cast<double>(tokens);
  double aux = 0;
  for (int64_t e = 0; e < E; ++e) {
    double count = 0, prob = 0;
    for (int64_t l = 0; l < Ls; ++l) {
      count += S[(l * 2) * E + e];
      prob += S[(l * 2 + 1) * E + e];
    }
    aux += (count / rows) * (prob / rows);
    G[e] = static_cast<float>(coef * static_cast<double>(E) * count / (rows * rows));
  }
  aux *= static_cast<double>(E);
  f32(loss_sum)[0] += static_cast<float>(coef * aux * loss_weight);
}

}  // namespace anvil
