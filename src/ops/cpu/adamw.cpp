// The CPU reference of AdamW (ops.h), on fp32 params or on split masters (core/bf16.h).
#include "ops/cpu/cpu_ops.h"

#include <cmath>

#include "core/bf16.h"
#include "core/threads.h"
#include "ops/cpu/cpu_math.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

namespace {

// PyTorch's AdamW over n elements: grad(i) is the scaled gradient; param(i, update) calls
// update on element i's parameter (wherever it is held) and stores what it needs.
template <class Grad, class Param>
void adamw(int64_t n, Tensor m, Tensor v, const AdamWHyper& hp, Grad grad, Param param) {
  float *M = f32(m), *Vv = f32(v);
  // Scalars as torch.optim.AdamW computes them (Python floats), used in fp32.
  const double bc1 = 1.0 - std::pow(static_cast<double>(hp.beta1), static_cast<double>(hp.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(hp.beta2), static_cast<double>(hp.step));
  const float step_size = static_cast<float>(hp.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = static_cast<float>(1.0 - static_cast<double>(hp.lr) * hp.weight_decay);
  const float w1 = static_cast<float>(1.0 - static_cast<double>(hp.beta1));
  const float w2 = static_cast<float>(1.0 - static_cast<double>(hp.beta2));
  parallel_for(n, 1 << 15, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) {
      const float g = grad(i);
      param(i, [&](float& p) {
        p *= decay;
        M[i] += w1 * (g - M[i]);
        Vv[i] = Vv[i] * hp.beta2 + w2 * g * g;
        const float denom = std::sqrt(Vv[i]) / bc2_sqrt + hp.eps;
        p += -step_size * (M[i] / denom);
      });
    }
  });
}

}  // namespace

void CpuOps::adamw_step_impl(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWHyper& hp, float grad_scale,
                             Tensor copy, bool zero_grad) {
  const int64_t n = param.numel();
  float *P = f32(param), *G = f32(grad);
  float* Cp = present(copy) && copy.data != param.data ? f32(copy) : nullptr;
  adamw(n, m, v, hp, [&](int64_t i) { return G[i] * grad_scale; },
        [&](int64_t i, auto&& update) {
          update(P[i]);
          if (Cp) Cp[i] = P[i];
          if (zero_grad) G[i] = 0.0f;
        });
}

void CpuOps::adamw_step_split_impl(Tensor hi, Tensor lo, Tensor grad, Tensor m, Tensor v, const AdamWHyper& hp,
                                   float grad_scale) {
  auto* H = hi.ptr<uint16_t>();
  auto* L = lo.ptr<int16_t>();
  const float* G = f32(grad);
  adamw(hi.numel(), m, v, hp, [&](int64_t i) { return G[i] * grad_scale; },
        [&](int64_t i, auto&& update) {
          float p = join_master(H[i], L[i]);
          update(p);
          split_master(p, &H[i], &L[i]);
        });
}

}  // namespace anvil
