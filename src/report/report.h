// anvil report: a training run's --metrics JSON lines as one self-contained HTML page
// (inline SVG charts, no script, nothing fetched) and a short summary for the terminal.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace anvil {

// One logged step; the fields a line lacks (or holds as null) are absent.
struct MetricsRow {
  int64_t step = 0;
  std::optional<double> loss, eval_loss, lr, grad_norm, tokens_per_s, mfu, peak_mem_gib, planned_mem_gib, elapsed_s;
};

struct Metrics {
  std::string source;  // the file, for titles and messages
  // By step, ascending; a step logged again (a resumed run appending to the same file)
  // keeps its latest line.
  std::vector<MetricsRow> rows;
  double elapsed_s = 0;  // summed over the runs that wrote the file (elapsed_s restarts per run)
  int runs = 0;          // how many runs wrote the file (a step or elapsed time going back starts one)
};

// Reads a --metrics file; a malformed line throws naming the file and the line number.
Metrics read_metrics(const std::string& path);

struct ReportSummary {
  int64_t first_step = 0, last_step = 0, logged = 0;
  std::optional<double> final_loss, best_loss, final_eval, best_eval, mean_tokens_per_s, mean_mfu, peak_mem_gib,
      planned_mem_gib;
  int64_t best_loss_step = 0, best_eval_step = 0;
  bool warm_excluded = false;  // the means leave out steps 1 to 10 (as the trainer's own figure)
  double elapsed_s = 0;
};
ReportSummary summarize(const Metrics& m);
// A few aligned lines: steps, final and best losses, mean tokens/s, time taken.
std::string summary_text(const ReportSummary& s);

// The HTML page: summary cards and the charts (ids chart-loss, chart-lr, chart-grad-norm,
// chart-tokens-per-s, chart-mfu, chart-memory). Each series is an SVG <g class="series"
// data-series=NAME data-count=N> holding a polyline of its N points.
std::string render_report_html(const Metrics& m);

}  // namespace anvil
