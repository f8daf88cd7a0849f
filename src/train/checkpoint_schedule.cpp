// When a training run writes checkpoints: see train/checkpoint_schedule.h.
#include "train/checkpoint_schedule.h"

#include <csignal>

#include "core/fs.h"
#include "core/log.h"
#include "io/checkpoint_files.h"

namespace anvil {
namespace {

// What --keep-last must not delete, as the copies now say.
const std::vector<std::string>& pins(TrainRun& run) {
  if (run.copies) {
    run.copies->report_finished();
    run.save.pinned = run.copies->pinned();
  }
  return run.save.pinned;
}

void saved(TrainRun& run, const std::optional<SaveReport>& r) {
  if (r && run.copies) run.copies->start(r->path);
}

// The checkpoint of `step`; `complete`: written before this returns.
void save(TrainRun& run, int64_t step, bool complete) {
  pins(run);
  if (run.saver) {
    saved(run, run.saver->start(run.config().checkpoint, run.save, run.order->after(step), !complete));
    if (complete) saved(run, run.saver->wait(pins(run)));
    return;
  }
  saved(run, save_checkpoint(*run.trainer, run.base.comm.get(), run.config().checkpoint, run.save,
                             run.order->after(step)));
}

bool due(const TrainConfig& c, int64_t step) {
  return c.checkpoint.save_every > 0 && step % c.checkpoint.save_every == 0;
}

}  // namespace

void prepare_saves(TrainRun& run) {
  const CheckpointSection& c = run.config().checkpoint;
  if (c.save_every <= 0 || c.sync_save) return;
  run.saver = std::make_unique<AsyncSaver>(*run.trainer, run.base.comm.get());
}

void save_if_due(TrainRun& run, int64_t step) {
  if (run.saver) saved(run, run.saver->poll(pins(run)));
  if (due(run.config(), step)) save(run, step, step == run.config().steps);  // the last one before the summary
}

void stop_at(TrainRun& run, int64_t step, int sig) {
  const TrainConfig& c = run.config();
  const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  if (c.checkpoint.dir.empty()) {
    log_warn("stopped by ", name, " after step ", step, " of ", c.steps,
             ": nothing saved (without --ckpt-dir a stopped run keeps nothing)");
    return;
  }
  if (!due(c, step)) save(run, step, true);
  else if (run.saver) saved(run, run.saver->wait(pins(run)));
  log_info("stopped by ", name, " after step ", step, " of ", c.steps, ": saved ",
           path_join(c.checkpoint.dir, checkpoint_name(step)));
  log_info("to resume: ", resume_command(run.command));
}

void finish_copies(TrainRun& run) {
  if (run.saver) saved(run, run.saver->wait(pins(run)));
  if (!run.copies) return;
  const int failed = run.copies->wait_all();
  prune_checkpoints(run.config().checkpoint.dir, run.config().checkpoint.keep_last, run.copies->pinned());
  if (failed > 0) log_warn("--on-save: ", failed, " cop", failed == 1 ? "y" : "ies", " failed (see above)");
}

std::string resume_command(const TrainCommand& command) {
  std::string cmd = program_name() + " train";
  for (size_t i = 0; i < command.args.size(); ++i) {
    const std::string& a = command.args[i];
    if (a == "--resume") {
      ++i;
      continue;
    }
    if (a.rfind("--resume=", 0) == 0) continue;
    if (a == "--reset-data-position") continue;  // the new checkpoint's position is the one to continue from
    const bool plain =
        a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") ==
        std::string::npos;
    std::string quoted = "'";
    for (char c : a) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    cmd += " " + (plain && !a.empty() ? a : quoted + "'");
  }
  return cmd;
}

}  // namespace anvil
