// Numbers in human units: see core/units.h.
#include "core/units.h"

#include <cmath>
#include <cstdio>

namespace anvil {
namespace {

// Three significant digits: "1.66", "10.8", "512".
std::string three_digits(double v) {
  char b[32];
  std::snprintf(b, sizeof b, std::abs(v) >= 99.95 ? "%.0f" : std::abs(v) >= 9.995 ? "%.1f" : "%.2f", v);
  return b;
}

}  // namespace

std::string format_count(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f", std::abs(v));
  const std::string digits = b;
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v <= -0.5 ? "-" : "") + out;
}

std::string format_bytes(double bytes) {
  if (std::abs(bytes) < 1000) return format_count(bytes) + " B";
  const char* units[] = {"kB", "MB", "GB", "TB", "PB"};
  int u = 0;
  double v = bytes / 1000;
  while (std::abs(v) >= 999.5 && u < 4) v /= 1000, ++u;
  return three_digits(v) + " " + units[u];
}

std::string format_seconds(double s) {
  if (std::abs(s) >= 0.9995) return three_digits(s) + " s";
  if (std::abs(s) >= 0.0009995) return three_digits(s * 1e3) + " ms";
  return three_digits(s * 1e6) + " us";
}

std::string gib(double bytes, int decimals) {
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", decimals, bytes / static_cast<double>(int64_t{1} << 30));
  return b;
}

std::string count_of(int64_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

}  // namespace anvil
