// anvil init --config CONFIG.json|--preset NAME --out DIR [--seed N] [--dtype fp32|bf16] [--num-layers N]
#include "cli/args.h"
#include "cli/commands.h"
#include "model/config.h"
#include "model/init.h"

namespace anvil {

int cmd_init(int argc, char** argv) {
  InitOptions o;
  int64_t seed = 0;
  std::string presets;
  for (auto& n : preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  Args a("init", "Write a Hugging Face model folder (config.json + model.safetensors) with weights initialised as\n"
                 "transformers does: normal(0, initializer_range), norms at 1, biases at 0.");
  a.opt("--config", &o.config, "FILE", "config.json of a Qwen3, Qwen3-MoE, Qwen2 or Llama model")
      .opt("--preset", &o.preset, "NAME", "a built-in shape instead of --config: " + presets)
      .opt("--out", &o.out, "DIR", "the folder to write", true)
      .opt("--seed", &seed, "N", "random seed")
      .opt("--num-layers", &o.num_layers, "N", "the first N layers only: a shallower copy of the preset or config")
      .choice("--dtype", &o.dtype, {"fp32", "bf16"}, "dtype of the written weights");
  if (!a.parse(argc, argv)) return 0;
  o.seed = static_cast<uint64_t>(seed);
  run_init(o);
  return 0;
}

}  // namespace anvil
