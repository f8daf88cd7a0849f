// anvil plan: the memory per GPU of each mode, before launching anything (no GPU needed), and
// each mode's predicted step and tokens/s (plan/step_model.h). The flags it shares with anvil
// train bind to the same config tree by the same binders (cli/config_flags.h).
#include <cstdio>
#include <utility>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/config_flags.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/units.h"
#include "io/hub.h"
#include "model/config.h"
#include "model/init.h"
#include "plan/expert_choices.h"
#include "plan/memory_plan.h"
#include "plan/step_target.h"

namespace anvil {
namespace {

// Why the table reads as it does: a mode that does not fit (its total with the reserve against
// the GPU), and the gradients' dtype (bf16 only where no micro-batches are summed).
std::string plan_notes(const PlanAdvice& adv, const PlannedRun& run, int64_t gpu_bytes, GradDType asked) {
  std::string notes;
  for (ParallelMode mode : kRunModes)
    if (const MemoryPlan& plan = adv.of(mode); !plan_fits(plan, gpu_bytes))
      notes += cat("why: ", parallel_mode_name(mode), " does not fit: ", gib(plan.total()), " GiB planned + ",
                   gib(kPlanReserve), " GiB kept free (the CUDA context, allocator slack) = ",
                   gib(plan.total() + kPlanReserve), " GiB > ", gib(gpu_bytes), " GiB per GPU\n");
  if (run.compute_dtype != DType::kBF16 || asked != GradDType::kAuto) return notes;
  if (run.parallel.grad_dtype == GradDType::kBF16)
    return notes + "gradients: the blocks' in bf16 (--grad-dtype auto: --grad-accum 1, no micro-batches to sum; "
                   "the ranks' sum is taken on the --reduce-dtype wire)\n";
  return notes + "gradients: fp32 (--grad-dtype auto: the gradients of several micro-batches are summed, in fp32); "
                 "bf16 needs --grad-accum 1, 2 bytes less per parameter of the blocks\n";
}

// --expert-parallel N as anvil train takes it (train/resolve.cpp): a MoE model, N dividing its
// experts and the ranks, not beside context parallelism.
void check_expert_parallel(const ParallelSection& p, const ModelConfig& model, int world) {
  const int64_t N = p.expert_parallel, E = model.moe.num_experts;
  if (N == 1) return;
  ANVIL_ENSURE(N >= 1, kUsage, "anvil plan: --expert-parallel must be at least 1, got ", N);
  ANVIL_ENSURE(model.sparse_layers() > 0, kUsage, "anvil plan: --expert-parallel ", N,
               ": the model has no mixture-of-experts layers (use --expert-parallel 1)");
  ANVIL_ENSURE(E % N == 0, kUsage, "anvil plan: --expert-parallel ", N, " must divide the model's ", E, " experts");
  ANVIL_ENSURE(world % N == 0, kUsage, "anvil plan: --expert-parallel ", N, " must divide the GPUs (--nproc ", world,
               ")");
  ANVIL_ENSURE(p.context_parallel == 1, kUsage,
               "anvil plan: --expert-parallel with --context-parallel is not supported yet (use one of them)");
}

// The settings the plan reads, resolved as a run on `world` GPUs (bf16) would resolve them, but
// for what advise() chooses: without data 2048 tokens, the rules of context parallelism and of
// offloading checked, the blocks' gradient dtype.
PlannedRun resolve_plan(TrainConfig& c, const ModelConfig& model, int world) {
  DataSection& d = c.data;
  ParallelSection& p = c.parallel;
  ANVIL_ENSURE(d.seq_len == 0 || d.seq_len >= 2, kUsage, "anvil plan: --seq-len ", d.seq_len,
               " is out of range: a sequence holds at least 2 tokens (0, the default: ", kSeqLenWithoutData, ")");
  ANVIL_ENSURE(d.micro_batch >= 1, kUsage, "anvil plan: --micro-batch must be at least 1, got ", d.micro_batch);
  ANVIL_ENSURE(d.grad_accum >= 1, kUsage, "anvil plan: --grad-accum must be at least 1, got ", d.grad_accum);
  if (d.seq_len == 0) d.seq_len = kSeqLenWithoutData;
  check_context_parallel(p.context_parallel, world, model, d.seq_len, "--nproc");
  check_expert_parallel(p, model, world);
  check_offload(p.recompute, p.offload_activations);
  const PlannedRun run{model, d, p, world};
  const bool bf16 = resolve_grad_dtype(p.grad_dtype, run.compute_dtype, d.grad_accum) == DType::kBF16;
  p.grad_dtype = bf16 ? GradDType::kBF16 : GradDType::kF32;
  return run;
}

// What the plan takes for granted without a GPU here: the GPU (the step model's) and its memory.
std::string assumed_text(const StepTarget& t, int nproc, bool mem_given, int64_t gpu_bytes) {
  if (!t.assumed) return "";
  return cat("assumed: ", nproc, " x NVIDIA ", t.gpu_name, " ", gib(gpu_bytes), " GiB", mem_given ? " (--gpu-mem)" : "",
             " (no GPU here; --gpu NAME / --gpu-mem GiB to change)\n");
}

// Each run mode's prediction (kRunModes' order).
using Predictions = std::vector<std::pair<ParallelMode, StepPrediction>>;

std::string prediction_text(const StepTarget& t, int nproc, const Predictions& predicted) {
  if (!t.gpu) return cat("step: not predicted: ", t.why_not, "\n");
  std::string s = cat("step, predicted for ", nproc, " x ", t.gpu->key, " (op costs: ", t.table.gpu, " table, ",
                      t.table.measured ? "measured" : "NOT measured, derived from the GPU's limits",
                      nproc > 1 ? cat("; bus ", t.bus_gbps, " GB/s: ", t.bus_source) : std::string(), "):\n");
  for (const auto& [mode, p] : predicted) s += prediction_line(parallel_mode_name(mode), p);
  return s;
}

Json prediction_json(const StepPrediction& p) {
  return Json{{"tokens_per_s", p.tokens_per_s}, {"step_ms", 1e3 * p.step_s},     {"forward_ms", 1e3 * p.forward_s},
              {"backward_ms", 1e3 * p.backward_s}, {"optimizer_ms", 1e3 * p.optimizer_s},
              {"communication_ms", 1e3 * p.comm_s}, {"exposed_ms", 1e3 * p.exposed_s},
              {"slowed_ms", 1e3 * p.slowed_s}};
}

Json choices_json(const std::vector<ExpertChoice>& choices) {
  Json j = Json::array();
  for (const ExpertChoice& c : choices) {
    const MemoryPlan& p = c.plan;
    j.push_back(Json{{"expert_parallel", c.degree}, {"mode", parallel_mode_name(p.mode)}, {"params", p.params},
                     {"grads", p.grads}, {"optimizer", p.optimizer}, {"weights", p.weights},
                     {"activations", p.activations}, {"exchange", p.exchange}, {"workspace", p.workspace},
                     {"total", p.total()}, {"host_snapshot", p.host_snapshot}, {"recompute", recompute_name(p.recompute)},
                     {"fits", c.fits}, {"tokens_per_s", c.tokens_per_s}, {"refused", c.refused}});
  }
  return j;
}

Json predicted_json(const StepTarget& t, const Predictions& predicted) {
  if (!t.gpu) return Json(nullptr);
  Json j = {{"gpu", t.gpu->key}, {"op_table_measured", t.table.measured}, {"bus_gbps", t.bus_gbps},
            {"bus_source", t.bus_source}};
  for (const auto& [mode, p] : predicted) j[parallel_mode_name(mode)] = prediction_json(p);
  return j;
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  TrainConfig c;  // the sections anvil plan shares with anvil train
  int64_t nproc = 1;
  double gpu_mem = 0;
  bool json = false;
  TargetFlags target;
  int64_t num_layers = 0;
  Args a("plan", "Memory per GPU of a full fine-tune in each mode (parameters, gradients, AdamW state, weight "
                 "copies, activations, workspace), whether it fits and with which --recompute, each mode's predicted step time and tokens/s (op "
                 "costs of the GPU, the bus between GPUs), and the advice as the flags to pass to anvil train: of "
                 "the modes that fit (ddp, zero2, fsdp), the fastest predicted (anvil train --mode auto chooses the same; "
                 "the first that fits where nothing is predicted); when none fits, what would (fsdp's --nproc, recomputation, a shorter "
                 "sequence). Without a GPU here it assumes an H200 and says so. The flags of the model and the run "
                 "read as anvil train's.");
  bind_shared_sections(a, c);
  a.opt("--nproc", &nproc, "N", "GPUs (ranks)")
      .opt("--gpu-mem", &gpu_mem, "GiB", "memory per GPU [default: 139.8, an H200's]")
      .opt("--gpu", &target.gpu, "NAME", "the GPU the step is predicted on (H200, H100, A100, ...) [default: this "
                                        "machine's, else H200]")
      .opt("--topo-answers", &target.topo_answers, "FILE", "recorded NVML answers (anvil topo --record) for the links")
      .flag("--json", &json, "print one JSON object");
  bind_num_layers(a, &num_layers);
  bind_step_model(a, &target.op_table, &target.bus_gbps);
  if (!a.parse(argc, argv)) return 0;
  ANVIL_ENSURE(c.model.model.empty() != c.model.preset.empty(), kUsage,
               "anvil plan: give exactly one of --model and --preset");
  ANVIL_ENSURE(nproc >= 1, kUsage, "anvil plan: --nproc must be >= 1");
  ANVIL_ENSURE(num_layers >= 0, kUsage, "anvil plan: --num-layers ", num_layers, " must be positive (or 0: all)");
  const std::string dir = c.model.preset.empty() ? resolve_model_dir(c.model.model) : "";
  const ModelConfig model = num_layers > 0 ? init_config(dir.empty() ? "" : path_join(dir, "config.json"),
                                                         c.model.preset, num_layers)
                            : dir.empty()  ? preset_config(c.model.preset)
                                           : load_config(dir);
  const int world = static_cast<int>(nproc);
  const GradDType asked = c.parallel.grad_dtype;
  const PlannedRun run = resolve_plan(c, model, world);
  const ParallelSection& par = run.parallel;
  const int64_t gpu_bytes = gpu_mem > 0 ? static_cast<int64_t>(gpu_mem * (1ll << 30)) : kH200Bytes;
  StepTarget target_of = step_target(target, world);
  skip_unmodelled(target_of, par);
  const PlanAdvice adv = advise(run, gpu_bytes, plan_speed(run, target_of));
  Predictions predicted;
  if (target_of.gpu)
    for (ParallelMode mode : kRunModes) predicted.emplace_back(mode, predict_plan(run, adv.of(mode), target_of));
  // A MoE model on several GPUs: every expert-parallel degree beside the run's.
  const std::vector<ExpertChoice> choices =
      model.sparse_layers() > 0 && world > 1 ? expert_choices(run, gpu_bytes, target_of) : std::vector<ExpertChoice>{};
  if (json) {
    auto j_of = [](const MemoryPlan& p) {
      return Json{{"params", p.params}, {"grads", p.grads}, {"optimizer", p.optimizer}, {"weights", p.weights},
                  {"activations", p.activations}, {"workspace", p.workspace}, {"exchange", p.exchange},
                  {"total", p.total()}, {"host_snapshot", p.host_snapshot}, {"host_activations", p.host_activations},
                  {"recompute", recompute_name(p.recompute)}, {"mlp_tile", p.mlp_tile}};
    };
    Json j = {{"gpu_bytes", gpu_bytes}, {"reserve_bytes", kPlanReserve},
              {"ddp", j_of(adv.ddp)}, {"zero2", j_of(adv.zero2)}, {"fsdp", j_of(adv.fsdp)},
              {"advice", adv.fits ? parallel_mode_name(adv.mode) : ""}, {"flags", adv.flags},
              {"message", adv.message}, {"gpu", target_of.gpu_name}, {"gpu_assumed", target_of.assumed},
              {"grad_dtype", grad_dtype_name(par.grad_dtype)},
              {"predicted", predicted_json(target_of, predicted)}, {"expert_parallel", par.expert_parallel},
              {"choices", choices_json(choices)}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    const std::string notes = plan_notes(adv, run, gpu_bytes, asked);
    const std::string step = prediction_text(target_of, world, predicted);
    const std::string assumed = assumed_text(target_of, world, gpu_mem > 0, gpu_bytes);
    const std::string experts = choices.empty() ? "" : expert_choices_table(choices, model, world);
    std::fputs((assumed + plan_table(adv, run, gpu_bytes) + notes + step + experts).c_str(), stdout);
  }
  return 0;
}

}  // namespace anvil
