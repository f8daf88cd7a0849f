// The step model (plan/step_model.h): compute from the op costs, collectives over the bus,
// and the two-queue replay that says how much of them is exposed.
#include "plan/step_model.h"

#include <algorithm>

#include "core/error.h"
#include "core/units.h"

namespace anvil {
namespace {

double bus_factor(CollectiveKind k, int world) {
  const double n = world;
  return k == CollectiveKind::kAllReduce ? 2 * (n - 1) / n : (n - 1) / n;
}

}  // namespace

CommBytes comm_bytes(const std::vector<StepItem>& program) {
  CommBytes b;
  for (const StepItem& it : program) {
    if (it.kind != StepItem::Kind::kCollective) continue;
    (it.collective == CollectiveKind::kAllGather       ? b.all_gather
     : it.collective == CollectiveKind::kReduceScatter ? b.reduce_scatter
                                                       : b.all_reduce) += it.bytes;
  }
  return b;
}

double bus_bytes(const CommBytes& b, int world) {
  return static_cast<double>(b.all_gather) * bus_factor(CollectiveKind::kAllGather, world) +
         static_cast<double>(b.reduce_scatter) * bus_factor(CollectiveKind::kReduceScatter, world) +
         static_cast<double>(b.all_reduce) * bus_factor(CollectiveKind::kAllReduce, world);
}

double compute_seconds(const std::vector<StepItem>& program, const OpCostTable& table, const GpuSpec& gpu) {
  double s = 0;
  for (const StepItem& it : program)
    if (it.kind == StepItem::Kind::kOp) s += table.seconds(it.op, gpu);
  return s;
}

// The replay of the header's rule: `compute` and `link` are the times each queue is free.
StepPrediction predict_step(const StepInput& in, const OpCostTable& table, const GpuSpec& gpu, double bus_gbps) {
  const std::vector<StepItem> program = step_program(in);
  const int world = in.plan.world;
  StepPrediction p;
  p.bytes = comm_bytes(program);
  ANVIL_ENSURE(world == 1 || bus_gbps > 0 || bus_bytes(p.bytes, world) == 0, kUsage,
               "step model: the bus bandwidth must be positive with ", world, " GPUs (--bus-gbps)");
  double compute = 0, link = 0;
  std::vector<double> done;
  for (const StepItem& it : program) {
    if (it.kind == StepItem::Kind::kOp) {
      const double s = table.seconds(it.op, gpu);
      compute += s;
      (it.phase == StepPhase::kForward ? p.forward_s : it.phase == StepPhase::kBackward ? p.backward_s
                                                                                       : p.optimizer_s) += s;
    } else if (it.kind == StepItem::Kind::kCollective) {
      const double s = static_cast<double>(it.bytes) * bus_factor(it.collective, world) / (bus_gbps * 1e9);
      p.comm_s += s;
      link = std::max(link, compute) + s;
      done.resize(static_cast<size_t>(it.id) + 1);
      done[static_cast<size_t>(it.id)] = link;
    } else {
      const double end = done.at(static_cast<size_t>(it.id));
      p.exposed_s += std::max(0.0, end - compute);  // the compute queue idles until the collective ends
      compute = std::max(compute, end);
    }
  }
  p.step_s = compute;
  const PlanInput& s = in.plan;
  p.tokens_per_s = static_cast<double>(world * s.micro_batch * s.seq_len * in.grad_accum) / p.step_s;
  return p;
}

std::string prediction_line(const char* mode, const StepPrediction& p) {
  return cat("predicted ", mode, ": ", format_count(p.tokens_per_s), " tokens/s, step ", format_seconds(p.step_s),
             " (forward ", format_seconds(p.forward_s), ", backward ", format_seconds(p.backward_s), ", optimizer ",
             format_seconds(p.optimizer_s), "; communication ", format_seconds(p.comm_s), ", exposed ",
             format_seconds(p.exposed_s), ")\n");
}

}  // namespace anvil
