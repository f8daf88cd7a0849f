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

float fp8_scale(float amax, Fp8Format format, Fp8Recipe r) {
  const float scale =
      static_cast<float>(static_cast<double>(fp8_max(format)) / std::max(static_cast<double>(amax), 1e-12));
  if (r != Fp8Recipe::kRowwise) return scale;
  return std::bit_cast<float>(std::bit_cast<uint32_t>(scale) & 0xff800000u);  // 2^floor(log2(scale))
}

}  // namespace anvil
