// anvil report METRICS.jsonl [--out report.html]: the charts of a run's --metrics file as
// one self-contained HTML page, and a summary in the terminal.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/fs.h"
#include "report/report.h"

namespace anvil {

int cmd_report(int argc, char** argv) {
  std::string metrics, out;
  Args a("report", "Charts of a training run's --metrics JSON lines in one self-contained HTML page (inline SVG,\n"
                   "nothing fetched): loss and eval loss, learning rate, gradient norm, tokens/s and MFU, peak\n"
                   "memory against the plan. Prints a summary: steps, final and best losses, mean tokens/s, time.");
  a.positional("METRICS", &metrics, "the JSON lines written by anvil train --metrics")
      .opt("--out", &out, "FILE", "the HTML page [default: METRICS with .html for .jsonl]");
  if (!a.parse(argc, argv)) return 0;
  if (out.empty()) {
    const size_t dot = metrics.rfind('.');
    const size_t slash = metrics.rfind('/');
    out = (dot != std::string::npos && (slash == std::string::npos || dot > slash) ? metrics.substr(0, dot) : metrics) +
          ".html";
  }
  const Metrics m = read_metrics(metrics);
  write_file_atomic(out, render_report_html(m));
  std::fputs(summary_text(summarize(m)).c_str(), stdout);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace anvil
