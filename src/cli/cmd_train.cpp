// anvil train: flags -> the config tree (cli/config_flags.h) -> run_train (train/loop.h).
#include <filesystem>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/launch.h"
#include "cli/config_flags.h"
#include "core/fs.h"
#include "ops/ops.h"
#include "train/loop.h"

namespace anvil {
namespace {

// A path as the run saw it, absolute, so that the settings read the same from any folder.
void absolute(std::string& path) {
  if (!path.empty()) path = std::filesystem::absolute(path).lexically_normal().string();
}

// The settings as anvil_config.toml: the resolved config through train's own flags (every
// auto resolved, the device named), its files and folders absolute (a model or data given as
// a hub id stays one). `anvil train --config FILE` repeats the run from any folder.
std::string resolved_settings_toml(const TrainConfig& resolved, LaunchFlags launch) {
  TrainConfig c = resolved;
  for (std::string* input : {&c.model.model, &c.data.source, &c.data.tokenizer, &c.eval.data})
    if (path_exists(*input)) absolute(*input);
  for (std::string* output : {&c.data.cache, &c.checkpoint.dir, &c.export_.dir, &c.log.metrics, &c.log.tensorboard})
    absolute(*output);
  Args a("train", "");
  bind_train_flags(a, c);
  launch.declare(a);
  return "# anvil train settings, as resolved; anvil train --config FILE reads them\n" + a.to_toml();
}

}  // namespace

int cmd_train(int argc, char** argv) {
  TrainConfig c;
  LaunchFlags launch;
  Args a("train", "Full fine-tune a Qwen3, Qwen2 or Llama 3 model: fp32 master weights, AdamW, clipping at 1.0,\n"
                  "gradient accumulation; the loss every --log-every steps, tokens/s and peak memory at the end.");
  a.config("--config");
  bind_train_flags(a, c);
  launch.declare(a);
  if (!a.parse(argc, argv)) return 0;
  const bool on_gpu = c.model.device == "cuda" || (c.model.device.empty() && cuda_available());
  if (launch_if_requested("train", launch, on_gpu, argc, argv)) return 0;
  TrainCommand command;
  command.settings_toml = [launch](const TrainConfig& resolved) { return resolved_settings_toml(resolved, launch); };
  command.args.assign(argv, argv + argc);
  if (c.log.every < 1) c.log.every = 1;
  const TrainSummary s = run_train(c, command);
  return s.stop_signal != 0 ? 128 + s.stop_signal : 0;  // 130 (SIGINT) or 143 (SIGTERM)
}

}  // namespace anvil
