// The CPU reference of the MoE combine (ops.h): each token's experts' outputs weighted by
// their routing weights, and its backward.
#include "ops/cpu/cpu_ops.h"

#include <algorithm>

#include "core/threads.h"
#include "ops/cpu/cpu_math.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

void CpuOps::moe_combine_forward_impl(Tensor out, Tensor ys, Tensor rows, Tensor topk_w) {
  const int64_t N = out.rows(), C = out.cols(), K = topk_w.cols();
  const float *YS = f32(ys), *W = f32(topk_w);
  const int32_t* Rw = i32(rows);
  float* O = f32(out);
  parallel_for(N, 16, [&](int64_t nb, int64_t ne) {
    for (int64_t t = nb; t < ne; ++t) {
      float* o = O + t * C;
      std::fill(o, o + C, 0.0f);
      for (int64_t j = 0; j < K; ++j) axpy(o, W[t * K + j], YS + static_cast<int64_t>(Rw[t * K + j]) * C, C);
    }
  });
}

void CpuOps::moe_combine_backward_impl(Tensor dys, Tensor dtopk_w, Tensor dout, Tensor ys, Tensor rows, Tensor topk_w) {
  const int64_t N = dout.rows(), C = dout.cols(), K = topk_w.cols();
  const float *D = f32(dout), *YS = f32(ys), *W = f32(topk_w);
  const int32_t* Rw = i32(rows);
  float *DYS = f32(dys), *DW = f32(dtopk_w);
  parallel_for(N, 16, [&](int64_t nb, int64_t ne) {
    for (int64_t t = nb; t < ne; ++t)
      for (int64_t j = 0; j < K; ++j) {
        const int64_t r = Rw[t * K + j];
        for (int64_t c = 0; c < C; ++c) DYS[r * C + c] = W[t * K + j] * D[t * C + c];
        DW[t * K + j] = dot(D + t * C, YS + r * C, C);
      }
  });
}

}  // namespace anvil
