// What a training run holds from its opening to its end, and its opening: the process
// group and model config (train/open_run.h), the data, then the weights (the newest
// checkpoint's that passes its checks, checked against the model, or the model's own), the Trainer
// with every auto resolved (train/resolve.h) and the optimizer state.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/file_lock.h"
#include "data/blocks.h"
#include "report/tensorboard.h"
#include "train/checkpoint_load.h"
#include "train/checkpoint_save.h"
#include "train/config.h"
#include "train/dpo_reference.h"
#include "train/metrics_file.h"
#include "train/open_run.h"
#include "train/save_copies.h"
#include "train/trainer.h"

namespace anvil {

// The command as given: the arguments (for the resume hint) and the settings as TOML
// (written as anvil_config.toml into each checkpoint and the export folder).
struct TrainCommand {
  std::vector<std::string> args;
  // The run's settings as anvil_config.toml, from the config with every auto resolved (the
  // command's flags, which the CLI knows); config_toml holds it once the run is open.
  std::function<std::string(const TrainConfig&)> settings_toml;
  std::string config_toml;
};

struct TrainRun {
  FileLock ckpt_lock;  // one run per checkpoint folder
  TrainCommand command;
  OpenRun base;
  std::unique_ptr<BlockSource> data;
  std::unique_ptr<BlockSource> eval_data;  // --eval-data, packed as the training data
  std::vector<ReferenceLogps> reference;   // --objective dpo: the data's, then the eval data's
  ResumePoint point;  // step 0 on a fresh start
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<BatchOrder> order;
  int64_t per_step = 0;  // sequences per step on each rank
  SaveSettings save;
  std::unique_ptr<SaveCopies> copies;  // --on-save, on rank 0
  std::unique_ptr<CheckpointSaver> saver;  // train/checkpoint_save.h
  std::map<std::string, double> save_eval_losses;  // --keep-best: a save in flight's eval loss, by path
  std::string run_id;  // new_run_id(), or the resumed checkpoint's
  std::unique_ptr<MetricsFile> metrics;  // --metrics, on rank 0
  std::unique_ptr<TensorBoardWriter> tensorboard;  // --tensorboard, on rank 0
  Throughput throughput{0};

  // The resolved config (once the Trainer is built): the one holder of every setting.
  const TrainConfig& config() const { return trainer->settings().config; }
};

// Opens the run of `c` (checked by check_train): after it, run.config() is resolved.
void open_train(const TrainConfig& c, TrainRun& run);

}  // namespace anvil
