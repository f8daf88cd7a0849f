// The expert-parallel choices of anvil plan (plan/expert_choices.h).
#include "plan/expert_choices.h"

#include <cstdio>

#include "core/units.h"
#include "model/expert_parallel.h"

namespace anvil {
namespace {

// Why anvil train refuses degree N on `world` GPUs with this setting, or "": the rules of
// resolve_config (train/resolve.cpp: not with context parallelism or DPO), and NCCL's comm,
// which has no groups of ranks yet (comm/comm.cpp, Comm::group): N < world needs the
// expert-parallel and replica groups.
std::string refusal(const PlannedRun& run, int64_t N) {
  if (N == 1) return "";
  if (run.parallel.context_parallel > 1) return "not with --context-parallel";
  if (run.data.objective == Objective::kDpo) return "not with --objective dpo";
  if (N < run.world) return "refused: NCCL has no groups yet";
  return "";
}

}  // namespace

std::vector<ExpertChoice> expert_choices(const PlannedRun& run, int64_t gpu_bytes, const StepTarget& target) {
  std::vector<ExpertChoice> out;
  const int64_t E = run.model.moe.num_experts;
  for (int64_t N = 1; N <= run.world; ++N) {
    if (E % N != 0 || run.world % N != 0) continue;
    ParallelSection p = run.parallel;
    p.expert_parallel = N;
    const PlannedRun at{run.model, run.data, p, run.world, run.compute_dtype};
    const PlanAdvice a = advise(at, gpu_bytes);
    for (ParallelMode mode : kRunModes) {
      ExpertChoice c;
      c.degree = N;
      c.plan = a.of(mode);
      c.fits = plan_fits(c.plan, gpu_bytes);
      c.refused = refusal(run, N);
      if (target.gpu) c.tokens_per_s = predict_plan(at, c.plan, target).tokens_per_s;
      out.push_back(c);
    }
  }
  return out;
}

std::string expert_choices_table(const std::vector<ExpertChoice>& choices, const ModelConfig& model, int world) {
  std::string s = cat("expert parallel on ", world, " GPUs (--expert-parallel N: each GPU holds ",
                      model.moe.num_experts, "/N of every sparse layer's experts, the tokens exchanged by "
                      "all-to-all; the rest of the model per --mode over the ", world,
                      " GPUs), GiB per GPU and predicted tokens/s:\n");
  char line[256];
  std::snprintf(line, sizeof line, "%4s %-6s %10s %10s %10s %10s %11s %9s %9s %9s %-10s %-4s %s\n", "N", "mode",
                "parameters", "gradients", "optimizer", "weights", "activations", "exchange", "workspace", "total",
                "recompute", "fits", "tokens/s");
  s += line;
  const ExpertChoice* best = nullptr;
  for (const ExpertChoice& c : choices) {
    const MemoryPlan& p = c.plan;
    const std::string speed = c.tokens_per_s > 0 ? format_count(c.tokens_per_s) : std::string("-");
    std::snprintf(line, sizeof line, "%4lld %-6s %10s %10s %10s %10s %11s %9s %9s %9s %-10s %-4s %s%s%s\n",
                  static_cast<long long>(c.degree), parallel_mode_name(p.mode), gib(p.params).c_str(),
                  gib(p.grads).c_str(), gib(p.optimizer).c_str(), gib(p.weights).c_str(), gib(p.activations).c_str(),
                  gib(p.exchange).c_str(), gib(p.workspace).c_str(), gib(p.total()).c_str(),
                  recompute_name(p.recompute), c.fits ? "yes" : "no", speed.c_str(), c.refused.empty() ? "" : "  ",
                  c.refused.c_str());
    s += line;
    if (c.fits && c.refused.empty() && (!best || c.tokens_per_s > best->tokens_per_s)) best = &c;
  }
  s += cat("exchange: the experts' rows a GPU receives (kept for the backward) and the all-to-all's buffers, planned "
           "for ", kExpertRowsMargin, " x the balanced count (each GPU's tokens spread evenly over the experts), at "
           "most the most a GPU can receive\n");
  if (best && best->tokens_per_s > 0)
    s += cat("fastest that fits and runs: --expert-parallel ", best->degree, " --mode ",
             parallel_mode_name(best->plan.mode), " --recompute ", recompute_name(best->plan.recompute), " (",
             format_count(best->tokens_per_s), " tokens/s)\n");
  return s;
}

}  // namespace anvil
