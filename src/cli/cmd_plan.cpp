// anvil plan: the memory per GPU of each mode, before launching anything (no GPU needed). The
// flags it shares with anvil train bind to the same config tree (cli/train_flags.h).
#include <cstdio>
#include <utility>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/train_flags.h"
#include "core/json.h"
#include "io/hub.h"
#include "model/config.h"
#include "plan/memory_plan.h"

namespace anvil {
namespace {

std::string gib(int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", static_cast<double>(bytes) / (1ll << 30));
  return b;
}

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

}  // namespace

int cmd_plan(int argc, char** argv) {
  TrainConfig c;  // the flags shared with anvil train, at the plan's defaults
  c.data.seq_len = 2048;
  c.parallel.mode = ParallelMode::kDdp;
  c.parallel.recompute = Recompute::kAuto;
  int64_t nproc = 1;
  double gpu_mem = 0;
  bool json = false;
  Args a("plan", "Memory per GPU of a full fine-tune in each mode (parameters, gradients, AdamW state, weight copies,\n"
                 "activations, workspace), whether it fits, and the rule's advice: ddp when it fits, else fsdp.");
  a.opt("--model", &c.model.model, "DIR|ID", "model folder or hub id in the local cache")
      .opt("--preset", &c.model.preset, "NAME", "a built-in shape instead of --model");
  bind_mode(a, &c.parallel.mode, "the mode you intend to run (both are shown)", {"ddp", "fsdp"})
      .opt("--nproc", &nproc, "N", "GPUs (ranks)")
      .opt("--seq-len", &c.data.seq_len, "T", "tokens per sequence")
      .opt("--micro-batch", &c.data.micro_batch, "B", "sequences per micro-batch")
      .opt("--grad-accum", &c.data.grad_accum, "K", "micro-batches per optimizer step (as anvil train)");
  bind_recompute(a, &c.parallel.recompute, "activation recomputation (auto: the fastest that fits)");
  bind_reduce_dtype(a, &c.parallel.reduce_dtype, "gradient reduction dtype (as anvil train)");
  bind_fp8(a, &c.parallel.fp8, "the blocks' linear layers in FP8 (as anvil train): their operand copies");
  bind_grad_dtype(a, &c.parallel.grad_dtype, "the blocks' gradients (as anvil train)")
      .opt("--gpu-mem", &gpu_mem, "GiB", "memory per GPU [default: 139.8, an H200's]")
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
  in.seq_len = d.seq_len;
  in.micro_batch = d.micro_batch;
  in.mode = c.parallel.mode;
  in.reduce_dtype = c.parallel.reduce_dtype;
  in.fp8 = c.parallel.fp8;
  in.grad_dtype = resolve_grad_dtype(c.parallel.grad_dtype, in.compute_dtype, d.grad_accum);
  const int64_t gpu_bytes = gpu_mem > 0 ? static_cast<int64_t>(gpu_mem * (1ll << 30)) : kH200Bytes;
  const PlanAdvice adv = advise(in, c.parallel.recompute, gpu_bytes);
  if (json) {
    auto j_of = [](const MemoryPlan& p) {
      return Json{{"params", p.params}, {"grads", p.grads}, {"optimizer", p.optimizer}, {"weights", p.weights},
                  {"activations", p.activations}, {"workspace", p.workspace}, {"total", p.total()},
                  {"host_snapshot", p.host_snapshot},
                  {"recompute", recompute_name(p.recompute)}};
    };
    Json j = {{"gpu_bytes", gpu_bytes}, {"reserve_bytes", kPlanReserve},
              {"ddp", j_of(adv.ddp)}, {"fsdp", j_of(adv.fsdp)},
              {"advice", adv.fits ? parallel_mode_name(adv.mode) : ""}, {"message", adv.message},
              {"grad_dtype", in.grad_dtype == DType::kBF16 ? "bf16" : "fp32"}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    const std::string notes = plan_notes(adv, in, gpu_bytes, c.parallel.grad_dtype);
    std::fputs((plan_table(adv, in, gpu_bytes) + notes).c_str(), stdout);
  }
  return 0;
}

}  // namespace anvil
