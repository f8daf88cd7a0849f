// Logging with a rank prefix.
//
// Every line goes to stderr as "[rN] message" once a rank is set (multi-process runs), or
// as plain "message" in a single process. Lines are written with one write() each so that
// the output of several workers interleaves by whole lines.
#pragma once

#include "core/error.h"

namespace anvil {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void log_set_rank(int rank);  // -1: no prefix
int log_rank();
void log_set_level(LogLevel level);
void log_write(LogLevel level, const std::string& message);

template <class... Args>
void log_info(const Args&... args) { log_write(LogLevel::kInfo, cat(args...)); }
template <class... Args>
void log_warn(const Args&... args) { log_write(LogLevel::kWarn, cat(args...)); }
template <class... Args>
void log_error(const Args&... args) { log_write(LogLevel::kError, cat(args...)); }
template <class... Args>
void log_debug(const Args&... args) { log_write(LogLevel::kDebug, cat(args...)); }

}  // namespace anvil
