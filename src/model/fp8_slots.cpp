// The FP8 amax slots (model/fp8_slots.h).
#include "model/fp8_slots.h"

#include "core/env.h"
#include "model/params.h"

namespace anvil {

Fp8Slots::Fp8Slots(Tensor slots) {
  if (env_int("ANVIL_FP8_AMAX_REUSE", 1) != 0) slots_ = slots;
}

Fp8Amax Fp8Slots::amax(BlockLinear linear, bool x_known, bool w_known) const {
  if (!slots_.data) return {};
  return {tensor_at(slots_, (layer_ * kBlockLinears + linear) * 2, {2}), x_known, w_known};
}

Tensor Fp8Slots::x_amax(BlockLinear linear, bool when) const {
  if (!slots_.data || !when) return Tensor();
  return tensor_at(slots_, (layer_ * kBlockLinears + linear) * 2, {1});
}

}  // namespace anvil
