// anvil plan: the memory per GPU of each mode, before launching anything (no GPU needed), and
// each mode's predicted step and tokens/s (plan/step_model.h). The flags it shares with anvil
// train bind to the same config tree (cli/train_flags.h).
#include <cstdio>
#include <utility>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/train_flags.h"
#include "core/json.h"
#include "core/units.h"
#include "io/hub.h"
#include "model/config.h"
#include "plan/memory_plan.h"
#include "plan/step_model.h"
#include "sys/nvml.h"

namespace anvil {
namespace {

// Why the table reads as it does: a mode that does not fit (its total with the reserve against
// the GPU), and the gradients' dtype (bf16 only where no micro-batches are summed).
std::string plan_notes(const PlanAdvice& adv, const PlanInput& in, int64_t gpu_bytes, GradDType asked) {
  std::string notes;
  for (const auto& [name, plan] : {std::pair<const char*, const MemoryPlan*>{"ddp", &adv.ddp}, {"fsdp", &adv.fsdp}})
    if (!plan_fits(*plan, gpu_bytes))
      notes += cat("why: ", name, " does not fit: ", gib(plan->total()), " GiB planned + ", gib(kPlanReserve),
                   " GiB kept free (the CUDA context, allocator slack) = ", gib(plan->total() + kPlanReserve),
                   " GiB > ", gib(gpu_bytes), " GiB per GPU\n");
  if (in.compute_dtype != DType::kBF16 || asked != GradDType::kAuto) return notes;
  if (in.grad_dtype == DType::kBF16)
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

StepPrediction predict_mode(const PlanInput& in, const MemoryPlan& plan, int64_t grad_accum, const StepTarget& t) {
  StepInput s{in, grad_accum};
  s.plan.mode = plan.mode;
  s.plan.recompute = plan.recompute;
  s.plan.mlp_tile = plan.mlp_tile;
  return predict_step(s, t.table, *t.gpu, t.bus_gbps);
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
  TrainConfig c;  // the flags shared with anvil train, at the plan's defaults
  c.data.seq_len = 2048;
  c.parallel.mode = ParallelMode::kDdp;
  c.parallel.recompute = Recompute::kAuto;
  int64_t nproc = 1;
  double gpu_mem = 0;
  bool json = false;
  TargetFlags target;
  Args a("plan", "Memory per GPU of a full fine-tune in each mode (parameters, gradients, AdamW state, weight copies,\n"
                 "activations, workspace), whether it fits, and the rule's advice: ddp when it fits, else fsdp;\n"
                 "and each mode's predicted step time and tokens/s (op costs of the GPU, the bus between GPUs).");
  a.opt("--model", &c.model.model, "DIR|ID", "model folder or hub id in the local cache")
      .opt("--preset", &c.model.preset, "NAME", "a built-in shape instead of --model");
  bind_mode(a, &c.parallel.mode, "the mode you intend to run (both are shown)", {"ddp", "fsdp"})
      .opt("--nproc", &nproc, "N", "GPUs (ranks)")
      .opt("--seq-len", &c.data.seq_len, "T", "tokens per sequence")
      .opt("--micro-batch", &c.data.micro_batch, "B", "sequences per micro-batch")
      .opt("--grad-accum", &c.data.grad_accum, "K", "micro-batches per optimizer step (as anvil train)")
      .opt("--context-parallel", &c.parallel.context_parallel, "N",
           "ranks sharing each sequence (as anvil train: --nproc of them): seq-len/N tokens a rank");
  bind_recompute(a, &c.parallel.recompute, "activation recomputation (auto: the fastest that fits)");
  bind_mlp_tile(a, &c.parallel.mlp_tile);
  bind_offload(a, &c.parallel.offload_activations);
  bind_reduce_dtype(a, &c.parallel.reduce_dtype, "gradient reduction dtype (as anvil train)");
  bind_fp8(a, &c.parallel.fp8, "the blocks' linear layers in FP8 (as anvil train): their operand copies");
  bind_grad_dtype(a, &c.parallel.grad_dtype, "the blocks' gradients (as anvil train)")
      .opt("--gpu-mem", &gpu_mem, "GiB", "memory per GPU [default: 139.8, an H200's]")
      .opt("--gpu", &target.gpu, "NAME", "the GPU the step is predicted on (H200, H100, A100, ...) [default: this "
                                        "machine's, else H200]")
      .opt("--bus-gbps", &target.bus_gbps, "GB/s", "all-reduce bus bandwidth between the GPUs (anvil bench's busbw) "
                                                  "[default: from anvil topo's links, else the GPU's usual link]")
      .opt("--op-table", &target.op_table, "FILE", "op costs (bench step --write-op-table) [default: built-in H200]")
      .opt("--topo-answers", &target.topo_answers, "FILE", "recorded NVML answers (anvil topo --record) for the links")
      .flag("--json", &json, "print one JSON object");
  if (!a.parse(argc, argv)) return 0;
  const DataSection& d = c.data;
  ANVIL_ENSURE(c.model.model.empty() != c.model.preset.empty(), kUsage,
               "anvil plan: give exactly one of --model and --preset");
  ANVIL_ENSURE(nproc >= 1 && d.seq_len >= 2 && d.micro_batch >= 1 && d.grad_accum >= 1, kUsage,
               "anvil plan: --nproc, --micro-batch, --grad-accum must be >= 1 and --seq-len >= 2");
  PlanInput in;
  in.config = c.model.preset.empty() ? load_config(resolve_model_dir(c.model.model)) : preset_config(c.model.preset);
  in.world = static_cast<int>(nproc);
  const int64_t cp = c.parallel.context_parallel;
  ANVIL_ENSURE(cp == 1 || (cp == nproc && in.config.num_kv_heads % cp == 0 && d.seq_len % cp == 0), kUsage,
               "anvil plan: --context-parallel ", cp, " needs --nproc ", cp, " and must divide the model's ",
               in.config.num_kv_heads, " key/value heads and --seq-len ", d.seq_len);
  in.context_parallel = cp;
  in.seq_len = d.seq_len;
  in.micro_batch = d.micro_batch;
  in.mode = c.parallel.mode;
  in.mlp_tile = c.parallel.mlp_tile;
  in.offload = c.parallel.offload_activations;
  check_offload(c.parallel.recompute, in.offload);
  in.reduce_dtype = c.parallel.reduce_dtype;
  in.fp8 = c.parallel.fp8;
  in.grad_dtype = resolve_grad_dtype(c.parallel.grad_dtype, in.compute_dtype, d.grad_accum);
  const int64_t gpu_bytes = gpu_mem > 0 ? static_cast<int64_t>(gpu_mem * (1ll << 30)) : kH200Bytes;
  const PlanAdvice adv = advise(in, c.parallel.recompute, gpu_bytes);
  StepTarget target_of = step_target(target, in.world);
  if (in.context_parallel > 1 && target_of.gpu) {
    target_of.gpu = nullptr;
    target_of.why_not = "the step model does not count context parallelism's all-to-alls yet";
  }
  if (in.fp8 != Fp8Recipe::kOff && target_of.gpu && !target_of.table.why_not_fp8(*target_of.gpu).empty()) {
    target_of.why_not = target_of.table.why_not_fp8(*target_of.gpu);
    target_of.gpu = nullptr;
  }
  StepPrediction ddp, fsdp;
  if (target_of.gpu) {
    ddp = predict_mode(in, adv.ddp, d.grad_accum, target_of);
    fsdp = predict_mode(in, adv.fsdp, d.grad_accum, target_of);
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
              {"grad_dtype", in.grad_dtype == DType::kBF16 ? "bf16" : "fp32"},
              {"predicted", predicted_json(target_of, ddp, fsdp)}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    const std::string notes = plan_notes(adv, in, gpu_bytes, c.parallel.grad_dtype);
    const std::string step = prediction_text(target_of, in.world, ddp, fsdp);
    std::fputs((plan_table(adv, in, gpu_bytes) + notes + step).c_str(), stdout);
  }
  return 0;
}

}  // namespace anvil
