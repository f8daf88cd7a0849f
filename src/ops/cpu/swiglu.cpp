// The CPU reference of SwiGLU forward and backward (ops.h).
#include "ops/cpu/cpu_ops.h"

#include <cmath>

#include "core/threads.h"
#include "ops/cpu/cpu_math.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

namespace {

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

void CpuOps::swiglu_forward_impl(Tensor out, Tensor gate_up, Tensor amax) {
  const int64_t N = gate_up.rows(), I = gate_up.cols() / 2;
  const float* GU = f32(gate_up);
  float* O = f32(out);
  parallel_for(N, 16, [&](int64_t nb, int64_t ne) {
    for (int64_t n = nb; n < ne; ++n)
      for (int64_t i = 0; i < I; ++i) O[n * I + i] = silu(GU[n * 2 * I + i]) * GU[n * 2 * I + I + i];
  });
  cpu::store_amax(amax, O, N * I);
}

void CpuOps::swiglu_backward_impl(Tensor dgate_up, Tensor dout, Tensor gate_up, Tensor act) {
  if (act.data) swiglu_forward_impl(act, gate_up, Tensor());
  const int64_t N = gate_up.rows(), I = gate_up.cols() / 2;
  const float *GU = f32(gate_up), *G = f32(dout);
  float* D = f32(dgate_up);
  parallel_for(N, 16, [&](int64_t nb, int64_t ne) {
    for (int64_t n = nb; n < ne; ++n)
      for (int64_t i = 0; i < I; ++i) {
        const float a = GU[n * 2 * I + i], u = GU[n * 2 * I + I + i], g = G[n * I + i];
        const float sig = 1.0f / (1.0f + std::exp(-a));
        D[n * 2 * I + i] = g * u * sig * (1.0f + a * (1.0f - sig));
        D[n * 2 * I + I + i] = g * a * sig;
      }
  });
}

}  // namespace anvil
