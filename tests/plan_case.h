// A run for the memory plan and the step model to read (plan/memory_plan.h's PlannedRun),
// holding what the run's view refers to: a model, the config's data and parallel sections as
// resolve_config leaves them (here ddp, no recomputation, fp32 gradients, one sequence of
// 2048 tokens a step), the ranks and a GPU's compute dtype. A test changes what it varies.
#pragma once

#include <utility>

#include "plan/memory_plan.h"

namespace anvil::testing {

struct PlanCase {
  ModelConfig model;
  DataSection data;
  ParallelSection parallel;
  int world = 1;
  DType compute_dtype = DType::kBF16;

  explicit PlanCase(ModelConfig m) : model(std::move(m)) {
    data.seq_len = 2048;
    parallel.mode = ParallelMode::kDdp;
    parallel.recompute = Recompute::kNone;
    parallel.grad_dtype = GradDType::kF32;
  }
  PlannedRun run() const { return {model, data, parallel, world, compute_dtype}; }
};

}  // namespace anvil::testing
