// anvil report: training runs' --metrics JSON lines as one self-contained HTML page
// (inline SVG charts, nothing fetched) and a short summary for the terminal.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace anvil {

// One logged step; the fields a line lacks (or holds as null) are absent.
struct MetricsRow {
  int64_t step = 0;
  std::optional<double> loss, eval_loss, lr, grad_norm, tokens_per_s, mean_tokens_per_s, mfu, peak_mem_gib,
      planned_mem_gib, elapsed_s;
  // --objective dpo: TRL's metrics of the step (rewards/chosen, ...) and of its evaluation (eval_...)
  std::optional<double> rewards_chosen, rewards_rejected, rewards_margins, rewards_accuracies, eval_rewards_margins,
      eval_rewards_accuracies;
};

// One run of a metrics file: the records after its header (a file written before headers
// holds one run without an id).
struct Metrics {
  std::string source;  // the file, for titles and messages
  std::string run_id;  // the header's, "" when the file has none
  // By step, ascending; a step logged again (a resumed run appending to the same file)
  // keeps its latest line.
  std::vector<MetricsRow> rows;
  double elapsed_s = 0;  // summed over the segments (elapsed_s restarts when a run resumes)
  int runs = 0;          // its segments: the run and each resume (a step or elapsed time going back starts one)
  std::string label() const;  // "run <id>" or the file
};

// Reads a --metrics file, each run (a header with a new run id) on its own; a resumed run's
// header continues its run. A malformed line throws naming the file and the line number.
std::vector<Metrics> read_metrics(const std::string& path);

struct ReportSummary {
  int64_t first_step = 0, last_step = 0, logged = 0;
  // mean_tokens_per_s: tokens over step time after step 10, as the train log's "done" line
  // (the last record's mean_tokens_per_s; the mean of the logged steps' for older files).
  std::optional<double> final_loss, best_loss, final_eval, best_eval, mean_tokens_per_s, mean_mfu, peak_mem_gib,
      planned_mem_gib;
  int64_t best_loss_step = 0, best_eval_step = 0;
  bool tokens_as_log = false;  // mean_tokens_per_s is the train log's figure (records carry it)
  bool warm_excluded = false;  // the means leave out steps 1 to 10 (as the trainer's own figure)
  double elapsed_s = 0;
};
ReportSummary summarize(const Metrics& m);
// A few aligned lines: steps, final and best losses, mean tokens/s, time taken.
std::string summary_text(const ReportSummary& s);

// The HTML page of one or several runs (from one file or several, to compare them):
// summary cards per run and the charts (ids chart-loss, chart-lr, chart-grad-norm,
// chart-tokens-per-s, chart-mfu, chart-memory), each run its own series in its own colour.
// Each series is an SVG <g class="series" data-series=NAME data-count=N data-run=LABEL>
// holding a polyline of its N points. A slider smooths the lines with TensorBoard's
// debiased exponential moving average (an inline script; the page fetches nothing);
// "#smooth=0.6" in the address sets it.
std::string render_report_html(const std::vector<Metrics>& runs);

}  // namespace anvil
