// FP8 casts on the host (see fp8.h). Each format is described by its field widths; a value
// is rounded by scaling its magnitude to an integer count of the format's spacing at its
// exponent (exact in double) and rounding that count to nearest even.
#include "core/fp8.h"

#include <bit>
#include <cmath>

namespace anvil {
namespace {

struct Layout {
  int mantissa_bits, bias;
  int min_exponent;        // of the normal numbers: 1 - bias
  uint32_t max_finite;     // the largest finite code, sign excluded
  uint32_t overflow_code;  // what a value past it becomes: NaN (E4M3) or infinity (E5M2)
  uint32_t nan_code;
};

constexpr Layout layout_of(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? Layout{3, 7, -6, 0x7e, 0x7f, 0x7f} : Layout{2, 15, -14, 0x7b, 0x7c, 0x7f};
}

}  // namespace

const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::kE4M3 ? "e4m3" : "e5m2"; }

float fp8_max(Fp8Format f) { return f == Fp8Format::kE4M3 ? 448.0f : 57344.0f; }

uint8_t f32_to_fp8_bits(float f, Fp8Format format) {
  const Layout l = layout_of(format);
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint8_t>(sign | l.nan_code);
  if (magnitude == 0x7f800000u) return static_cast<uint8_t>(sign | l.overflow_code);
  const double a = std::fabs(static_cast<double>(f));
  int exponent = a == 0 ? l.min_exponent : std::ilogb(a);
  if (exponent < l.min_exponent) exponent = l.min_exponent;
  // a in units of the spacing 2^(exponent - mantissa_bits), rounded to nearest even
  // (nearbyint in the default rounding mode)
  const double units = std::nearbyint(std::ldexp(a, l.mantissa_bits - exponent));
  uint64_t count = static_cast<uint64_t>(units);
  const uint64_t implicit = uint64_t{1} << l.mantissa_bits;
  if (count == 2 * implicit) {  // rounded up to the next power of two
    count = implicit;
    ++exponent;
  }
  uint64_t code = count;  // a subnormal (or zero): exponent field 0
  if (count >= implicit) code = (static_cast<uint64_t>(exponent + l.bias) << l.mantissa_bits) | (count - implicit);
  if (code > l.max_finite) return static_cast<uint8_t>(sign | l.overflow_code);
  return static_cast<uint8_t>(sign | code);
}

float fp8_bits_to_f32(uint8_t bits, Fp8Format format) {
  const Layout l = layout_of(format);
  const uint32_t code = bits & 0x7fu;
  const float sign = (bits & 0x80u) ? -1.0f : 1.0f;
  if (format == Fp8Format::kE4M3 && code == l.nan_code) return std::nanf("");
  if (format == Fp8Format::kE5M2 && code >= l.overflow_code)
    return code == l.overflow_code ? sign * INFINITY : std::nanf("");
  const uint32_t field = code >> l.mantissa_bits, mantissa = code & ((1u << l.mantissa_bits) - 1);
  const int exponent = field == 0 ? l.min_exponent : static_cast<int>(field) - l.bias;
  const uint32_t count = field == 0 ? mantissa : mantissa | (1u << l.mantissa_bits);
  return sign * std::ldexp(static_cast<float>(count), exponent - l.mantissa_bits);
}

uint8_t f32_to_fp8_bits_saturated(float f, Fp8Format format) {
  const float max = fp8_max(format);
  if (f > max) f = max;
  if (f < -max) f = -max;
  return f32_to_fp8_bits(f, format);
}

}  // namespace anvil
