// The choices of a mixture-of-experts run on several GPUs, for `anvil plan`: every expert-parallel
// degree N that divides the experts and the ranks (1: none), each with ddp, zero2 and fsdp over
// the ranks (docs/ARCHITECTURE.md, Expert parallelism), their memory per GPU (the memory plan of
// that setting, recomputation chosen as advise() chooses it) and predicted tokens/s, and whether
// the trainer refuses the degree here.
#pragma once

#include <string>
#include <vector>

#include "plan/memory_plan.h"
#include "plan/step_target.h"

namespace anvil {

struct ExpertChoice {
  int64_t degree = 1;  // --expert-parallel
  MemoryPlan plan;     // its mode's (MemoryPlan::mode)
  bool fits = false;
  double tokens_per_s = 0;  // 0: not predicted (StepTarget::why_not)
  std::string refused;      // why anvil train refuses it, or ""
};

// Every degree, in increasing order, each with kRunModes' plans in their order. `run` the
// resolved setting of anvil plan (its expert_parallel is replaced by each degree).
std::vector<ExpertChoice> expert_choices(const PlannedRun& run, int64_t gpu_bytes, const StepTarget& target);

// The choices as a table: a row each, GiB per GPU by part, the recomputation, whether it fits,
// tokens/s (or why the trainer refuses it), and the fastest that fits and is not refused.
std::string expert_choices_table(const std::vector<ExpertChoice>& choices, const ModelConfig& model, int world);

}  // namespace anvil
