// The --metrics file and the run's throughput: see train/metrics_file.h.
#include "train/metrics_file.h"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "core/log.h"

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

uintmax_t cut_torn_last_line(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size == 0) return 0;
  std::ifstream in(path, std::ios::binary);
  uintmax_t end = size;  // the torn line is [keep, size): keep is one past the last newline
  char chunk[4096];
  while (end > 0) {
    const uintmax_t n = end < sizeof chunk ? end : sizeof chunk;
    in.seekg(static_cast<std::streamoff>(end - n));
    ANVIL_ENSURE(in.read(chunk, static_cast<std::streamsize>(n)), kIo, path, ": cannot read its last line");
    uintmax_t i = n;
    while (i > 0 && chunk[i - 1] != '\n') --i;
    if (i > 0) {
      end = end - n + i;
      break;
    }
    end -= n;
  }
  if (end == size) return 0;
  std::filesystem::resize_file(path, end, ec);
  ANVIL_ENSURE(!ec, kIo, path, ": cannot cut its torn last line: ", ec.message());
  return size - end;
}

MetricsFile::MetricsFile(const std::string& path, const Json& header, bool append) : path_(path) {
  check_metrics_file(path, header.value("run_id", ""), append);
  if (const uintmax_t cut = cut_torn_last_line(path))
    log_warn("--metrics ", path, ": its last line (", cut,
             " bytes, no newline) was cut short by a run killed while writing it; it is dropped before this run's "
             "records");
  out_.open(path, std::ios::app);
  ANVIL_ENSURE(out_.good(), kIo, path, ": cannot open for writing");
  write(header);
}

void MetricsFile::write(const Json& record) {
  out_ << record.dump() + "\n";  // one write for the line
  out_.flush();
}

void Throughput::add(int64_t step, int64_t tokens, double seconds) {
  if (step <= warm_) return;
  seconds_ += seconds;
  tokens_ += tokens;
}

}  // namespace anvil
