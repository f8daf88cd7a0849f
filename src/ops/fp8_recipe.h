// The FP8 recipe of the blocks' linear layers (`--fp8`, Ops::linear_fp8_*): dynamic scaling
// as torchao's Float8Linear does it. Each GEMM's two operands are scaled from their current
// amax, cast to FP8 with saturation (core/fp8.h), multiplied with fp32 accumulation, and the
// product is multiplied by the two inverse scales into the compute dtype:
//  - tensorwise: one scale per operand, fp8_max / amax of the whole tensor;
//  - rowwise: one scale per row of the operand along the GEMM's reduction dimension (x and w
//    by rows forward; dy by rows and w by columns for dx; dy and x by columns for dw), each
//    rounded down to a power of two (torchao's rowwise recipe), so dequantizing is exact.
// Every operand is E4M3, gradients too: with the scale from the tensor's own amax, the range
// E5M2 adds is not needed, and E4M3's third mantissa bit halves the rounding error. Measured
// (bench/fp8_grad_format.py: the whole gradient of tiny-qwen3 against float64 without FP8,
// 8 batches): tensorwise 9.4% with E4M3 gradients, 11.3% with E5M2; rowwise 9.3% and 11.2%.
// (torchao's tensorwise default is E5M2.) The scale is
// fp8_max / max(amax, 1e-12) in double, rounded to float (torchao's amax_to_scale); after it
// only a value that the float product rounds past fp8_max could overflow, and the saturating
// cast clamps it. NaN and infinity in an operand are not absorbed: NaN comes out, and the
// trainer's non-finite check stops the run.
#pragma once

#include <cstdint>
#include <string>

#include "core/fp8.h"
#include "core/tensor.h"

namespace anvil {

enum class Fp8Recipe { kOff, kTensorwise, kRowwise };
Fp8Recipe parse_fp8_recipe(const std::string& name);  // off | tensorwise | rowwise
const char* fp8_recipe_name(Fp8Recipe r);

constexpr Fp8Format kFp8Format = Fp8Format::kE4M3;  // of every operand

// The shared scratch one FP8 GEMM takes on the GPU (ops/cuda/linear_fp8_ops.cpp), which the
// memory plan counts: both operands' FP8 copies, p_rows x k and q_rows x k bytes, and each
// one's amax, scale and inverse-scale vectors (3 * max(rows, k) floats), each part 256-byte
// aligned.
struct Fp8Scratch {
  int64_t p_bytes = 0, q_bytes = 0, p_stats = 0, q_stats = 0;
  int64_t total() const { return p_bytes + q_bytes + p_stats + q_stats; }
};
Fp8Scratch fp8_scratch(int64_t p_rows, int64_t q_rows, int64_t k);
// The shared scratch of the tensorwise linear_fp8_backward on the GPU, dy (m, n) with x (m, k)
// and w (n, k): p_bytes dy's two FP8 copies (transposed, then as it lies; each m x n,
// 256-byte aligned), q_bytes one slot that x^T and then w^T take, p_stats and q_stats their
// amax, scale and inverse-scale vectors (as fp8_scratch's).
Fp8Scratch fp8_backward_scratch(int64_t m, int64_t n, int64_t k);

// Where a tensorwise FP8 linear op (ops.h's linear_fp8_*) finds or keeps the amax of its two
// operands that recur in a step: slot (2) F32 on the backend's device, x's amax then w's. x
// is the forward's input and the weight gradient's x^T, w the forward's weight and dx's w^T:
// the same tensors, so the same amax (a max is exact wherever it is taken). An operand whose
// flag says known takes its amax from the slot and skips its amax pass; any other x or w the
// op quantizes has its amax computed and stored there. No slot: every amax computed in the
// call, none stored. dy's never comes from a slot (each backward's dy is new).
struct Fp8Amax {
  Tensor slot;
  bool x_known = false, w_known = false;
};

// The factor an operand of the given amax is multiplied by before its cast (1/it dequantizes).
float fp8_scale(float amax, Fp8Format format, Fp8Recipe r);

}  // namespace anvil
