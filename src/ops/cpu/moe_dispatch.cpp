// The CPU reference of the MoE dispatch (ops.h): the assignments sorted by expert (a stable
// counting sort), the gather of the experts' input rows and its backward.
#include "ops/cpu/cpu_ops.h"

#include <algorithm>
#include <vector>

#include "core/threads.h"
#include "ops/cpu/cpu_math.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

void CpuOps::moe_sort_impl(Tensor order, Tensor rows, Tensor offsets, Tensor topk_idx) {
  const int64_t n = topk_idx.numel(), E = offsets.numel() - 1;
  const int32_t* Ix = i32(topk_idx);
  int32_t *O = order.ptr<int32_t>(), *Rw = rows.ptr<int32_t>(), *Off = offsets.ptr<int32_t>();
  std::fill(Off, Off + E + 1, 0);
  for (int64_t a = 0; a < n; ++a) {
    ANVIL_ENSURE(Ix[a] >= 0 && Ix[a] < E, kInternal, "moe_sort: expert ", Ix[a], " of ", E);
    ++Off[Ix[a] + 1];
  }
  for (int64_t e = 0; e < E; ++e) Off[e + 1] += Off[e];
  std::vector<int32_t> next(Off, Off + E);
  for (int64_t a = 0; a < n; ++a) {
    const int32_t r = next[static_cast<size_t>(Ix[a])]++;
    O[r] = static_cast<int32_t>(a);
    Rw[a] = r;
  }
}

void CpuOps::moe_gather_impl(Tensor xs, Tensor x, Tensor order, int top_k) {
  const int64_t R = order.numel(), C = x.cols();
  const float* X = f32(x);
  const int32_t* O = i32(order);
  float* XS = f32(xs);
  parallel_for(R, 16, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) std::copy(X + (O[r] / top_k) * C, X + (O[r] / top_k + 1) * C, XS + r * C);
  });
}

void CpuOps::moe_gather_backward_impl(Tensor dx, Tensor dxs, Tensor rows, bool accumulate) {
  const int64_t N = dx.rows(), C = dx.cols(), K = rows.numel() / N;
  const float* DXS = f32(dxs);
  const int32_t* Rw = i32(rows);
  float* DX = f32(dx);
  parallel_for(N, 16, [&](int64_t nb, int64_t ne) {
    for (int64_t t = nb; t < ne; ++t) {
      float* d = DX + t * C;
      if (!accumulate) std::fill(d, d + C, 0.0f);
      for (int64_t j = 0; j < K; ++j) axpy(d, 1.0f, DXS + static_cast<int64_t>(Rw[t * K + j]) * C, C);
    }
  });
}

}  // namespace anvil
