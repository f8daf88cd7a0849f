// When a training run writes checkpoints: every --save-every steps, on a stop asked by
// SIGINT or SIGTERM (with the command that resumes), and the --on-save copies waited for at
// the end (keep_last then applies to what they pinned). Saves are asynchronous unless
// --sync-save (train/checkpoint_save.h): one in flight completes after a later step, and
// the run waits for it before a stop and at its end.
// With --keep-best, <ckpt-dir>/best.json names the checkpoint of the lowest eval loss so
// far (noted when its save completes), which --keep-last never deletes.
#pragma once

#include <cstdint>
#include <string>

#include "train/train_run.h"

namespace anvil {

// Before the first step: the saver, with the snapshot of asynchronous saves.
void prepare_saves(TrainRun& run);
// After every step: the save in flight completed when written, and the checkpoint of `step`
// when --save-every says so (at the last step, written before this returns); eval_loss: this
// step's (null: none), for --keep-best.
void save_if_due(TrainRun& run, int64_t step, const Json& eval_loss);
// A stop asked by signal `sig` after `step`: the checkpoint (unless this step's was just
// written) and what to run to go on.
void stop_at(TrainRun& run, int64_t step, int sig);
// Waits for the save in flight and the copies off the machine, then prunes beyond keep_last.
void finish_copies(TrainRun& run);

// The same command line without --resume: it resumes from the newest checkpoint.
std::string resume_command(const TrainCommand& command);

}  // namespace anvil
