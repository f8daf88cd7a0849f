// The --metrics file and the run's throughput: see train/metrics_file.h.
#include "train/metrics_file.h"

#include <cstdio>
#include <ctime>
#include <random>

#include "core/error.h"

namespace anvil {

std::string new_run_id() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char when[32];
  std::strftime(when, sizeof when, "%Y%m%d-%H%M%S", &tm);
  std::random_device rd;
  char tail[8];
  std::snprintf(tail, sizeof tail, "-%04x", static_cast<unsigned>(rd() & 0xffff));
  return std::string(when) + tail;
}

std::string last_metrics_run(const std::string& path) {
  std::ifstream in(path);
  std::string line, run;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (run.empty()) run = "(no header)";
    const Json j = Json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("run_id") && !j.contains("step")) run = j["run_id"].get<std::string>();
  }
  return run;
}

void check_metrics_file(const std::string& path, const std::string& run_id, bool append) {
  const std::string last = last_metrics_run(path);
  ANVIL_ENSURE(last.empty() || last == run_id || append, kUsage, "anvil train: --metrics ", path,
               " already holds the records of run ", last, ", and this run (", run_id,
               ") does not resume it (give a new file, or --metrics-append to add this run to it: anvil report "
               "draws each run as its own series)");
}

MetricsFile::MetricsFile(const std::string& path, const Json& header, bool append) : path_(path) {
  check_metrics_file(path, header.value("run_id", ""), append);
  out_.open(path, std::ios::app);
  ANVIL_ENSURE(out_.good(), kIo, path, ": cannot open for writing");
  write(header);
}

void MetricsFile::write(const Json& record) {
  out_ << record.dump() << "\n";
  out_.flush();
}

void Throughput::add(int64_t step, int64_t tokens, double seconds) {
  if (step <= warm_) return;
  seconds_ += seconds;
  tokens_ += tokens;
}

}  // namespace anvil
