// FP8: the host casts (core/fp8.h) against PyTorch's torch.float8_e4m3fn and
// torch.float8_e5m2 casts on every bf16 bit pattern and a million random float32 patterns,
// bit for bit, and every code decoded.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "core/fp8.h"
#include "core/fs.h"
#include "testing.h"

namespace anvil {
namespace {

std::string bytes_of(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

TEST(Fp8Casts, MatchTorchOnEveryBf16PatternAndRandomFloats) {
  ANVIL_REQUIRE_ORACLE();
  std::vector<float> in;
  for (uint32_t b = 0; b < 65536; ++b) in.push_back(bf16_bits_to_f32(static_cast<uint16_t>(b)));
  std::mt19937 rng(26);
  for (int i = 0; i < (1 << 20); ++i) in.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  const std::string dir = testing::temp_dir("fp8-casts");
  write_file_atomic(dir + "/in.f32", bytes_of(in));
  const auto r = testing::run_oracle("fp8_oracle.py", {"casts", dir + "/in.f32", dir + "/out.bin"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string out = read_file(dir + "/out.bin");
  ASSERT_EQ(out.size(), 2 * in.size() + 2 * 256 * sizeof(float));
  int64_t checked = 0;
  for (int f = 0; f < 2; ++f) {
    const Fp8Format format = f == 0 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
    for (size_t i = 0; i < in.size(); ++i) {
      const uint8_t want = static_cast<uint8_t>(out[f * in.size() + i]);
      const uint8_t got = f32_to_fp8_bits(in[i], format);
      ASSERT_EQ(got, want) << fp8_format_name(format) << " of " << in[i] << " (bits 0x" << std::hex
                           << std::bit_cast<uint32_t>(in[i]) << ")";
      ++checked;
    }
    for (int code = 0; code < 256; ++code) {
      float want;
      std::memcpy(&want, out.data() + 2 * in.size() + (f * 256 + code) * sizeof(float), sizeof(float));
      const float got = fp8_bits_to_f32(static_cast<uint8_t>(code), format);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << fp8_format_name(format) << " code " << code;
      } else {
        EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << fp8_format_name(format) << " code "
                                                                                << code;
      }
    }
  }
  EXPECT_EQ(checked, 2 * static_cast<int64_t>(in.size()));
}

// The recipe's cast clamps first: nothing finite becomes NaN or infinite, and in range it is the plain cast.
TEST(Fp8Casts, SaturatedCastClampsToTheLargestFiniteValue) {
  for (Fp8Format format : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    const float max = fp8_max(format);
    EXPECT_EQ(fp8_bits_to_f32(f32_to_fp8_bits_saturated(max * 1.1f, format), format), max);
    EXPECT_EQ(fp8_bits_to_f32(f32_to_fp8_bits_saturated(-3e38f, format), format), -max);
    EXPECT_EQ(fp8_bits_to_f32(f32_to_fp8_bits_saturated(INFINITY, format), format), max);
    EXPECT_TRUE(std::isnan(fp8_bits_to_f32(f32_to_fp8_bits_saturated(NAN, format), format)));
    for (uint32_t b = 0; b < 65536; ++b) {
      const float x = bf16_bits_to_f32(static_cast<uint16_t>(b));
      if (std::fabs(x) <= max) {
        ASSERT_EQ(f32_to_fp8_bits_saturated(x, format), f32_to_fp8_bits(x, format)) << x;
      }
    }
  }
  EXPECT_TRUE(std::isnan(fp8_bits_to_f32(f32_to_fp8_bits(480.0f, Fp8Format::kE4M3), Fp8Format::kE4M3)));
  EXPECT_TRUE(std::isinf(fp8_bits_to_f32(f32_to_fp8_bits(61440.0f, Fp8Format::kE5M2), Fp8Format::kE5M2)));
}

}  // namespace
}  // namespace anvil
