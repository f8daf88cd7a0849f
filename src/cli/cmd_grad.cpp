// anvil grad --model DIR --tokens FILE.safetensors --out OUT.safetensors [--device cpu|cuda] [--objective dpo ...]
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/config_flags.h"
#include "train/grad.h"

namespace anvil {

int cmd_grad(int argc, char** argv) {
  GradOptions o;
  Args a("grad", "Loss, logits and the gradient of every parameter for one batch, computed as the reference does\n"
                 "(labels = input_ids, shifted inside), written as safetensors: loss F32 [1], logits F32 [B, T, V],\n"
                 "grad.<name> F32 under Hugging Face names (tied models: the embedding's name only).");
  a.opt("--model", &o.model, "DIR|ID", "model folder, or a hub id in the local Hugging Face cache", true)
      .opt("--tokens", &o.tokens, "FILE",
           "safetensors holding input_ids I64 [B, T]; with position_ids I64 [B, T] (0 at each document's "
           "first token), documents packed in each sequence: attention, RoPE and the loss per document", true)
      .opt("--out", &o.out, "FILE", "output safetensors", true);
  o.device.clear();
  bind_device(a, &o.device);
  bind_mlp_tile(a, &o.mlp_tile);
  bind_fp8(a, &o.fp8);
  bind_objective(a, &o.objective, o.dpo);
  a.flag("--router-aux-loss", &o.router_aux_loss,
         "a mixture-of-experts model: add the load-balancing loss even where config.json's output_router_logits "
         "is false");
  if (!a.parse(argc, argv)) return 0;
  if (o.objective == Objective::kDpo) check_dpo(o.dpo);
  o.device = device_or_default(o.device, "grad");
  const double loss = run_grad(o);
  std::printf("loss %.9g\nwrote %s\n", loss, o.out.c_str());
  return 0;
}

}  // namespace anvil
