// anvil train: flags -> the config tree (cli/config_flags.h) -> run_train (train/loop.h).
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/launch.h"
#include "cli/config_flags.h"
#include "ops/ops.h"
#include "train/loop.h"

namespace anvil {

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
  command.config_toml = "# anvil train settings, as resolved; anvil train --config FILE reads them\n" + a.to_toml();
  command.args.assign(argv, argv + argc);
  if (c.log.every < 1) c.log.every = 1;
  const TrainSummary s = run_train(c, command);
  return s.stop_signal != 0 ? 128 + s.stop_signal : 0;  // 130 (SIGINT) or 143 (SIGTERM)
}

}  // namespace anvil
