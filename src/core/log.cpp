// Logging with a rank prefix (see log.h).
#include "core/log.h"

#include <unistd.h>

#include <atomic>

namespace anvil {
namespace {
std::atomic<int> g_rank{-1};
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

// One write() per line where the pipe takes it; a closed one (its reader gone) ends it.
void write_line(int fd, const std::string& line) {
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

std::string prefix() { return g_rank >= 0 ? cat("[r", g_rank.load(), "] ") : std::string(); }

std::string& program() {
  static std::string name = "anvil";
  return name;
}

}  // namespace

void set_program_name(const std::string& name) { program() = name; }
const std::string& program_name() { return program(); }

void log_set_rank(int rank) { g_rank = rank; }
int log_rank() { return g_rank; }
void log_set_level(LogLevel level) { g_level = static_cast<int>(level); }

void log_write(LogLevel level, const std::string& message) {
  if (static_cast<int>(level) < g_level) return;
  std::string line = prefix();
  if (level == LogLevel::kWarn) line += "warning: ";
  if (level == LogLevel::kError) line += "error: ";
  write_line(2, line + message + "\n");
}

void log_result_line(const std::string& message) {
  if (g_rank <= 0) write_line(1, message + "\n");
  else write_line(2, prefix() + message + "\n");
}

}  // namespace anvil
