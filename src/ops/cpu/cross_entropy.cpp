// The CPU reference of the output projection fused with cross-entropy (ops.h), in chunks of
// 32 rows whose logits are the only ones that exist at once; the loss is summed in double.
#include "ops/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "ops/cpu/cpu_math.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

void CpuOps::cross_entropy_forward_backward_impl(Tensor loss_sum, Tensor dh, Tensor dw, Tensor h, Tensor w,
                                                 Tensor targets, float loss_scale, Tensor logits, bool accumulate_dw,
                                                 Tensor row_weights, Tensor row_losses) {
  const int64_t N = h.rows(), C = h.cols(), V = w.dim(0);
  const float *H = f32(h), *W = f32(w);
  const int32_t* Y = i32(targets);
  const bool grads = present(dh);
  float *DH = grads ? f32(dh) : nullptr, *DW = grads ? f32(dw) : nullptr;
  float* LOG = present(logits) ? f32(logits) : nullptr;
  const float* RW = present(row_weights) ? f32(row_weights) : nullptr;
  float* RL = present(row_losses) ? f32(row_losses) : nullptr;
  if (grads && !accumulate_dw) std::fill(DW, DW + dw.numel(), 0.0f);
  constexpr int64_t kRows = 32;  // rows per chunk: the chunk's logits are kRows x V
  std::vector<float> z(static_cast<size_t>(kRows * V));
  double total = 0;
  for (int64_t r0 = 0; r0 < N; r0 += kRows) {
    const int64_t rows = std::min(kRows, N - r0);
    std::vector<double> row_loss(static_cast<size_t>(rows), 0.0);
    parallel_for(rows, 1, [&](int64_t rb, int64_t re) {
      for (int64_t r = rb; r < re; ++r) {
        const float* hr = H + (r0 + r) * C;
        float* zr = z.data() + r * V;
        for (int64_t v = 0; v < V; ++v) zr[v] = dot(hr, W + v * C, C);
        if (LOG) std::memcpy(LOG + (r0 + r) * V, zr, static_cast<size_t>(V) * 4);
        const int32_t y = Y[r0 + r];
        if (RL) RL[r0 + r] = 0.0f;
        if (y < 0) {  // ignored: no loss, no gradient
          std::fill(zr, zr + V, 0.0f);
          continue;
        }
        ANVIL_ENSURE(y < V, kInvalidInput, "target id ", y, " is outside the vocabulary (", V, ")");
        float mx = -INFINITY;
        for (int64_t v = 0; v < V; ++v) mx = std::max(mx, zr[v]);
        double sum = 0;
        for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(zr[v] - mx));
        const double lse = mx + std::log(sum);
        const double loss = lse - zr[y], weight = RW ? RW[r0 + r] : 1.0;
        if (RL) RL[r0 + r] = static_cast<float>(loss);
        row_loss[static_cast<size_t>(r)] = weight * loss;
        const float scale = static_cast<float>(weight * loss_scale);
        for (int64_t v = 0; v < V; ++v) zr[v] = static_cast<float>(std::exp(static_cast<double>(zr[v]) - lse)) * scale;
        zr[y] -= scale;
      }
    });
    for (double l : row_loss) total += l;
    if (!grads) continue;
    // dh = dz . W ; dW += dz^T . h
    parallel_for(rows, 1, [&](int64_t rb, int64_t re) {
      for (int64_t r = rb; r < re; ++r) {
        float* d = DH + (r0 + r) * C;
        std::fill(d, d + C, 0.0f);
        const float* zr = z.data() + r * V;
        for (int64_t v = 0; v < V; ++v)
          if (zr[v] != 0.0f) axpy(d, zr[v], W + v * C, C);
      }
    });
    parallel_for(V, 64, [&](int64_t vb, int64_t ve) {
      for (int64_t v = vb; v < ve; ++v)
        for (int64_t r = 0; r < rows; ++r) {
          const float g = z[static_cast<size_t>(r * V + v)];
          if (g != 0.0f) axpy(DW + v * C, g, H + (r0 + r) * C, C);
        }
    });
  }
  f32(loss_sum)[0] += static_cast<float>(total);
}

}  // namespace anvil
