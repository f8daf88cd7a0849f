// The optimizer step (optim/optimizer.h): the norm, the clipping and AdamW unit by unit,
// on the side queue when overlapped.
#include "optim/optimizer.h"

#include <cmath>
#include <optional>

#include "core/error.h"

namespace anvil {
namespace {

// Ops are issued to queue q until the end of the scope, then to the main queue again.
class OnQueue {
 public:
  OnQueue(Runtime& rt, Runtime::Queue q) : rt_(rt) { rt_.set_queue(q); }
  ~OnQueue() { rt_.set_queue(Runtime::Queue::kMain); }
  OnQueue(const OnQueue&) = delete;
  OnQueue& operator=(const OnQueue&) = delete;

 private:
  Runtime& rt_;
};

}  // namespace

Optimizer::Optimizer(Ops& ops, const OwnedUnits& units, Tensor scratch, Comm* norm_comm, bool zero_grads)
    : ops_(ops), units_(units), scratch_(scratch), norm_comm_(norm_comm), zero_grads_(zero_grads) {
  updating_.assign(units.m.size(), 0);
  norm_parts_.assign(units.m.size(), norm_comm ? NormPart::kSummed : NormPart::kLocal);
}

void Optimizer::set_norm_parts(Comm* norm_comm, std::vector<NormPart> parts) {
  ANVIL_ENSURE(parts.size() == updating_.size(), kInternal, parts.size(), " norm parts for ", updating_.size(),
               " units");
  norm_comm_ = norm_comm;
  norm_parts_ = std::move(parts);
}

void Optimizer::await_update(int unit) {
  char& in_flight = updating_[static_cast<size_t>(unit)];
  if (!in_flight) return;
  ops_.runtime().wait(unit);
  in_flight = 0;
}

void Optimizer::finish() {
  for (size_t u = 0; u < updating_.size(); ++u) await_update(static_cast<int>(u));
}

double Optimizer::global_norm(int64_t step) {
  std::vector<Tensor> local, summed;
  for (size_t u = 0; u < norm_parts_.size(); ++u)
    if (norm_parts_[u] != NormPart::kSkipped)
      (norm_parts_[u] == NormPart::kLocal ? local : summed).push_back(units_.grads[u]);
  double sq = local.empty() ? 0.0 : grad_sum_squares(ops_, local, scratch_);
  if (norm_comm_)
    sq += norm_comm_->host_sum(summed.empty() ? 0.0 : grad_sum_squares(ops_, summed, scratch_), "grad norm");
  const double norm = std::sqrt(sq);
  ANVIL_ENSURE(std::isfinite(norm), kNumerics, "gradient norm is ", norm, " at step ", step,
               ": the step was not applied");
  return norm;
}

// AdamW and the compute copy in one pass (split masters: the high half is it), zeroing the
// gradient where asked (split: after it, a pass over the owned shard only).
void Optimizer::update(size_t u, const AdamWHyper& h, float scale) {
  const OwnedUnits& o = units_;
  if (!o.split()) {
    ops_.adamw_step(o.master[u], o.grads[u], o.m[u], o.v[u], h, scale, u < o.compute.size() ? o.compute[u] : Tensor(),
                    zero_grads_);
    return;
  }
  ops_.adamw_step_split(o.hi[u], o.lo[u], o.grads[u], o.m[u], o.v[u], h, scale);
  if (zero_grads_) ops_.runtime().zero(o.grads[u]);
}

double Optimizer::step(const OptimizerConfig& c, int64_t step, double lr) {
  const double norm = global_norm(step);
  const AdamWHyper h = adamw_hyper(c, step, lr);
  const float scale = clip_coefficient(norm, c.max_grad_norm);
  const int grads_done = static_cast<int>(updating_.size());  // the event slot after the units'
  std::optional<OnQueue> on_side;
  if (overlap_) {
    ops_.runtime().record(grads_done);
    on_side.emplace(ops_.runtime(), Runtime::Queue::kSide);
    ops_.runtime().wait(grads_done);
  }
  for (size_t u = 0; u < updating_.size(); ++u) {
    update(u, h, scale);
    if (!overlap_) continue;
    ops_.runtime().record(static_cast<int>(u));
    updating_[u] = 1;
  }
  return norm;
}

}  // namespace anvil
