// The FP8 recipe's casts on the GPU (ops/fp8_recipe.h): a GEMM operand's amax (per row along
// the reduction dimension, or of the whole tensor), its scales, and the saturating
// round-to-nearest-even cast into FP8, transposed on the way where the operand is the
// transpose of the bf16 tensor (Hopper's FP8 GEMMs take both operands K-major: TN only).
// The CPU reference (ops/cpu/linear_fp8.cpp) gives the same bytes and scales.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace anvil::cuda {

// A tensorwise operand's amax kept outside the scratch (ops/fp8_recipe.h's Fp8Amax): one float
// of device memory that quantize_fp8 reads instead of taking the amax (known), or writes with
// the amax it takes. at null: none.
struct AmaxSlot {
  float* at = nullptr;
  bool known = false;
};

// dst (rows, k) E4M3 (the recipe's kFp8Format) = the operand scaled and cast: src (rows, k)
// bf16, or when transposed, the transpose of src (k, rows). rowwise: one scale per operand
// row, rounded down to a power of two; else one for the tensor. stats: 3 * max(rows, k)
// floats of device scratch (ops/fp8_recipe.h's Fp8Scratch). Returns the inverse scales in stats (rows of them, or one).
// straight (transposed tensorwise only; else null): also src cast untransposed, (k, rows), the
// operand of a GEMM that reads the same tensor the other way, from the same amax and scale
// (on the 8-element grid, from the same read). amax (tensorwise only): the operand's amax
// read from it, or written into it.
const float* quantize_fp8(uint8_t* dst, float* stats, const __nv_bfloat16* src, int64_t rows, int64_t k,
                          bool transposed, bool rowwise, cudaStream_t stream, uint8_t* straight = nullptr,
                          AmaxSlot amax = {});

}  // namespace anvil::cuda
