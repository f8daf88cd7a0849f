// Qwen3-MoE's router statistics of a step (train/router_stats.h).
#include "train/router_stats.h"

#include <algorithm>

#include "core/error.h"

namespace anvil {

double router_aux_loss(const std::vector<float>& stats, int64_t layers, int64_t experts, int64_t tokens) {
  const double rows = static_cast<double>(layers) * static_cast<double>(tokens);
  double aux = 0;
  for (int64_t e = 0; e < experts; ++e) {
    double count = 0, prob = 0;
    for (int64_t l = 0; l < layers; ++l) {
      count += stats[static_cast<size_t>(l * 2 * experts + e)];
      prob += stats[static_cast<size_t>((l * 2 + 1) * experts + e)];
    }
    aux += (count / rows) * (prob / rows);
  }
  return static_cast<double>(experts) * aux;
}

void RouterStats::add(const std::vector<float>& stats, int64_t tokens) {
  ANVIL_ENSURE(static_cast<int64_t>(stats.size()) == layers_ * 2 * experts_ && tokens > 0, kInternal,
               "router statistics of ", stats.size(), " values for ", layers_, " layers of ", experts_, " experts");
  for (int64_t l = 0; l < layers_; ++l)
    for (int64_t e = 0; e < experts_; ++e)
      counts_[static_cast<size_t>(l * experts_ + e)] += stats[static_cast<size_t>(l * 2 * experts_ + e)];
  aux_sum_ += router_aux_loss(stats, layers_, experts_, tokens);
  ++micro_batches_;
}

RouterStats RouterStats::global(Comm* comm) const {
  if (!comm || comm->world() == 1) return *this;
  std::vector<double> mine = counts_;
  mine.push_back(aux_sum_);
  mine.push_back(static_cast<double>(micro_batches_));
  std::vector<double> all(mine.size() * static_cast<size_t>(comm->world()));
  comm->host_all_gather(mine.data(), mine.size() * sizeof(double), all.data(), "router statistics");
  RouterStats sum(layers_, experts_);
  for (int r = 0; r < comm->world(); ++r) {  // in rank order: the same bits on every rank
    const double* v = all.data() + static_cast<size_t>(r) * mine.size();
    for (size_t i = 0; i < counts_.size(); ++i) sum.counts_[i] += v[i];
    sum.aux_sum_ += v[counts_.size()];
    sum.micro_batches_ += static_cast<int64_t>(v[counts_.size() + 1]);
  }
  return sum;
}

double RouterStats::fraction(bool largest) const {
  double most = 0, least = 1;
  for (int64_t l = 0; l < layers_; ++l) {
    const auto row = counts_.begin() + l * experts_;
    double assignments = 0;
    for (int64_t e = 0; e < experts_; ++e) assignments += row[e];
    for (int64_t e = 0; e < experts_; ++e) {
      most = std::max(most, row[e] / assignments);
      least = std::min(least, row[e] / assignments);
    }
  }
  return largest ? most : least;
}

double RouterStats::fraction_max() const { return fraction(true); }
double RouterStats::fraction_min() const { return fraction(false); }

std::vector<std::pair<std::string, double>> RouterStats::metrics() const {
  if (empty()) return {};
  return {{"router_fraction_max", fraction_max()}, {"router_fraction_min", fraction_min()},
          {"router_aux_loss", aux_loss()}};
}

}  // namespace anvil
