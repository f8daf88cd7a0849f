// anvil report METRICS.jsonl... [--out report.html]: the charts of training runs' --metrics
// files as one self-contained HTML page (each run its own series), and a summary per run.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/fs.h"
#include "report/report.h"

namespace anvil {

int cmd_report(int argc, char** argv) {
  std::vector<std::string> files;
  std::string out;
  Args a("report", "Charts of training runs' --metrics JSON lines in one self-contained HTML page (inline SVG,\n"
                   "nothing fetched): loss and eval loss, learning rate, gradient norm, tokens/s and MFU, peak\n"
                   "memory against the plan; each run its own series (several files compare runs on one chart),\n"
                   "a smoothing slider. Prints a summary per run: steps, final and best losses, tokens/s, time.");
  a.positional_list("METRICS", &files, "the JSON lines written by anvil train --metrics (one file or several)")
      .opt("--out", &out, "FILE", "the HTML page [default: the first METRICS with .html for .jsonl]");
  if (!a.parse(argc, argv)) return 0;
  if (out.empty()) {
    const std::string& first = files.front();
    const size_t dot = first.rfind('.');
    const size_t slash = first.rfind('/');
    out = (dot != std::string::npos && (slash == std::string::npos || dot > slash) ? first.substr(0, dot) : first) +
          ".html";
  }
  std::vector<Metrics> runs;
  for (const std::string& f : files)
    for (Metrics& m : read_metrics(f)) runs.push_back(std::move(m));
  write_file_atomic(out, render_report_html(runs));
  for (const Metrics& m : runs) {
    if (runs.size() > 1) std::printf("%s (%s)\n", m.label().c_str(), m.source.c_str());
    std::fputs(summary_text(summarize(m)).c_str(), stdout);
  }
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace anvil
