// The CPU reference of the embedding lookup and its scatter-add backward (ops.h).
#include "ops/cpu/cpu_ops.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/threads.h"
#include "ops/cpu/cpu_math.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

void CpuOps::embedding_forward_impl(Tensor out, Tensor ids, Tensor table) {
  const int64_t N = ids.numel(), C = table.cols(), V = table.dim(0);
  const int32_t* I = i32(ids);
  const float* T = f32(table);
  float* O = f32(out);
  for (int64_t n = 0; n < N; ++n) {
    ANVIL_ENSURE(I[n] >= 0 && I[n] < V, kInvalidInput, "token id ", I[n], " at position ", n,
                 " is outside the vocabulary (", V, ")");
    std::memcpy(O + n * C, T + static_cast<int64_t>(I[n]) * C, static_cast<size_t>(C) * 4);
  }
}

void CpuOps::embedding_backward_impl(Tensor dtable, Tensor ids, Tensor dout, bool accumulate) {
  const int64_t N = ids.numel(), C = dtable.cols();
  const int32_t* I = i32(ids);
  const float* D = f32(dout);
  float* T = f32(dtable);
  if (!accumulate) std::fill(T, T + dtable.numel(), 0.0f);
  // Threads own column ranges, so every row is updated in token order.
  parallel_for(C, 16, [&](int64_t cb, int64_t ce) {
    for (int64_t n = 0; n < N; ++n) {
      float* row = T + static_cast<int64_t>(I[n]) * C;
      const float* d = D + n * C;
      for (int64_t c = cb; c < ce; ++c) row[c] += d[c];
    }
  });
}

}  // namespace anvil
