// core: bf16 rounding on every bit pattern and the fp32 edge cases, fp16, errors, tensors, the XXH64 hash,
// memory in GiB and durations.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/bf16.h"
#include "core/duration.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/hash.h"
#include "core/json.h"
#include "core/tensor.h"
#include "core/units.h"
#include "ops/ops.h"
#include "testing.h"

namespace anvil {
namespace {

// Reference rounding through double arithmetic: the nearest bf16 value, ties to even.
uint16_t bf16_reference(float f) {
  if (std::isnan(f)) return 0;  // checked separately
  if (std::isinf(f)) return std::signbit(f) ? 0xff80 : 0x7f80;
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t lo = static_cast<uint16_t>(u >> 16);        // truncation: toward zero
  uint16_t hi = static_cast<uint16_t>(lo + 1);         // next value away from zero
  double flo = bf16_bits_to_f32(lo);
  double fhi = (hi & 0x7f80) == 0x7f80 && (hi & 0x7f) == 0 ? std::copysign(std::ldexp(1.0, 128), f)
                                                           : static_cast<double>(bf16_bits_to_f32(hi));
  double dlo = std::abs(static_cast<double>(f) - flo), dhi = std::abs(fhi - static_cast<double>(f));
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(Bf16, EveryBitPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bf16_bits_to_f32(static_cast<uint16_t>(b));
    EXPECT_EQ(std::bit_cast<uint32_t>(f), b << 16);
    uint16_t back = f32_to_bf16_bits(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_bits_to_f32(back))) << b;
      EXPECT_EQ(back & 0x8000, b & 0x8000) << "NaN keeps its sign";
    } else {
      ASSERT_EQ(back, b) << "pattern " << b;
    }
  }
}

TEST(Bf16, RoundsToNearestEvenAroundEveryPattern) {
  // For every finite bf16 value, floats just below, at and above the midpoint to the next
  // value, and the midpoint itself (a tie), must round as the double-precision reference.
  for (uint32_t b = 0; b < 65536; ++b) {
    uint32_t u = b << 16;
    float f = std::bit_cast<float>(u);
    if (!std::isfinite(f)) continue;
    for (uint32_t low : {0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      float g = std::bit_cast<float>(u | low);
      if (!std::isfinite(g)) continue;
      ASSERT_EQ(f32_to_bf16_bits(g), bf16_reference(g)) << std::hex << (u | low);
    }
  }
}

TEST(Bf16, EdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32_to_bf16_bits(inf), 0x7f80);
  EXPECT_EQ(f32_to_bf16_bits(-inf), 0xff80);
  EXPECT_EQ(f32_to_bf16_bits(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16_bits(-0.0f), 0x8000);
  // NaNs with payload only in the low bits must not become inf.
  float nan_low = std::bit_cast<float>(0x7f800001u);
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(nan_low))));
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(std::bit_cast<float>(0xffffffffu)))));
  // Largest finite float rounds up to inf; the largest finite bf16 stays.
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(f32_to_bf16_bits(std::bit_cast<float>(0x7f7f0000u)), 0x7f7f);
  // Ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even (1.0) wins; the next tie rounds up.
  EXPECT_EQ(f32_to_bf16_bits(std::bit_cast<float>(0x3f808000u)), 0x3f80);
  EXPECT_EQ(f32_to_bf16_bits(std::bit_cast<float>(0x3f818000u)), 0x3f82);
  // Denormals: smallest float denormal rounds to zero, a denormal tie to even.
  EXPECT_EQ(f32_to_bf16_bits(std::bit_cast<float>(0x00000001u)), 0x0000);
  EXPECT_EQ(f32_to_bf16_bits(std::bit_cast<float>(0x00008000u)), 0x0000);
  EXPECT_EQ(f32_to_bf16_bits(std::bit_cast<float>(0x00018000u)), 0x0002);
  EXPECT_EQ(f32_to_bf16_bits(std::bit_cast<float>(0x00010001u)), 0x0001);
  // Rounding from the largest denormal carries into the smallest normal.
  EXPECT_EQ(f32_to_bf16_bits(std::bit_cast<float>(0x007fffffu)), 0x0080);
}

// Split masters (core/bf16.h): the halves give back every finite float bit for bit; the
// high half is the nearest bf16 value, ties away from zero (the double reference's nearest,
// except at a tie with an even lower neighbour, where ties to even would round down).
TEST(Bf16, SplitMastersJoinBitForBit) {
  for (uint32_t b = 0; b < 65536; ++b) {
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xabcdu, 0xffffu}) {
      const float f = std::bit_cast<float>((b << 16) | low);
      if (!std::isfinite(f) || std::abs(f) > 3.38e38f) continue;  // within half a bf16 step of FLT_MAX: not a weight
      uint16_t hi = 0;
      int16_t lo = 0;
      split_master(f, &hi, &lo);
      ASSERT_EQ(std::bit_cast<uint32_t>(join_master(hi, lo)), std::bit_cast<uint32_t>(f)) << std::hex << b << low;
      const uint16_t nearest = bf16_reference(f);
      if (low == 0x8000u)
        ASSERT_EQ(hi, static_cast<uint16_t>(b + 1)) << "a tie rounds away from zero: " << std::hex << b;
      else
        ASSERT_EQ(hi, nearest) << std::hex << b << low;
    }
  }
  uint16_t hi = 0;
  int16_t lo = 0;
  split_master(-0.0f, &hi, &lo);
  EXPECT_EQ(hi, 0x8000);
  EXPECT_EQ(lo, 0);
  split_master(std::bit_cast<float>(0x3f808000u), &hi, &lo);  // 1 + 2^-8: a tie
  EXPECT_EQ(hi, 0x3f81);
  EXPECT_EQ(lo, -0x8000);
}

// AdamW on split masters updates the fp32 value the halves hold exactly as on fp32 masters
// (the CPU backend; tests/cuda/test_cuda_ops.cpp checks the GPU's against its fp32 kernel).
TEST(Bf16, AdamWOnSplitMastersIsAdamWOnTheirValues) {
  auto ops = make_cpu_ops();
  const int64_t n = 1001;
  std::vector<float> p(n), g(n), m(n), v(n), m2, v2;
  for (int64_t i = 0; i < n; ++i) {
    p[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i)) * 0.05f;
    g[static_cast<size_t>(i)] = std::cos(1.3f * static_cast<float>(i)) * 0.01f;
    m[static_cast<size_t>(i)] = 1e-3f * std::sin(static_cast<float>(i));
    v[static_cast<size_t>(i)] = 1e-6f * (1.5f + std::cos(static_cast<float>(i)));
  }
  m2 = m;
  v2 = v;
  std::vector<uint16_t> hi(n);
  std::vector<int16_t> lo(n);
  for (size_t k = 0; k < p.size(); ++k) split_master(p[k], &hi[k], &lo[k]);
  auto t = [n](void* d, DType dt) { return Tensor(d, dt, {n}, Device::kCPU); };
  AdamWHyper h;
  h.lr = 3e-4f;
  h.weight_decay = 0.1f;
  for (int64_t step = 1; step <= 3; ++step) {
    h.step = step;
    ops->adamw_step(t(p.data(), DType::kF32), t(g.data(), DType::kF32), t(m.data(), DType::kF32),
                    t(v.data(), DType::kF32), h, 0.5f, Tensor(), false);
    ops->adamw_step_split(t(hi.data(), DType::kBF16), t(lo.data(), DType::kI16), t(g.data(), DType::kF32),
                          t(m2.data(), DType::kF32), t(v2.data(), DType::kF32), h, 0.5f);
  }
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    ASSERT_EQ(std::bit_cast<uint32_t>(join_master(hi[k], lo[k])), std::bit_cast<uint32_t>(p[k])) << i;
  }
  EXPECT_EQ(m2, m);
  EXPECT_EQ(v2, v);
}

TEST(F16, AllPatternsRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_bits_to_f32(static_cast<uint16_t>(h));
    uint16_t back = f32_to_f16_bits(f);
    if (std::isnan(f)) EXPECT_TRUE(std::isnan(f16_bits_to_f32(back)));
    else ASSERT_EQ(back, h) << h;
  }
  EXPECT_EQ(f16_bits_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_bits_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7bff);
}

TEST(Error, KindsMapToExitCodes) {
  EXPECT_EQ(exit_code(ErrorKind::kUsage), 2);
  EXPECT_EQ(exit_code(ErrorKind::kNoDevice), 3);
  EXPECT_EQ(exit_code(ErrorKind::kIo), 1);
  for (ErrorKind bad_input : {ErrorKind::kInvalidInput, ErrorKind::kNotFound, ErrorKind::kUnsupported})
    EXPECT_EQ(exit_code(bad_input), 2) << error_kind_name(bad_input);
  try {
    ANVIL_ENSURE(1 == 2, kInvalidInput, "value ", 7, " is bad");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_STREQ(e.what(), "value 7 is bad");
  }
  Status s(ErrorKind::kNotFound, "x");
  EXPECT_FALSE(s.ok());
  EXPECT_THROW(s.throw_if_error(), Error);
  EXPECT_TRUE(Status().ok());
}

TEST(Tensor, ShapesAndSlices) {
  std::vector<float> buf(24);
  Tensor t(buf.data(), DType::kF32, {2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.rows(), 6);
  EXPECT_EQ(t.cols(), 4);
  EXPECT_EQ(t.shape.str(), "[2, 3, 4]");
  Tensor s = t.slice_rows(1, 2);
  EXPECT_EQ(s.ptr<float>(), buf.data() + 12);
  EXPECT_EQ(s.shape, Shape({1, 3, 4}));
  EXPECT_THROW(t.reshape({5, 5}), Error);
  DType d;
  EXPECT_TRUE(dtype_from_name("BF16", &d));
  EXPECT_EQ(d, DType::kBF16);
  EXPECT_FALSE(dtype_from_name("F8", &d));
}

TEST(Json, ParseErrorsNameTheSource) {
  try {
    json_parse("{\"a\": ", "config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos);
  }
}

TEST(Xxh64, MatchesXxhsum) {
  auto hex = [](const std::string& s) {
    Xxh64 h;
    h.update(s.data(), s.size());
    return h.hex();
  };
  // Digests printed by xxhsum -H1 (xxHash 0.8).
  EXPECT_EQ(hex(""), "ef46db3751d8e999");
  EXPECT_EQ(hex("a"), "d24ec4f1a98c6e5b");
  EXPECT_EQ(hex("abc"), "44bc2cf5ad770999");
  EXPECT_EQ(hex("Nobody inspects the spammish repetition"), "fbcea83c8a378bf1");
  std::string long_text;
  for (int i = 0; i < 1000; ++i) long_text.push_back(static_cast<char>(33 + (i * 7) % 90));
  EXPECT_EQ(hex(long_text), "2a73ce7fe6ddf4f1");
  // Streaming in uneven pieces gives the same digest.
  Xxh64 h;
  for (size_t at = 0, n = 1; at < long_text.size(); at += n, n = n * 3 % 37 + 1)
    h.update(long_text.data() + at, std::min(n, long_text.size() - at));
  EXPECT_EQ(h.hex(), "2a73ce7fe6ddf4f1");
}

TEST(Xxh64, FileDigestIsTheBytesDigest) {
  std::string bytes;
  for (int i = 0; i < (3 << 20) + 5; ++i) bytes.push_back(static_cast<char>((i * 131) % 251));
  const std::string path = testing::temp_dir("hash") + "/bytes.bin";
  write_file_atomic(path, bytes);
  EXPECT_EQ(hash_file(path), hash_hex(bytes));
  EXPECT_EQ(hash_hex("abc"), "44bc2cf5ad770999");
}

TEST(Units, GibHasFixedDecimals) {
  EXPECT_EQ(gib(0), "0.00");
  EXPECT_EQ(gib(static_cast<double>(int64_t{80} << 30)), "80.00");
  EXPECT_EQ(gib(1.5 * (1 << 30)), "1.50");
  EXPECT_EQ(gib(static_cast<double>(int64_t{3} << 29), 1), "1.5");
  EXPECT_EQ(gib(static_cast<double>(uint64_t{150} << 30) + (1 << 28), 1), "150.2");  // 150.25 rounds to even
  EXPECT_EQ(gib(-(1 << 29)), "-0.50");
}

TEST(Duration, SecondsSinceCountsTheSteadyClock) {
  const auto t0 = std::chrono::steady_clock::now();
  const double a = seconds_since(t0);
  const double b = seconds_since(t0 - std::chrono::milliseconds(1500));
  EXPECT_GE(a, 0.0);
  EXPECT_GE(b, 1.5);
  EXPECT_LT(b, 1.5 + 60);
  EXPECT_EQ(format_hms(3725.4), "1:02:05");
}

}  // namespace
}  // namespace anvil
