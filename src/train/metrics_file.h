// A training run's --metrics file: JSON lines, a header record first and one record per
// logged step after it. The header names the run (its id, made at the start and kept
// across resumes through the checkpoint) and holds its resolved settings, so that
// anvil report can tell runs apart. A file that already holds lines takes a new run's
// records only when the run resumes the file's last run, or with --metrics-append (then
// the report draws it as a run of its own); otherwise the run stops before its first step.
// The run's throughput is defined once here, for the log's summary and the metrics alike.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "core/json.h"

namespace anvil {

// "20261201-181203-3fa9": the UTC start time and 16 random bits.
std::string new_run_id();

// The id of the last run whose header `path` holds: "" when the file is absent or empty,
// "(no header)" when it holds records of a run that wrote none.
std::string last_metrics_run(const std::string& path);

// Refuses (kUsage) a --metrics file that holds the records of a run other than `run_id`,
// unless `append` (--metrics-append): checked at the start, before data or weights are read.
void check_metrics_file(const std::string& path, const std::string& run_id, bool append);

// A run killed while it wrote a record (SIGKILL can stop a write() where it crosses a page of
// the file) leaves a last line without its newline. Cuts that line off `path` and returns
// its length in bytes; 0 when the file is absent, empty or ends with a newline.
uintmax_t cut_torn_last_line(const std::string& path);

class MetricsFile {
 public:
  // Opens `path` for appending and writes `header` (which carries "run_id"): refused (kUsage)
  // when the file holds another run and `append` (--metrics-append) is off. A torn last line
  // (cut_torn_last_line) is dropped first, with a warning.
  MetricsFile(const std::string& path, const Json& header, bool append);
  void write(const Json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

// Tokens over step time, leaving out the first 10 steps when the run has more (as the
// reference trainer times). The log's "done" line and each metrics record's
// "mean_tokens_per_s" (which anvil report shows) are this figure.
class Throughput {
 public:
  explicit Throughput(int64_t steps) : warm_(steps > 10 ? 10 : 0) {}
  void add(int64_t step, int64_t tokens, double seconds);
  double tokens_per_s() const { return seconds_ > 0 ? static_cast<double>(tokens_) / seconds_ : 0; }
  bool warm_excluded() const { return warm_ > 0; }

 private:
  int64_t warm_;
  double seconds_ = 0;
  int64_t tokens_ = 0;
};

}  // namespace anvil
