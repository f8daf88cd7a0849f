// The checks phase of anvil train: everything that can be checked before any weight is
// read or data packed (usage, hyperparameters, data and tokenizer, writable outputs); then
// the checkpoint folder is locked for the run and cleared of what interrupted saves left.
#pragma once

#include "core/file_lock.h"
#include "train/config.h"

namespace anvil {

// Throws kUsage (one line naming the flag) on the first problem. Resolves c.model.device
// (cpu or cuda: train/open_run.h resolve_device).
void check_train(TrainConfig& c, FileLock& ckpt_lock);

// The optimizer's settings, in the ranges where AdamW and the schedule mean something
// (`command`: "anvil train" in the messages).
void check_optimizer(const OptimSection& o, int64_t steps, const char* command);

}  // namespace anvil
