// Logging with a rank prefix (see log.h).
#include "core/log.h"

#include <unistd.h>

#include <atomic>

namespace anvil {
namespace {
std::atomic<int> g_rank{-1};
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
}  // namespace

void log_set_rank(int rank) { g_rank = rank; }
int log_rank() { return g_rank; }
void log_set_level(LogLevel level) { g_level = static_cast<int>(level); }

void log_write(LogLevel level, const std::string& message) {
  if (static_cast<int>(level) < g_level) return;
  std::string line;
  if (g_rank >= 0) line = cat("[r", g_rank.load(), "] ");
  if (level == LogLevel::kWarn) line += "warning: ";
  if (level == LogLevel::kError) line += "error: ";
  line += message;
  line += '\n';
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(2, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace anvil
