// Logging with a rank prefix (see log.h).
#include "core/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace anvil {
namespace {
std::atomic<int> g_rank{-1};
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_terminal{-1};  // /dev/tty once a pipe's reader has gone; -2: none

void write_line(int fd, const std::string& line) { write_or_terminal(fd, line.data(), line.size()); }

std::string prefix() { return g_rank >= 0 ? cat("[r", g_rank.load(), "] ") : std::string(); }

std::string& program() {
  static std::string name = "anvil";
  return name;
}

}  // namespace

void set_program_name(const std::string& name) { program() = name; }
const std::string& program_name() { return program(); }

void write_or_terminal(int fd, const char* text, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, text, n);
    if (w > 0) {
      text += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EPIPE && fd != g_terminal) {
      if (g_terminal == -1) {
        const int tty = ::open("/dev/tty", O_WRONLY | O_NOCTTY | O_CLOEXEC);
        g_terminal = tty >= 0 ? tty : -2;
      }
      if (g_terminal >= 0) {
        fd = g_terminal;
        continue;
      }
    }
    return;
  }
}

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
}

}  // namespace anvil
