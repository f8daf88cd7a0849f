// The step model's GPU, op costs and bus: see plan/step_target.h.
#include "plan/step_target.h"

#include "core/error.h"
#include "sys/nvml.h"

namespace anvil {
namespace {

// This machine's GPUs as anvil topo sees them (recorded answers when given); none without a driver.
Topology local_topology(const std::string& answers) {
  if (!answers.empty()) return build_topology(topo_answers_from_json(json_read_file(answers), answers));
  try {
    return build_topology(nvml_topo_answers());
  } catch (const Error&) {
    return build_topology(TopoAnswers{});
  }
}

}  // namespace

StepTarget step_target(const TargetFlags& f, int nproc) {
  ANVIL_ENSURE(f.bus_gbps >= 0, kUsage, "anvil plan: --bus-gbps ", f.bus_gbps,
               " is negative (give anvil bench's all-reduce busbw in GB/s)");
  StepTarget t;
  const Topology topo = f.gpu.empty() ? local_topology(f.topo_answers) : build_topology(TopoAnswers{});
  t.assumed = f.gpu.empty() && topo.gpus == 0;
  const std::string name = !f.gpu.empty() ? f.gpu : topo.gpus > 0 ? topo.answers.gpus[0].name : "H200";
  t.gpu = find_gpu_spec(name);
  ANVIL_ENSURE(t.gpu || f.gpu.empty(), kUsage, "anvil plan: unknown GPU '", name, "' (--gpu takes one of ",
               known_gpu_names(), ")");
  t.gpu_name = name;
  if (!t.gpu) {  // this machine's GPU, unknown: no prediction (the memory plan as ever)
    t.why_not = cat("this machine's GPU, ", name, ", is not one the step model knows (--gpu NAME predicts on one of ",
                    known_gpu_names(), ")");
    return t;
  }
  t.table = OpCostTable::load(f.op_table);
  if (f.bus_gbps > 0) {
    t.bus_gbps = f.bus_gbps;
    t.bus_source = "--bus-gbps";
  } else if (topo.gpus >= nproc && nproc > 1) {
    t.bus_gbps = topology_bus_gbps(topo, &t.bus_source);
  } else {
    t.bus_gbps = t.gpu->bus_gbps;
    t.bus_source =
        cat("assumed for ", t.gpu->key, " machines: ", t.gpu->link, "; measure with anvil bench, pass --bus-gbps");
  }
  return t;
}

void skip_unmodelled(StepTarget& t, const ParallelSection& p) {
  if (!t.gpu) return;
  if (p.context_parallel > 1) t.why_not = "the step model does not count context parallelism's all-to-alls yet";
  else if (p.fp8 != Fp8Recipe::kOff) t.why_not = t.table.why_not_fp8(*t.gpu);
  if (!t.why_not.empty()) t.gpu = nullptr;
}

StepPrediction predict_plan(const PlannedRun& run, const MemoryPlan& plan, const StepTarget& t) {
  ParallelSection p = run.parallel;
  p.mode = plan.mode;
  p.recompute = plan.recompute;
  p.mlp_tile = plan.mlp_tile;
  return predict_step({run.model, run.data, p, run.world, run.compute_dtype}, t.table, *t.gpu, t.bus_gbps);
}

PlanSpeed plan_speed(const PlannedRun& run, const StepTarget& t) {
  if (!t.gpu) return {};
  return [&run, &t](const MemoryPlan& plan) { return predict_plan(run, plan, t).tokens_per_s; };
}

}  // namespace anvil
