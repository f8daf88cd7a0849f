// anvil plan: the memory per GPU of each mode, before launching anything (no GPU needed), and
// each mode's predicted step and tokens/s (plan/step_model.h). The flags it shares with anvil
// train bind to the same config tree by the same binders (cli/config_flags.h).
#include <cstdio>
#include <utility>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/config_flags.h"
#include "core/json.h"
#include "io/hub.h"
#include "model/config.h"
#include "plan/memory_plan.h"
#include "plan/step_model.h"
#include "sys/nvml.h"

namespace anvil {
namespace {

std::string gib(int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", static_cast<double>(bytes) / (1ll << 30));
  return b;
}

// Why the table reads as it does: a mode that does not fit (its total with the reserve against
// the GPU), and the gradients' dtype (bf16 only where no micro-batches are summed).
std::string plan_notes(const PlanAdvice& adv, const PlannedRun& run, int64_t gpu_bytes, GradDType asked) {
  std::string notes;
  for (const auto& [name, plan] : {std::pair<const char*, const MemoryPlan*>{"ddp", &adv.ddp}, {"fsdp", &adv.fsdp}})
    if (!plan_fits(*plan, gpu_bytes))
      notes += cat("why: ", name, " does not fit: ", gib(plan->total()), " GiB planned + ", gib(kPlanReserve),
                   " GiB kept free (the CUDA context, allocator slack) = ", gib(plan->total() + kPlanReserve),
                   " GiB > ", gib(gpu_bytes), " GiB per GPU\n");
  if (run.compute_dtype != DType::kBF16 || asked != GradDType::kAuto) return notes;
  if (run.parallel.grad_dtype == GradDType::kBF16)
    return notes + "gradients: the blocks' in bf16 (--grad-dtype auto: --grad-accum 1, no micro-batches to sum; "
                   "the ranks' sum is taken on the --reduce-dtype wire)\n";
  return notes + "gradients: fp32 (--grad-dtype auto: the gradients of several micro-batches are summed, in fp32); "
                 "bf16 needs --grad-accum 1, 2 bytes less per parameter of the blocks\n";
}

// What the step model runs on: the GPU, its op costs and the bus between GPUs, each with
// where the figure comes from.
struct StepTarget {
  const GpuSpec* gpu = nullptr;  // null: no prediction (why_not says why)
  std::string gpu_name, why_not;
  OpCostTable table;
  double bus_gbps = 0;
  std::string bus_source;
};

struct TargetFlags {
  std::string gpu, op_table, topo_answers;
  double bus_gbps = 0;
};

// This machine's GPUs as anvil topo sees them (recorded answers when given); none without a driver.
Topology local_topology(const std::string& answers) {
  if (!answers.empty()) return build_topology(topo_answers_from_json(json_read_file(answers), answers));
  try {
    return build_topology(nvml_topo_answers());
  } catch (const Error&) {
    return build_topology(TopoAnswers{});
  }
}

// --gpu, else this machine's GPU, else an H200; --bus-gbps, else (planning this machine:
// no --gpu) the links topo finds when they join at least nproc GPUs, else the usual link of
// the GPU's machines (an assumption).
StepTarget step_target(const TargetFlags& f, int nproc) {
  ANVIL_ENSURE(f.bus_gbps >= 0, kUsage, "anvil plan: --bus-gbps ", f.bus_gbps,
               " is negative (give anvil bench's all-reduce busbw in GB/s)");
  StepTarget t;
  const Topology topo = f.gpu.empty() ? local_topology(f.topo_answers) : build_topology(TopoAnswers{});
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

// The settings the plan reads, resolved as a run on `world` GPUs (bf16) would resolve them, but
// for what advise() chooses: without data 2048 tokens, the rules of context parallelism and of
// offloading checked, the blocks' gradient dtype.
PlannedRun resolve_plan(TrainConfig& c, const ModelConfig& model, int world) {
  DataSection& d = c.data;
  ParallelSection& p = c.parallel;
  if (d.seq_len == 0) d.seq_len = kSeqLenWithoutData;
  ANVIL_ENSURE(d.seq_len >= 2 && d.micro_batch >= 1 && d.grad_accum >= 1, kUsage,
               "anvil plan: --micro-batch, --grad-accum must be >= 1 and --seq-len >= 2");
  check_context_parallel(p.context_parallel, world, model, d.seq_len, "--nproc");
  check_offload(p.recompute, p.offload_activations);
  const PlannedRun run{model, d, p, world};
  const bool bf16 = resolve_grad_dtype(p.grad_dtype, run.compute_dtype, d.grad_accum) == DType::kBF16;
  p.grad_dtype = bf16 ? GradDType::kBF16 : GradDType::kF32;
  return run;
}

// No prediction where the step model does not price the setting: context parallelism's
// all-to-alls, FP8 linears without the table's FP8 rates.
void skip_unmodelled(StepTarget& t, const ParallelSection& p) {
  if (!t.gpu) return;
  if (p.context_parallel > 1) t.why_not = "the step model does not count context parallelism's all-to-alls yet";
  else if (p.fp8 != Fp8Recipe::kOff) t.why_not = t.table.why_not_fp8(*t.gpu);
  if (!t.why_not.empty()) t.gpu = nullptr;
}

// The step of a mode as its plan resolved it.
StepPrediction predict_mode(const PlannedRun& run, const MemoryPlan& plan, const StepTarget& t) {
  ParallelSection p = run.parallel;
  p.mode = plan.mode;
  p.recompute = plan.recompute;
  p.mlp_tile = plan.mlp_tile;
  return predict_step({run.model, run.data, p, run.world, run.compute_dtype}, t.table, *t.gpu, t.bus_gbps);
}

std::string prediction_text(const StepTarget& t, int nproc, const StepPrediction& ddp, const StepPrediction& fsdp) {
  if (!t.gpu) return cat("step: not predicted: ", t.why_not, "\n");
  std::string s = cat("step, predicted for ", nproc, " x ", t.gpu->key, " (op costs: ", t.table.gpu, " table, ",
                      t.table.measured ? "measured" : "NOT measured, derived from the GPU's limits",
                      nproc > 1 ? cat("; bus ", t.bus_gbps, " GB/s: ", t.bus_source) : std::string(), "):\n");
  return s + prediction_line("ddp", ddp) + prediction_line("fsdp", fsdp);
}

Json prediction_json(const StepPrediction& p) {
  return Json{{"tokens_per_s", p.tokens_per_s}, {"step_ms", 1e3 * p.step_s},     {"forward_ms", 1e3 * p.forward_s},
              {"backward_ms", 1e3 * p.backward_s}, {"optimizer_ms", 1e3 * p.optimizer_s},
              {"communication_ms", 1e3 * p.comm_s}, {"exposed_ms", 1e3 * p.exposed_s},
              {"slowed_ms", 1e3 * p.slowed_s}};
}

Json predicted_json(const StepTarget& t, const StepPrediction& ddp, const StepPrediction& fsdp) {
  if (!t.gpu) return Json(nullptr);
  return Json{{"gpu", t.gpu->key},       {"op_table_measured", t.table.measured}, {"bus_gbps", t.bus_gbps},
              {"bus_source", t.bus_source}, {"ddp", prediction_json(ddp)},           {"fsdp", prediction_json(fsdp)}};
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  TrainConfig c;  // the sections anvil plan shares with anvil train
  int64_t nproc = 1;
  double gpu_mem = 0;
  bool json = false;
  TargetFlags target;
  Args a("plan", "Memory per GPU of a full fine-tune in each mode (parameters, gradients, AdamW state, weight "
                 "copies, activations, workspace), whether it fits, and the rule's advice: ddp when it fits, else "
                 "fsdp; and each mode's predicted step time and tokens/s (op costs of the GPU, the bus between "
                 "GPUs). The flags of the model and the run read as anvil train's.");
  bind_shared_sections(a, c);
  a.opt("--nproc", &nproc, "N", "GPUs (ranks)")
      .opt("--gpu-mem", &gpu_mem, "GiB", "memory per GPU [default: 139.8, an H200's]")
      .opt("--gpu", &target.gpu, "NAME", "the GPU the step is predicted on (H200, H100, A100, ...) [default: this "
                                        "machine's, else H200]")
      .opt("--topo-answers", &target.topo_answers, "FILE", "recorded NVML answers (anvil topo --record) for the links")
      .flag("--json", &json, "print one JSON object");
  bind_step_model(a, &target.op_table, &target.bus_gbps);
  if (!a.parse(argc, argv)) return 0;
  ANVIL_ENSURE(c.model.model.empty() != c.model.preset.empty(), kUsage,
               "anvil plan: give exactly one of --model and --preset");
  ANVIL_ENSURE(nproc >= 1, kUsage, "anvil plan: --nproc must be >= 1");
  const ModelConfig model =
      c.model.preset.empty() ? load_config(resolve_model_dir(c.model.model)) : preset_config(c.model.preset);
  const int world = static_cast<int>(nproc);
  const GradDType asked = c.parallel.grad_dtype;
  const PlannedRun run = resolve_plan(c, model, world);
  const ParallelSection& par = run.parallel;
  const int64_t gpu_bytes = gpu_mem > 0 ? static_cast<int64_t>(gpu_mem * (1ll << 30)) : kH200Bytes;
  const PlanAdvice adv = advise(run, gpu_bytes);
  StepTarget target_of = step_target(target, world);
  skip_unmodelled(target_of, par);
  StepPrediction ddp, fsdp;
  if (target_of.gpu) {
    ddp = predict_mode(run, adv.ddp, target_of);
    fsdp = predict_mode(run, adv.fsdp, target_of);
  }
  if (json) {
    auto j_of = [](const MemoryPlan& p) {
      return Json{{"params", p.params}, {"grads", p.grads}, {"optimizer", p.optimizer}, {"weights", p.weights},
                  {"activations", p.activations}, {"workspace", p.workspace}, {"total", p.total()},
                  {"host_snapshot", p.host_snapshot}, {"host_activations", p.host_activations},
                  {"recompute", recompute_name(p.recompute)}, {"mlp_tile", p.mlp_tile}};
    };
    Json j = {{"gpu_bytes", gpu_bytes}, {"reserve_bytes", kPlanReserve},
              {"ddp", j_of(adv.ddp)}, {"fsdp", j_of(adv.fsdp)},
              {"advice", adv.fits ? parallel_mode_name(adv.mode) : ""}, {"message", adv.message},
              {"grad_dtype", grad_dtype_name(par.grad_dtype)},
              {"predicted", predicted_json(target_of, ddp, fsdp)}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    const std::string notes = plan_notes(adv, run, gpu_bytes, asked);
    const std::string step = prediction_text(target_of, world, ddp, fsdp);
    std::fputs((plan_table(adv, run, gpu_bytes) + notes + step).c_str(), stdout);
  }
  return 0;
}

}  // namespace anvil
