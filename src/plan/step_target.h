// What the step model (plan/step_model.h) predicts on: the GPU, its op costs and the bus
// between GPUs, each with where the figure comes from. anvil plan takes it from its flags,
// anvil train (--mode auto) from this machine, so both choose the same mode (advise).
#pragma once

#include <string>

#include "plan/memory_plan.h"
#include "plan/op_costs.h"
#include "plan/step_model.h"

namespace anvil {

struct StepTarget {
  const GpuSpec* gpu = nullptr;  // null: no prediction (why_not says why)
  std::string gpu_name, why_not;
  bool assumed = false;  // no --gpu and no GPU here: an H200 is assumed
  OpCostTable table;
  double bus_gbps = 0;
  std::string bus_source;
};

struct TargetFlags {
  std::string gpu, op_table, topo_answers;  // empty: this machine's GPU, the built-in table, NVML
  double bus_gbps = 0;                      // 0: the links found, else the GPU's usual link
};

// The GPU: flags.gpu, else this machine's, else an H200 (assumed). The bus: flags.bus_gbps,
// else (this machine: no flags.gpu) the links topo finds when they join at least nproc GPUs,
// else the usual link of the GPU's machines (an assumption).
StepTarget step_target(const TargetFlags& flags, int nproc);
// No prediction where the step model does not price the setting: context parallelism's
// all-to-alls, FP8 linears without the table's FP8 rates.
void skip_unmodelled(StepTarget& t, const ParallelSection& p);
// The step of the run as `plan` resolved it (its mode, recomputation and MLP tile).
StepPrediction predict_plan(const PlannedRun& run, const MemoryPlan& plan, const StepTarget& t);
// advise()'s speed on `t`: tokens/s of each plan; empty where t predicts nothing.
PlanSpeed plan_speed(const PlannedRun& run, const StepTarget& t);

}  // namespace anvil
