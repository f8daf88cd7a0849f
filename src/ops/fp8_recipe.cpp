// The FP8 recipe's names, formats and scales (see fp8_recipe.h).
#include "ops/fp8_recipe.h"

#include <algorithm>
#include <bit>
#include <cstdint>

#include "core/enum_names.h"

namespace anvil {
namespace {

constexpr EnumName<Fp8Recipe> kFp8RecipeNames[] = {
    {Fp8Recipe::kOff, "off"}, {Fp8Recipe::kTensorwise, "tensorwise"}, {Fp8Recipe::kRowwise, "rowwise"}};

}  // namespace

Fp8Recipe parse_fp8_recipe(const std::string& name) { return parse_enum(kFp8RecipeNames, name, "fp8 recipe"); }

const char* fp8_recipe_name(Fp8Recipe r) { return enum_name(kFp8RecipeNames, r); }

Fp8Scratch fp8_scratch(int64_t p_rows, int64_t q_rows, int64_t k) {
  const auto aligned = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  const auto stats = [&](int64_t rows) { return aligned(3 * std::max(rows, k) * static_cast<int64_t>(sizeof(float))); };
  return {aligned(p_rows * k), aligned(q_rows * k), stats(p_rows), stats(q_rows)};
}

Fp8Scratch fp8_backward_scratch(int64_t m, int64_t n, int64_t k) {
  const Fp8Scratch dy = fp8_scratch(n, 0, m), other = fp8_scratch(k, 0, std::max(m, n));
  return {2 * dy.p_bytes, other.p_bytes, dy.p_stats, other.p_stats};
}

float fp8_scale(float amax, Fp8Format format, Fp8Recipe r) {
  const float scale =
      static_cast<float>(static_cast<double>(fp8_max(format)) / std::max(static_cast<double>(amax), 1e-12));
  if (r != Fp8Recipe::kRowwise) return scale;
  return std::bit_cast<float>(std::bit_cast<uint32_t>(scale) & 0xff800000u);  // 2^floor(log2(scale))
}

}  // namespace anvil
