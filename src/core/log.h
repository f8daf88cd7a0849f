// Logging with a rank prefix.
//
// Every line goes to stderr as "[rN] message" once a rank is set (multi-process runs), or
// as plain "message" in a single process. Lines are written with one write() each so that
// the output of several workers interleaves by whole lines. Progress goes to stderr; a
// command's results (log_result: a run's summary) go to stdout from rank 0 or the only
// process, so that `anvil train ... > result.txt` keeps them; the other ranks' are the same
// results and are not printed.
#pragma once

#include "core/error.h"

namespace anvil {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// The name the binary was run by (main's argv[0]; "anvil" until set), for the commands that
// messages suggest ("to resume: build/anvil train ...").
void set_program_name(const std::string& name);
const std::string& program_name();

void log_set_rank(int rank);  // -1: no prefix
int log_rank();
void log_set_level(LogLevel level);
void log_write(LogLevel level, const std::string& message);

void log_result_line(const std::string& message);

// Writes all of [text, text + n) to fd (1 or 2); when the fd is a pipe whose reader has gone
// (`anvil train 2>&1 | tee log` after Ctrl-C reached tee too), to the controlling terminal
// instead, if there is one, so that the stop and resume lines are still seen.
// Async-signal-safe (write and open only).
void write_or_terminal(int fd, const char* text, size_t n);

template <class... Args>
void log_info(const Args&... args) { log_write(LogLevel::kInfo, cat(args...)); }
template <class... Args>
void log_result(const Args&... args) { log_result_line(cat(args...)); }
template <class... Args>
void log_warn(const Args&... args) { log_write(LogLevel::kWarn, cat(args...)); }
template <class... Args>
void log_error(const Args&... args) { log_write(LogLevel::kError, cat(args...)); }
template <class... Args>
void log_debug(const Args&... args) { log_write(LogLevel::kDebug, cat(args...)); }

}  // namespace anvil
