// Durations measured and formatted (see duration.h).
#include "core/duration.h"

#include <cstdint>
#include <cstdio>

namespace anvil {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string format_hms(double seconds) {
  const int64_t t = static_cast<int64_t>(seconds + 0.5);
  char b[32];
  std::snprintf(b, sizeof b, "%lld:%02lld:%02lld", static_cast<long long>(t / 3600), static_cast<long long>(t / 60 % 60),
                static_cast<long long>(t % 60));
  return b;
}

}  // namespace anvil
