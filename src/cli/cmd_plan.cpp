// anvil plan: the memory per GPU of each mode, before launching anything (no GPU needed).
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/json.h"
#include "io/hub.h"
#include "model/config.h"
#include "plan/memory_plan.h"

namespace anvil {

int cmd_plan(int argc, char** argv) {
  std::string model, preset, mode = "ddp", recompute = "auto", reduce_dtype = "fp32", grad_dtype = "auto";
  int64_t nproc = 1, seq_len = 2048, micro_batch = 1, grad_accum = 1;
  double gpu_mem = 0;
  bool json = false;
  Args a("plan", "Memory per GPU of a full fine-tune in each mode (parameters, gradients, AdamW state, weight copies,\n"
                 "activations, workspace), whether it fits, and the rule's advice: ddp when it fits, else fsdp.");
  a.opt("--model", &model, "DIR|ID", "model folder or hub id in the local cache")
      .opt("--preset", &preset, "NAME", "a built-in shape instead of --model")
      .choice("--mode", &mode, {"ddp", "fsdp"}, "the mode you intend to run (both are shown)")
      .opt("--nproc", &nproc, "N", "GPUs (ranks)")
      .opt("--seq-len", &seq_len, "T", "tokens per sequence")
      .opt("--micro-batch", &micro_batch, "B", "sequences per micro-batch")
      .opt("--grad-accum", &grad_accum, "K", "micro-batches per optimizer step (as anvil train)")
      .choice("--recompute", &recompute, {"none", "selective", "full", "auto"},
              "activation recomputation (auto: the fastest that fits)")
      .choice("--reduce-dtype", &reduce_dtype, {"fp32", "bf16"}, "gradient reduction dtype (as anvil train)")
      .choice("--grad-dtype", &grad_dtype, {"auto", "fp32", "bf16"}, "the blocks' gradients (as anvil train)")
      .opt("--gpu-mem", &gpu_mem, "GiB", "memory per GPU [default: 139.8, an H200's]")
      .flag("--json", &json, "print one JSON object");
  if (!a.parse(argc, argv)) return 0;
  ANVIL_ENSURE(model.empty() != preset.empty(), kUsage, "anvil plan: give exactly one of --model and --preset");
  ANVIL_ENSURE(nproc >= 1 && seq_len >= 2 && micro_batch >= 1 && grad_accum >= 1, kUsage,
               "anvil plan: --nproc, --micro-batch, --grad-accum must be >= 1 and --seq-len >= 2");
  PlanInput in;
  in.config = preset.empty() ? load_config(resolve_model_dir(model)) : preset_config(preset);
  in.world = static_cast<int>(nproc);
  in.seq_len = seq_len;
  in.micro_batch = micro_batch;
  in.mode = parse_parallel_mode(mode);
  in.reduce_dtype = reduce_dtype == "bf16" ? DType::kBF16 : DType::kF32;
  in.grad_dtype = resolve_grad_dtype(parse_grad_dtype(grad_dtype), in.compute_dtype, in.world, grad_accum);
  const int64_t gpu_bytes = gpu_mem > 0 ? static_cast<int64_t>(gpu_mem * (1ll << 30)) : kH200Bytes;
  const PlanAdvice adv = advise(in, parse_recompute(recompute), gpu_bytes);
  if (json) {
    auto j_of = [](const MemoryPlan& p) {
      return Json{{"params", p.params}, {"grads", p.grads}, {"optimizer", p.optimizer}, {"weights", p.weights},
                  {"activations", p.activations}, {"workspace", p.workspace}, {"total", p.total()},
                  {"recompute", recompute_name(p.recompute)}};
    };
    Json j = {{"gpu_bytes", gpu_bytes}, {"ddp", j_of(adv.ddp)}, {"fsdp", j_of(adv.fsdp)}, {"advice", adv.fits ? parallel_mode_name(adv.mode) : ""},
              {"message", adv.message}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::fputs(plan_table(adv, in, gpu_bytes).c_str(), stdout);
  }
  return 0;
}

}  // namespace anvil
