// The CPU reference of the FP8 linear layers (ops.h, ops/fp8_recipe.h): each GEMM operand
// is quantized exactly as the recipe says (amax, scale, saturating round-to-nearest-even
// cast, core/fp8.h) and kept as its FP8 values in float (exact), one dequantization factor
// per row of the operand along the reduction dimension; the GEMM is fp32 dot products of
// those values, multiplied by the two factors. x's and w's tensorwise amax are read from or
// written to the caller's slot (Fp8Amax) as on the GPU. The GPU kernels are tested against this.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/threads.h"
#include "ops/cpu/cpu_math.h"
#include "ops/cpu/cpu_ops.h"

namespace anvil {
namespace {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

// rows x k FP8 values (decoded), row-major, and each row's inverse scale.
struct Fp8Operand {
  int64_t rows = 0, k = 0;
  std::vector<float> values, inv_scale;
};

// x's (index 0) or w's (1) amax slot of an Fp8Amax, and whether it holds the amax already.
struct AmaxSlot {
  float* at = nullptr;
  bool known = false;
};
AmaxSlot amax_slot(const Fp8Amax& a, int index) {
  if (!present(a.slot)) return {};
  return {f32(a.slot) + index, index == 0 ? a.x_known : a.w_known};
}

// The operand (rows, k) read from src: src itself (rows, k) row-major, or, transposed, the
// transpose of src (k, rows) row-major. Scaled per row (rowwise) or as a whole (the amax from
// the slot where it is known, else written to it, when there is one).
Fp8Operand quantize(const float* src, int64_t rows, int64_t k, bool transposed, Fp8Recipe recipe,
                    AmaxSlot slot = {}) {
  constexpr Fp8Format format = kFp8Format;
  const auto at = [&](int64_t r, int64_t c) { return transposed ? src[c * rows + r] : src[r * k + c]; };
  std::vector<float> amax(static_cast<size_t>(rows), 0.0f);
  if (!slot.known)
    parallel_for(rows, 16, [&](int64_t rb, int64_t re) {
      for (int64_t r = rb; r < re; ++r)
        for (int64_t c = 0; c < k; ++c)
          amax[static_cast<size_t>(r)] = std::max(amax[static_cast<size_t>(r)], std::fabs(at(r, c)));
    });
  if (recipe == Fp8Recipe::kTensorwise) {
    const float whole = slot.known ? *slot.at : *std::max_element(amax.begin(), amax.end());
    if (slot.at) *slot.at = whole;
    std::fill(amax.begin(), amax.end(), whole);
  }
  std::array<float, 256> decoded;
  for (int code = 0; code < 256; ++code)
    decoded[static_cast<size_t>(code)] = fp8_bits_to_f32(static_cast<uint8_t>(code), format);
  Fp8Operand op{rows, k, std::vector<float>(static_cast<size_t>(rows * k)),
                std::vector<float>(static_cast<size_t>(rows))};
  parallel_for(rows, 16, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      const float scale = fp8_scale(amax[static_cast<size_t>(r)], format, recipe);
      op.inv_scale[static_cast<size_t>(r)] = 1.0f / scale;
      float* out = op.values.data() + r * k;
      for (int64_t c = 0; c < k; ++c) out[c] = decoded[f32_to_fp8_bits_saturated(at(r, c) * scale, format)];
    }
  });
  return op;
}

// out (a.rows, b.rows) = (or +=) dot(a_i, b_j) * a.inv_scale[i] * b.inv_scale[j]
void fp8_gemm(const Fp8Operand& a, const Fp8Operand& b, float* out, bool accumulate) {
  const int64_t K = a.k;
  parallel_for(a.rows, 4, [&](int64_t ib, int64_t ie) {
    for (int64_t i = ib; i < ie; ++i) {
      const float* ar = a.values.data() + i * K;
      float* o = out + i * b.rows;
      for (int64_t j = 0; j < b.rows; ++j) {
        const float v = dot(ar, b.values.data() + j * K, K) * a.inv_scale[static_cast<size_t>(i)] *
                        b.inv_scale[static_cast<size_t>(j)];
        o[j] = accumulate ? o[j] + v : v;
      }
    }
  });
}

}  // namespace

void CpuOps::linear_fp8_forward_impl(Tensor y, Tensor x, Tensor w, Tensor bias, Fp8Recipe recipe,
                                     const Fp8Amax& amax) {
  const int64_t M = x.rows(), K = x.cols(), N = w.dim(0);
  const Fp8Operand xq = quantize(f32(x), M, K, false, recipe, amax_slot(amax, 0));
  const Fp8Operand wq = quantize(f32(w), N, K, false, recipe, amax_slot(amax, 1));
  float* Y = f32(y);
  fp8_gemm(xq, wq, Y, false);
  if (!present(bias)) return;
  const float* B = f32(bias);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) Y[m * N + n] += B[n];
}

void CpuOps::linear_fp8_backward_input_impl(Tensor dx, Tensor dy, Tensor w, Fp8Recipe recipe, bool accumulate,
                                            const Fp8Amax& amax) {
  const int64_t M = dy.rows(), N = dy.cols(), K = w.cols();
  const Fp8Operand dyq = quantize(f32(dy), M, N, false, recipe);
  const Fp8Operand wq = quantize(f32(w), K, N, true, recipe, amax_slot(amax, 1));
  fp8_gemm(dyq, wq, f32(dx), accumulate);
}

void CpuOps::linear_fp8_backward_weight_impl(Tensor dw, Tensor dbias, Tensor dy, Tensor x, Fp8Recipe recipe,
                                             bool accumulate, const Fp8Amax& amax) {
  const int64_t M = dy.rows(), N = dy.cols(), K = x.cols();
  const float* DY = f32(dy);
  const Fp8Operand dyq = quantize(DY, N, M, true, recipe);
  const Fp8Operand xq = quantize(f32(x), K, M, true, recipe, amax_slot(amax, 0));
  fp8_gemm(dyq, xq, f32(dw), accumulate);
  if (!present(dbias)) return;
  float* DB = f32(dbias);
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0;
    for (int64_t m = 0; m < M; ++m) sum += DY[m * N + n];
    DB[n] = (accumulate ? DB[n] : 0.0f) + static_cast<float>(sum);
  }
}

}  // namespace anvil
