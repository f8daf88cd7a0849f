// anvil train: the training loop around the Trainer: data, steps, logging, metrics,
// checkpoints (save and resume), export. In four phases: everything checked (usage,
// hyperparameters, data and tokenizer, writable outputs, the checkpoint folder's lock:
// train/checks.h) before any weight is read or data packed; the run opened
// (train/train_run.h); the loop (a SIGINT or SIGTERM stops it after the step in flight,
// with a checkpoint: train/checkpoint_schedule.h); the finish (summary, export, waiting for
// --on-save copies). The log line, ETA, MFU and metrics: train/progress.h.
#pragma once

#include "train/config.h"
#include "train/progress.h"
#include "train/train_run.h"

namespace anvil {

TrainSummary run_train(const TrainConfig& config, const TrainCommand& command);

}  // namespace anvil
