// When a training run writes checkpoints: see train/checkpoint_schedule.h.
#include "train/checkpoint_schedule.h"

#include <csignal>

#include "core/fs.h"
#include "core/log.h"
#include "io/checkpoint_files.h"

namespace anvil {
namespace {

void save(TrainRun& run, int64_t step) {
  if (run.copies) {
    run.copies->report_finished();
    run.save.pinned = run.copies->pinned();
  }
  const SaveReport r = save_checkpoint(*run.trainer, run.base.comm.get(), run.config().checkpoint, run.save,
                                     run.order->after(step));
  if (run.copies) run.copies->start(r.path);
}

bool due(const TrainConfig& c, int64_t step) {
  return c.checkpoint.save_every > 0 && step % c.checkpoint.save_every == 0;
}

}  // namespace

void save_if_due(TrainRun& run, int64_t step) {
  if (due(run.config(), step)) save(run, step);
}

void stop_at(TrainRun& run, int64_t step, int sig) {
  const TrainConfig& c = run.config();
  const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  if (c.checkpoint.dir.empty()) {
    log_warn("stopped by ", name, " after step ", step, " of ", c.steps,
             ": nothing saved (without --ckpt-dir a stopped run keeps nothing)");
    return;
  }
  if (!due(c, step)) save(run, step);
  log_info("stopped by ", name, " after step ", step, " of ", c.steps, ": saved ",
           path_join(c.checkpoint.dir, checkpoint_name(step)));
  log_info("to resume: ", resume_command(run.command));
}

void finish_copies(TrainRun& run) {
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
