// The amax slots of tensorwise FP8 (`--fp8 tensorwise`, ops/fp8_recipe.h): each block's four
// linears (the fused qkv, o, the fused gate_up, down) have a slot of x's and w's amax
// (Fp8Amax), taken once in the forward and read by the backward's casts of x^T and w^T (the
// same tensors: recomputed ones are the same bits). x's is written by the op that makes x
// where one does (RMSNorm before qkv and gate_up, SwiGLU before down), so no cast of x or w
// reads its tensor for the amax but the forward's of w and of attention's output. The MLP's
// tiles share w's amax; each tile's x takes its own (a tile's amax is not the tensor's).
// The slots are the activation table's fp8_amax (model/activations.h).
// ANVIL_FP8_AMAX_REUSE=0 (read when the slots are made): every amax taken by the cast that
// needs it, as before the slots; the same bits either way.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/fp8_recipe.h"

namespace anvil {

// The blocks' linear layers, each one GEMM.
enum BlockLinear { kQkvLinear, kOLinear, kGateUpLinear, kDownLinear, kBlockLinears };

class Fp8Slots {
 public:
  Fp8Slots() = default;  // none: every amax taken by its cast
  // slots: the table's fp8_amax (L, kBlockLinears, 2) F32, or empty.
  explicit Fp8Slots(Tensor slots);

  void set_layer(int64_t layer) { layer_ = layer; }  // the block the pass is in
  // The linear's slot in the current block (none without slots); x_known / w_known: the slot
  // holds that operand's amax already.
  Fp8Amax amax(BlockLinear linear, bool x_known, bool w_known) const;
  // The slot's x amax alone, for the op that writes x (none without slots or when `when` is false).
  Tensor x_amax(BlockLinear linear, bool when = true) const;

 private:
  Tensor slots_;
  int64_t layer_ = 0;
};

}  // namespace anvil
