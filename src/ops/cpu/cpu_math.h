// The loops the CPU reference ops (cpu_ops.h) share: typed views, a deterministic dot
// product, axpy, the chunked reduction that keeps sums independent of the thread count, and
// the RMSNorm row backward of rmsnorm.cpp and qk_norm_rope.cpp, and the amax an op writes for
// an FP8 linear (ops.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>

#include "core/error.h"
#include "core/tensor.h"

namespace anvil::cpu {

inline float* f32(const Tensor& t) {
  ANVIL_ENSURE(t.dtype == DType::kF32, kInternal, "cpu op: expected F32, got ", dtype_name(t.dtype));
  return t.ptr<float>();
}
inline const int32_t* i32(const Tensor& t) {
  ANVIL_ENSURE(t.dtype == DType::kI32, kInternal, "cpu op: expected I32, got ", dtype_name(t.dtype));
  return t.ptr<int32_t>();
}
inline bool present(const Tensor& t) { return t.data != nullptr; }

// Dot product with 8 independent accumulators: vectorizes without -ffast-math and stays
// deterministic.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// amax (1) F32, when given, = the largest |v[i]| of v's n values.
inline void store_amax(const Tensor& amax, const float* v, int64_t n) {
  if (!present(amax)) return;
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs(v[i]));
  *f32(amax) = m;
}

inline void axpy(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// Splits [0, n) into chunks of `chunk` (independent of the thread count) and sums the
// per-chunk partial vectors of length m in chunk order into out (+=).
void chunked_reduce(int64_t n, int64_t chunk, int64_t m, double* out,
                    const std::function<void(int64_t, int64_t, double*)>& fn);

// dx (=, or +=) for y = w * x * r, r = 1/sqrt(mean(x^2) + eps), given dy.
inline void norm_row_backward(float* dx, const float* dy, const float* x, const float* w, float r, int64_t D,
                              bool accumulate) {
  double gx = 0;
  for (int64_t i = 0; i < D; ++i) gx += static_cast<double>(dy[i]) * w[i] * x[i];
  const float c = static_cast<float>(gx / static_cast<double>(D)) * r * r * r;
  for (int64_t i = 0; i < D; ++i) {
    const float v = dy[i] * w[i] * r - c * x[i];
    dx[i] = accumulate ? dx[i] + v : v;
  }
}

}  // namespace anvil::cpu
