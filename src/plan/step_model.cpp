// The step model (plan/step_model.h): compute from the op costs, collectives over the bus,
// and the two-queue replay that says how much of them is exposed.
#include "plan/step_model.h"

#include <algorithm>

#include "core/error.h"
#include "core/units.h"

namespace anvil {

CommBytes comm_bytes(const std::vector<StepItem>& program) {
  CommBytes b;
  for (const StepItem& it : program) {
    if (it.kind != StepItem::Kind::kCollective) continue;
    (it.all_to_all                                      ? b.all_to_all
     : it.collective == BenchCollective::kAllGather     ? b.all_gather
     : it.collective == BenchCollective::kReduceScatter ? b.reduce_scatter
                                                        : b.all_reduce) += it.bytes;
  }
  return b;
}

double bus_bytes(const CommBytes& b, int world) {
  return static_cast<double>(b.all_gather) * bench_bus_factor(BenchCollective::kAllGather, world) +
         static_cast<double>(b.reduce_scatter) * bench_bus_factor(BenchCollective::kReduceScatter, world) +
         static_cast<double>(b.all_reduce) * bench_bus_factor(BenchCollective::kAllReduce, world);
}

double bus_factor(const StepItem& collective, int world) {
  const int n = collective.ranks > 0 ? collective.ranks : world;
  if (collective.all_to_all) return static_cast<double>(n - 1) / n;
  return bench_bus_factor(collective.collective, n);
}

double compute_seconds(const std::vector<StepItem>& program, const OpCostTable& table, const GpuSpec& gpu) {
  double s = 0;
  for (const StepItem& it : program)
    if (it.kind == StepItem::Kind::kOp) s += table.seconds(it.op, gpu);
  return s;
}

namespace {

// The two queues of the header's rule, in seconds from the step's start.
class Replay {
 public:
  explicit Replay(double overlap_cost) : overlap_cost_(overlap_cost) {}

  // An op of s seconds of work on the compute queue, which runs at 1 / (1 + overlap_cost)
  // of its speed while a collective is on the link; returns the time that costs it.
  double run(double s) {
    while (first_ < busy_.size() && busy_[first_].second <= compute_) ++first_;
    const double slow = 1 + overlap_cost_;
    double t = compute_, left = s;  // the time reached, the work left
    for (size_t i = first_; i < busy_.size() && left > 0; ++i) {
      const double alone = std::min(left, std::max(0.0, busy_[i].first - t));  // before the collective starts
      t += alone;
      left -= alone;
      const double beside = std::min(left * slow, busy_[i].second - t);
      t += beside;
      left -= beside / slow;
    }
    t += std::max(0.0, left);
    const double lost = t - compute_ - s;
    compute_ = t;
    return lost;
  }
  // A collective of s seconds: after the link's last one and the compute issued before it.
  void issue(double s) {
    const double start = std::max(link_, compute_);
    link_ = start + s;
    busy_.push_back({start, link_});
  }
  // The compute queue waits for collective `id` (the id-th issued); returns its idle time.
  double wait(int id) {
    const double end = busy_.at(static_cast<size_t>(id)).second, idle = std::max(0.0, end - compute_);
    compute_ += idle;
    return idle;
  }
  double now() const { return compute_; }

 private:
  double overlap_cost_, compute_ = 0, link_ = 0;
  std::vector<std::pair<double, double>> busy_;  // the collectives' [start, end), in issue order
  size_t first_ = 0;                             // busy_ before it ended before the compute queue's time
};

}  // namespace

StepPrediction predict_step(const PlannedRun& run, const OpCostTable& table, const GpuSpec& gpu, double bus_gbps) {
  const std::vector<StepItem> program = step_program(run);
  const int world = run.world;
  StepPrediction p;
  p.bytes = comm_bytes(program);
  double on_bus = 0;
  for (const StepItem& it : program)
    if (it.kind == StepItem::Kind::kCollective) on_bus += static_cast<double>(it.bytes) * bus_factor(it, world);
  ANVIL_ENSURE(world == 1 || bus_gbps > 0 || on_bus == 0, kUsage,
               "step model: the bus bandwidth must be positive with ", world, " GPUs (--bus-gbps)");
  Replay q(table.comm_overlap_cost);
  for (const StepItem& it : program) {
    if (it.kind == StepItem::Kind::kOp) {
      const double s = table.seconds(it.op, gpu);
      (it.phase == StepPhase::kForward ? p.forward_s : it.phase == StepPhase::kBackward ? p.backward_s
                                                                                       : p.optimizer_s) += s;
      p.slowed_s += q.run(s);
    } else if (it.kind == StepItem::Kind::kCollective) {
      const double s = static_cast<double>(it.bytes) * bus_factor(it, world) / (bus_gbps * 1e9);
      p.comm_s += s;
      q.issue(s);
    } else {
      p.exposed_s += q.wait(it.id);
    }
  }
  p.step_s = q.now();
  const DataSection& d = run.data;
  p.tokens_per_s = static_cast<double>(world * d.micro_batch * d.seq_len * d.grad_accum) / p.step_s;
  return p;
}

std::string prediction_line(const char* mode, const StepPrediction& p) {
  const std::string comm = p.comm_s > 0 ? cat("; communication ", format_seconds(p.comm_s), ", exposed ",
                                              format_seconds(p.exposed_s), ", compute slowed beside it ",
                                              format_seconds(p.slowed_s))
                                        : std::string();
  return cat("predicted ", mode, ": ", format_count(p.tokens_per_s), " tokens/s, step ", format_seconds(p.step_s),
             " (forward ", format_seconds(p.forward_s), ", backward ", format_seconds(p.backward_s), ", optimizer ",
             format_seconds(p.optimizer_s), comm, ")\n");
}

}  // namespace anvil
