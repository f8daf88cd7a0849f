// When a training run writes checkpoints: see train/checkpoint_schedule.h.
#include "train/checkpoint_schedule.h"

#include <csignal>
#include <filesystem>

#include "core/fs.h"
#include "core/log.h"
#include "io/checkpoint_files.h"

namespace anvil {
namespace {

constexpr const char* kBestFile = "best.json";

// --keep-best's record: the checkpoint of the lowest eval loss so far (empty: none yet).
struct Best {
  std::string checkpoint;
  double eval_loss = 0;
};

Best read_best(const CheckpointSection& k) {
  const std::string file = path_join(k.dir, kBestFile);
  if (!k.keep_best || !path_exists(file)) return {};
  const Json j = json_read_file(file);
  return {path_join(k.dir, j.value("checkpoint", "")), j.value("eval_loss", 0.0)};
}

// What --keep-last must not delete, as of now: the checkpoints copies still read, and (rank
// 0, which prunes) the best one.
const std::vector<std::string>& pins(TrainRun& run) {
  std::vector<std::string> pinned;
  if (run.copies) {
    run.copies->report_finished();
    pinned = run.copies->pinned();
  }
  const Best best = run.base.rank == 0 ? read_best(run.config().checkpoint) : Best{};
  if (!best.checkpoint.empty()) pinned.push_back(best.checkpoint);
  run.save.pinned = std::move(pinned);
  return run.save.pinned;
}

// Records checkpoint `path` as the best when its step's eval loss is the lowest so far
// (true then: the former best may go).
bool note_if_best(const CheckpointSection& k, const std::string& path, double loss) {
  const Best best = read_best(k);
  if (!best.checkpoint.empty() && best.eval_loss <= loss) return false;
  const Json record = {{"checkpoint", std::filesystem::path(path).filename().string()}, {"eval_loss", loss}};
  write_file_atomic(path_join(k.dir, kBestFile), record.dump() + "\n");
  log_info("best eval loss so far (", loss, "): ", path, ", kept by --keep-best");
  return true;
}

// A checkpoint complete: --keep-best's record of its step's eval loss, then its --on-save copy.
void saved(TrainRun& run, const std::optional<SaveReport>& r) {
  if (!r) return;
  const CheckpointSection& k = run.config().checkpoint;
  if (auto it = run.save_eval_losses.find(r->path); it != run.save_eval_losses.end()) {
    if (run.base.rank == 0 && note_if_best(k, r->path, it->second)) prune_checkpoints(k.dir, k.keep_last, pins(run));
    run.save_eval_losses.erase(it);
  }
  if (run.copies) run.copies->start(r->path);
}

// The checkpoint of `step`; `complete`: written before this returns. eval_loss: the step's.
void save(TrainRun& run, int64_t step, bool complete, const Json& eval_loss) {
  const CheckpointSection& k = run.config().checkpoint;
  if (k.keep_best && eval_loss.is_number())
    run.save_eval_losses[path_join(k.dir, checkpoint_name(step))] = eval_loss.get<double>();
  pins(run);
  saved(run, run.saver->start(k, run.save, run.order->after(step), !complete));
  if (complete || !run.saver->background()) saved(run, run.saver->wait(pins(run)));
}

// Every --save-every steps, and the last step wherever there is a --ckpt-dir: a run that
// ends never leaves its last steps unsaved.
bool due(const TrainConfig& c, int64_t step) {
  if (!c.checkpoint.dir.empty() && step == c.steps) return true;
  return c.checkpoint.save_every > 0 && step % c.checkpoint.save_every == 0;
}

}  // namespace

void prepare_saves(TrainRun& run) {
  const CheckpointSection& c = run.config().checkpoint;
  const bool background = c.save_every > 0 && !c.sync_save;
  run.saver = std::make_unique<CheckpointSaver>(*run.trainer, run.base.comm.get(), background);
}

void save_if_due(TrainRun& run, int64_t step, const Json& eval_loss) {
  saved(run, run.saver->poll(pins(run)));
  if (due(run.config(), step)) save(run, step, step == run.config().steps, eval_loss);  // the last: before the summary
}

void stop_at(TrainRun& run, int64_t step, int sig) {
  const TrainConfig& c = run.config();
  const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  if (c.checkpoint.dir.empty()) {
    log_warn("stopped by ", name, " after step ", step, " of ", c.steps,
             ": nothing saved (without --ckpt-dir a stopped run keeps nothing)");
    return;
  }
  if (!due(c, step)) save(run, step, true, Json());
  else saved(run, run.saver->wait(pins(run)));
  log_info("stopped by ", name, " after step ", step, " of ", c.steps, ": saved ",
           path_join(c.checkpoint.dir, checkpoint_name(step)));
  log_info("to resume: ", resume_command(run.command));
}

void finish_copies(TrainRun& run) {
  saved(run, run.saver->wait(pins(run)));
  if (!run.copies) return;
  const int failed = run.copies->wait_all();
  prune_checkpoints(run.config().checkpoint.dir, run.config().checkpoint.keep_last, pins(run));
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
