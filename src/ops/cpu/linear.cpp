// The CPU reference of the linear layers (ops.h): row-blocked dot products forward, axpy
// accumulation backward.
#include "ops/cpu/cpu_ops.h"

#include <algorithm>

#include "core/threads.h"
#include "ops/cpu/cpu_math.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

void CpuOps::linear_forward_impl(Tensor y, Tensor x, Tensor w, Tensor bias) {
  const int64_t M = x.rows(), K = x.cols(), N = w.dim(0);
  const float *X = f32(x), *W = f32(w), *B = present(bias) ? f32(bias) : nullptr;
  float* Y = f32(y);
  parallel_for(M, 4, [&](int64_t mb, int64_t me) {
    // Blocks of rows of W stay in cache across the rows of x.
    constexpr int64_t kNB = 64;
    for (int64_t nb = 0; nb < N; nb += kNB) {
      const int64_t ne = std::min(N, nb + kNB);
      for (int64_t m = mb; m < me; ++m) {
        const float* xr = X + m * K;
        float* yr = Y + m * N;
        for (int64_t n = nb; n < ne; ++n) yr[n] = dot(xr, W + n * K, K) + (B ? B[n] : 0.0f);
      }
    }
  });
}

void CpuOps::linear_backward_input_impl(Tensor dx, Tensor dy, Tensor w, bool accumulate) {
  const int64_t M = dy.rows(), N = dy.cols(), K = w.cols();
  const float *DY = f32(dy), *W = f32(w);
  float* DX = f32(dx);
  parallel_for(M, 4, [&](int64_t mb, int64_t me) {
    for (int64_t m = mb; m < me; ++m) {
      float* r = DX + m * K;
      if (!accumulate) std::fill(r, r + K, 0.0f);
      const float* g = DY + m * N;
      for (int64_t n = 0; n < N; ++n)
        if (g[n] != 0.0f) axpy(r, g[n], W + n * K, K);
    }
  });
}

void CpuOps::linear_backward_weight_impl(Tensor dw, Tensor dbias, Tensor dy, Tensor x, bool accumulate) {
  const int64_t M = dy.rows(), N = dy.cols(), K = x.cols();
  const float *DY = f32(dy), *X = f32(x);
  float* DW = f32(dw);
  float* DB = present(dbias) ? f32(dbias) : nullptr;
  parallel_for(N, 8, [&](int64_t nb, int64_t ne) {
    for (int64_t n = nb; n < ne; ++n) {
      float* r = DW + n * K;
      if (!accumulate) std::fill(r, r + K, 0.0f);
      double bsum = 0;
      for (int64_t m = 0; m < M; ++m) {
        const float g = DY[m * N + n];
        bsum += g;
        if (g != 0.0f) axpy(r, g, X + m * K, K);
      }
      if (DB) DB[n] = (accumulate ? DB[n] : 0.0f) + static_cast<float>(bsum);
    }
  });
}

}  // namespace anvil
