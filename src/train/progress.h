// A training run's progress as it is shown and recorded: the one-line progress bar with
// ETA on a terminal, the step's log line and metrics (JSON lines: loss, tokens/s, MFU,
// memory), and the summary lines at the end.
#pragma once

#include <cstdint>
#include <vector>

#include "core/json.h"
#include "train/train_run.h"

namespace anvil {

struct TrainSummary {
  std::vector<double> losses;
  std::vector<double> eval_losses;
  double tokens_per_s = 0;
  double peak_host_gib = 0;
  int stop_signal = 0;  // SIGINT or SIGTERM when a signal stopped the run early
};

// A one-line progress bar with ETA, redrawn in place on a terminal (stderr a TTY, rank 0);
// log lines clear it first. Elsewhere (files, pipes, CI) only the plain log lines appear.
class Progress {
 public:
  explicit Progress(bool on);
  void clear();
  void draw(int64_t step, int64_t steps, double loss, double seconds_left);

 private:
  bool on_;
  bool drawn_ = false;
};

double peak_rss_gib();

// The step's line (rank 0, every --log-every steps, the first and the last) and metrics;
// tokens: the step's real tokens, all ranks (padding excluded: tokens/s and MFU count those).
// With an evaluation at this step, its loss goes into the line's metrics too, and its other
// metrics (dpo: TRL's rewards/... and logps/...) as eval_<name>. A DPO step's metrics (TRL's
// names) go into the line, the metrics record and TensorBoard; so do a Qwen3-MoE step's router
// statistics (train/router_stats.h; the line: "router share MIN-MAX  aux A").
void log_step(TrainRun& run, int64_t step, const StepStats& st, int64_t tokens, double seconds, double elapsed,
              double eta, const Json& eval_loss, const std::vector<std::pair<std::string, double>>& eval_metrics = {});
// "done: N steps, tokens/s" with MFU and peak memory on a GPU, and the host's.
void log_done(const TrainRun& run, const TrainSummary& summary);
// The last line: the final losses, the time taken and where the model went.
void log_last_line(const TrainConfig& c, const TrainSummary& summary, double seconds);

}  // namespace anvil
