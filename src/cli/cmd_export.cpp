// anvil export: flags -> ExportOptions -> run_export (train/checkpoint.h).
#include "cli/args.h"
#include "cli/commands.h"
#include "train/checkpoint.h"

namespace anvil {

int cmd_export(int argc, char** argv) {
  ExportOptions o;
  std::string shard_size = "5G";
  Args a("export", "Turn a checkpoint (any rank count, either mode) into a Hugging Face model folder: config.json,\n"
                   "model.safetensors (sharded with an index past --max-shard-size), generation_config.json and the\n"
                   "tokenizer files of the model it was trained from. --full writes one safetensors file with the\n"
                   "weights and AdamW's m and v (optimizer.exp_avg.<name>, optimizer.exp_avg_sq.<name>) in fp32.");
  a.opt("--ckpt", &o.ckpt, "PATH", "checkpoint folder (step-N)", true)
      .opt("--out", &o.out, "DIR|FILE", "model folder to write (with --full: a .safetensors file)", true)
      .choice("--dtype", &o.dtype, {"bf16", "fp32"}, "dtype of the exported weights")
      .flag("--full", &o.full, "one file with weights and optimizer state (fp32)")
      .opt("--max-shard-size", &shard_size, "SIZE", "largest model-*.safetensors file (e.g. 5G, 500M)");
  if (!a.parse(argc, argv)) return 0;
  o.max_shard_bytes = parse_size(shard_size, "--max-shard-size");
  run_export(o);
  return 0;
}

}  // namespace anvil
