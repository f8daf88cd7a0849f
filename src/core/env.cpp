// env_int, env_str: an environment variable read as a number or text (see env.h).
#include "core/env.h"

#include <cstdlib>

#include "core/error.h"

namespace anvil {

int64_t env_int(const char* var, int64_t fallback) {
  const char* s = std::getenv(var);
  if (s == nullptr || *s == '\0') return fallback;
  char* end = nullptr;
  long long v = std::strtoll(s, &end, 10);
  ANVIL_ENSURE(end && *end == '\0', kInvalidInput, "environment variable ", var, "=", s,
               " is not an integer");
  return v;
}

std::string env_str(const char* var, const std::string& fallback) {
  const char* s = std::getenv(var);
  return (s == nullptr || *s == '\0') ? fallback : std::string(s);
}

}  // namespace anvil
