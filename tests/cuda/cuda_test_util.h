// The shared helpers of the tests that run each CUDA op against the fp32 CPU reference
// (test_cuda_ops.cpp, test_cuda_attention.cpp): one backend of each kind, bf16-exact random
// inputs, a tensor held on both backends (Buf, Ids) and the comparison that prints the error line.
//
// Both backends get the same input values: random normals rounded to bf16, exact in either
// dtype. Outputs that an op writes are poisoned with NaN first (an unwritten element then
// fails); outputs it accumulates into start from the same random values on both sides
// (so += is tested, not =). Tolerances are relative L2 errors that follow from bf16:
//   kOut1: one rounding of a bf16 output (unit roundoff 2^-8; rms error about 2^-9/sqrt(3)
//          = 1.1e-3 of the values): 4e-3;
//   kChain: several roundings in a chain (attention's P and dS, cross-entropy's dlogits,
//          each 2^-9 relative): 1.2e-2;
//   kF32: fp32 results from identical bf16 inputs, only the order of additions differs: 1e-4
//         (1e-6 for elementwise fp32 arithmetic).
// Every comparison prints one "[err]" line (relative L2, max abs, max rel), the figures of
// the device-run report. A build without a usable GPU skips.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "ops/ops.h"
#include "../testing.h"
#include "require_gpu.h"

namespace anvil {

inline constexpr double kOut1 = 4e-3, kChain = 1.2e-2, kF32 = 1e-4, kExact32 = 1e-6;

inline Ops& cpu() {
  static std::unique_ptr<Ops> ops = make_cpu_ops();
  return *ops;
}
inline Ops& gpu() {
  static std::unique_ptr<Ops> ops = make_cuda_ops(0);
  return *ops;
}

inline std::vector<float> randn(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = round_bf16(dist(gen));
  return v;
}

inline std::vector<float> nans(int64_t n) { return std::vector<float>(static_cast<size_t>(n), NAN); }

// One tensor on both backends: F32 on the CPU, `dtype` (F32 or BF16) on the GPU.
class Buf {
 public:
  Buf(Shape shape, DType dtype, std::vector<float> values) : shape_(shape), dtype_(dtype), host_(std::move(values)) {
    EXPECT_EQ(static_cast<int64_t>(host_.size()), shape.numel());
    dev_ = gpu().runtime().alloc(g().bytes());
    if (dtype_ == DType::kBF16) {
      std::vector<uint16_t> bits(host_.size());
      for (size_t i = 0; i < host_.size(); ++i) bits[i] = f32_to_bf16_bits(host_[i]);
      gpu().runtime().upload(g(), bits.data());
    } else {
      gpu().runtime().upload(g(), host_.data());
    }
  }
  ~Buf() { gpu().runtime().release(dev_); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;

  Tensor c() { return Tensor(host_.data(), DType::kF32, shape_, Device::kCPU); }
  Tensor g() { return Tensor(dev_, dtype_, shape_, Device::kCUDA); }
  std::vector<double> got() {
    std::vector<double> out(host_.size());
    if (dtype_ == DType::kBF16) {
      std::vector<uint16_t> bits(host_.size());
      gpu().runtime().download(bits.data(), g());
      for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_bits_to_f32(bits[i]);
    } else {
      std::vector<float> f(host_.size());
      gpu().runtime().download(f.data(), g());
      for (size_t i = 0; i < f.size(); ++i) out[i] = f[i];
    }
    return out;
  }
  std::vector<double> want() const { return std::vector<double>(host_.begin(), host_.end()); }
  std::vector<float>& host() { return host_; }

 private:
  Shape shape_;
  DType dtype_;
  std::vector<float> host_;
  void* dev_ = nullptr;
};

class Ids {
 public:
  explicit Ids(std::vector<int32_t> ids) : host_(std::move(ids)) {
    dev_ = gpu().runtime().alloc(host_.size() * 4 + 4);
    gpu().runtime().upload(g(), host_.data());
  }
  ~Ids() { gpu().runtime().release(dev_); }
  Ids(const Ids&) = delete;
  Ids& operator=(const Ids&) = delete;
  Tensor c() { return Tensor(host_.data(), DType::kI32, {static_cast<int64_t>(host_.size())}, Device::kCPU); }
  Tensor g() { return Tensor(dev_, DType::kI32, {static_cast<int64_t>(host_.size())}, Device::kCUDA); }

 private:
  std::vector<int32_t> host_;
  void* dev_ = nullptr;
};

// Compares the GPU result with the CPU reference and prints the error line.
inline void check(const std::string& what, Buf& b, double tol) {
  const std::vector<double> got = b.got(), want = b.want();
  double max_abs = 0, max_rel = 0, scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(got[i] - want[i]);
    max_abs = std::max(max_abs, d);
    if (std::abs(want[i]) > 1e-3 * scale) max_rel = std::max(max_rel, d / std::abs(want[i]));
  }
  const double rel = testing::rel_l2(got.data(), want.data(), got.size());
  std::printf("[err] %-58s rel_l2 %.2e  max_abs %.2e  max_rel %.2e  (tol %.0e)\n", what.c_str(), rel, max_abs,
              max_rel, tol);
  EXPECT_TRUE(testing::close_rel_l2(got, want, tol)) << what;
}

// A GPU fp32 result rounded to bf16 (to nearest even), for the bf16 outputs that must be it.
inline std::vector<double> rounded_bf16(Buf& f) {
  std::vector<double> r = f.got();
  for (double& v : r) v = round_bf16(static_cast<float>(v));
  return r;
}

inline std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t v : d) {
    if (!s.empty()) s += 'x';
    s += std::to_string(v);
  }
  return s;
}

}  // namespace anvil
