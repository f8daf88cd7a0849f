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

// What keep_last must not delete: the checkpoints copies still read, and the best one.
std::vector<std::string> pinned_now(TrainRun& run) {
  std::vector<std::string> pinned = run.copies ? run.copies->pinned() : std::vector<std::string>();
  const Best best = read_best(run.config().checkpoint);
  if (!best.checkpoint.empty()) pinned.push_back(best.checkpoint);
  return pinned;
}

// Records checkpoint `path` as the best when its step's eval loss is the lowest so far
// (true then: the former best may go).
bool note_if_best(const CheckpointSection& k, const std::string& path, const Json& eval_loss) {
  if (!k.keep_best || !eval_loss.is_number()) return false;
  const Best best = read_best(k);
  const double loss = eval_loss.get<double>();
  if (!best.checkpoint.empty() && best.eval_loss <= loss) return false;
  const Json record = {{"checkpoint", std::filesystem::path(path).filename().string()}, {"eval_loss", loss}};
  write_file_atomic(path_join(k.dir, kBestFile), record.dump() + "\n");
  log_info("best eval loss so far (", loss, "): ", path, ", kept by --keep-best");
  return true;
}

void save(TrainRun& run, int64_t step, const Json& eval_loss) {
  if (run.copies) run.copies->report_finished();
  if (run.base.rank == 0) run.save.pinned = pinned_now(run);
  const SaveReport r = save_checkpoint(*run.trainer, run.base.comm.get(), run.config().checkpoint, run.save,
                                     run.order->after(step));
  const CheckpointSection& k = run.config().checkpoint;
  if (run.base.rank == 0 && note_if_best(k, r.path, eval_loss)) prune_checkpoints(k.dir, k.keep_last, pinned_now(run));
  if (run.copies) run.copies->start(r.path);
}

bool due(const TrainConfig& c, int64_t step) {
  return c.checkpoint.save_every > 0 && step % c.checkpoint.save_every == 0;
}

}  // namespace

void save_if_due(TrainRun& run, int64_t step, const Json& eval_loss) {
  if (due(run.config(), step)) save(run, step, eval_loss);
}

void stop_at(TrainRun& run, int64_t step, int sig) {
  const TrainConfig& c = run.config();
  const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  if (c.checkpoint.dir.empty()) {
    log_warn("stopped by ", name, " after step ", step, " of ", c.steps,
             ": nothing saved (without --ckpt-dir a stopped run keeps nothing)");
    return;
  }
  if (!due(c, step)) save(run, step, Json());
  log_info("stopped by ", name, " after step ", step, " of ", c.steps, ": saved ",
           path_join(c.checkpoint.dir, checkpoint_name(step)));
  log_info("to resume: ", resume_command(run.command));
}

void finish_copies(TrainRun& run) {
  if (!run.copies) return;
  const int failed = run.copies->wait_all();
  prune_checkpoints(run.config().checkpoint.dir, run.config().checkpoint.keep_last, pinned_now(run));
  if (failed > 0) log_warn("--on-save: ", failed, " cop", failed == 1 ? "y" : "ies", " failed (see above)");
}

std::string resume_command(const TrainCommand& command) {
  std::string cmd = "anvil train";
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
