// The CPU reference of RMSNorm forward and backward (ops.h); the weight gradient is a
// chunked reduction in double.
#include "ops/cpu/cpu_ops.h"

#include <cmath>
#include <vector>

#include "core/threads.h"
#include "ops/cpu/cpu_math.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

void CpuOps::rmsnorm_forward_impl(Tensor out, Tensor rstd, Tensor x, Tensor w, float eps, Tensor amax) {
  const int64_t R = x.rows(), D = x.cols();
  const float *X = f32(x), *W = f32(w);
  float *O = f32(out), *S = f32(rstd);
  parallel_for(R, 16, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      const float* xr = X + r * D;
      const float var = dot(xr, xr, D) / static_cast<float>(D);
      const float s = 1.0f / std::sqrt(var + eps);
      S[r] = s;
      for (int64_t i = 0; i < D; ++i) O[r * D + i] = W[i] * (xr[i] * s);
    }
  });
  cpu::store_amax(amax, O, R * D);
}

void CpuOps::rmsnorm_backward_impl(Tensor dx, Tensor dw, Tensor dout, Tensor x, Tensor w, Tensor rstd,
                                   bool accumulate, bool accumulate_dw) {
  const int64_t R = x.rows(), D = x.cols();
  const float *X = f32(x), *W = f32(w), *G = f32(dout), *S = f32(rstd);
  float* DX = f32(dx);
  parallel_for(R, 16, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) norm_row_backward(DX + r * D, G + r * D, X + r * D, W, S[r], D, accumulate);
  });
  std::vector<double> dws(static_cast<size_t>(D), 0.0);
  chunked_reduce(R, 64, D, dws.data(), [&](int64_t b, int64_t e, double* acc) {
    for (int64_t r = b; r < e; ++r)
      for (int64_t i = 0; i < D; ++i) acc[i] += static_cast<double>(G[r * D + i]) * (X[r * D + i] * S[r]);
  });
  float* DW = f32(dw);
  for (int64_t i = 0; i < D; ++i)
    DW[i] = (accumulate_dw ? DW[i] : 0.0f) + static_cast<float>(dws[static_cast<size_t>(i)]);
}

}  // namespace anvil
