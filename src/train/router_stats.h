// Qwen3-MoE's router statistics of a training step, for the log line, the --metrics file and
// TensorBoard: from each micro-batch's moe_stats (model/activations.h: per sparse layer, the
// top-k assignments and the routing probabilities summed per expert), summed over the step's
// micro-batches and ranks.
//   router_fraction_max, router_fraction_min: the share of a sparse layer's assignments that
//     went to one expert (its count over the layer's tokens x top-k), the largest and the
//     smallest over the experts and sparse layers; balanced routing gives 1 / experts.
//   router_aux_loss: transformers' load_balancing_loss_func of a micro-batch (its aux_loss,
//     before router_aux_loss_coef; top-k when balanced), the mean over the step's micro-batches
//     of every rank; reported whether or not the loss adds it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/comm.h"

namespace anvil {

// transformers' aux_loss of one forward's moe_stats, (layers, 2, experts) F32 row-major, of
// `tokens` tokens: E x sum over experts of (its assignments / (layers x tokens)) x (its
// probability sum / (layers x tokens)), the layers' rows concatenated (ops' moe_aux_loss).
double router_aux_loss(const std::vector<float>& stats, int64_t layers, int64_t experts, int64_t tokens);

class RouterStats {
 public:
  RouterStats() = default;
  RouterStats(int64_t layers, int64_t experts) : layers_(layers), experts_(experts), counts_(layers * experts, 0.0) {}

  bool empty() const { return micro_batches_ == 0; }
  // One micro-batch's moe_stats of `tokens` tokens.
  void add(const std::vector<float>& stats, int64_t tokens);
  // Summed over the ranks: every rank calls it (comm null: one process, as it is).
  RouterStats global(Comm* comm) const;

  double fraction_max() const;
  double fraction_min() const;
  double aux_loss() const { return aux_sum_ / static_cast<double>(micro_batches_); }
  const std::vector<double>& counts() const { return counts_; }  // (layer, expert), all micro-batches
  // {router_fraction_max, router_fraction_min, router_aux_loss}; none when empty.
  std::vector<std::pair<std::string, double>> metrics() const;

 private:
  // A layer's share of assignments of each expert, for every layer: max or min over them.
  double fraction(bool largest) const;

  int64_t layers_ = 0, experts_ = 0;
  std::vector<double> counts_;
  double aux_sum_ = 0;
  int64_t micro_batches_ = 0;
};

}  // namespace anvil
