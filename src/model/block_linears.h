// The blocks' linear layers (model/fp8_slots.h's BlockLinear): the ops' linear_* or, with an
// FP8 recipe (`--fp8`, ops/fp8_recipe.h), their FP8 forms, which run the forward and both
// backward GEMMs in FP8; the embedding, the head, norms, attention and the loss are unchanged.
#pragma once

#include "model/fp8_slots.h"
#include "ops/ops.h"

namespace anvil {

class BlockLinears {
 public:
  // slots: the amax slots the FP8 forms read and write (none: empty).
  BlockLinears(Ops& ops, Fp8Recipe fp8, const Fp8Slots& slots) : ops_(ops), fp8_(fp8), slots_(slots) {}

  const Fp8Slots& slots() const { return slots_; }
  // y = x w^T + bias. x_known / w_known: the linear's slot holds that operand's amax already.
  void forward(BlockLinear linear, Tensor y, Tensor x, Tensor w, Tensor bias, bool x_known, bool w_known);
  void backward_input(BlockLinear linear, Tensor dx, Tensor dy, Tensor w);  // dx overwritten
  void backward_weight(BlockLinear linear, Tensor dw, Tensor dbias, Tensor dy, Tensor x, bool accumulate,
                       bool x_known);
  // backward_weight then backward_input (FP8: one op, dy quantized once).
  void backward(BlockLinear linear, Tensor dx, Tensor dw, Tensor dbias, Tensor dy, Tensor x, Tensor w,
                bool accumulate);

 private:
  Ops& ops_;
  Fp8Recipe fp8_;
  const Fp8Slots& slots_;
};

}  // namespace anvil
