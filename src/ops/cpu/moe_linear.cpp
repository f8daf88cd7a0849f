// The CPU reference of the experts' linear layers (ops.h): each expert's rows through its
// own weight, as linear.cpp's products.
#include "ops/cpu/cpu_ops.h"

#include <algorithm>

#include "core/threads.h"
#include "ops/cpu/cpu_math.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

namespace {

// The expert whose rows hold row r.
int64_t expert_of(const int32_t* offsets, int64_t E, int64_t r) {
  return static_cast<int64_t>(std::upper_bound(offsets, offsets + E + 1, static_cast<int32_t>(r)) - offsets) - 1;
}

}  // namespace

void CpuOps::moe_linear_forward_impl(Tensor y, Tensor x, Tensor w, Tensor offsets) {
  const int64_t E = w.dim(0), Nout = w.dim(1), Kin = w.dim(2), R = x.rows();
  const float *X = f32(x), *W = f32(w);
  const int32_t* Off = i32(offsets);
  float* Y = f32(y);
  parallel_for(R, 4, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      const float* We = W + expert_of(Off, E, r) * Nout * Kin;
      for (int64_t n = 0; n < Nout; ++n) Y[r * Nout + n] = dot(X + r * Kin, We + n * Kin, Kin);
    }
  });
}

void CpuOps::moe_linear_backward_input_impl(Tensor dx, Tensor dy, Tensor w, Tensor offsets) {
  const int64_t E = w.dim(0), Nout = w.dim(1), Kin = w.dim(2), R = dy.rows();
  const float *DY = f32(dy), *W = f32(w);
  const int32_t* Off = i32(offsets);
  float* DX = f32(dx);
  parallel_for(R, 4, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      const float* We = W + expert_of(Off, E, r) * Nout * Kin;
      float* d = DX + r * Kin;
      std::fill(d, d + Kin, 0.0f);
      for (int64_t n = 0; n < Nout; ++n)
        if (DY[r * Nout + n] != 0.0f) axpy(d, DY[r * Nout + n], We + n * Kin, Kin);
    }
  });
}

void CpuOps::moe_linear_backward_weight_impl(Tensor dw, Tensor dy, Tensor x, Tensor offsets, bool accumulate) {
  const int64_t E = dw.dim(0), Nout = dw.dim(1), Kin = dw.dim(2);
  const float *DY = f32(dy), *X = f32(x);
  const int32_t* Off = i32(offsets);
  float* DW = f32(dw);
  parallel_for(E * Nout, 8, [&](int64_t ib, int64_t ie) {
    for (int64_t i = ib; i < ie; ++i) {
      const int64_t e = i / Nout, n = i % Nout;
      float* d = DW + i * Kin;
      if (!accumulate) std::fill(d, d + Kin, 0.0f);
      for (int64_t r = Off[e]; r < Off[e + 1]; ++r)
        if (DY[r * Nout + n] != 0.0f) axpy(d, DY[r * Nout + n], X + r * Kin, Kin);
    }
  });
}

}  // namespace anvil
