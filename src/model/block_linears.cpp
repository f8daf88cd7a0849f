// The blocks' linear layers, plain or FP8 (model/block_linears.h).
#include "model/block_linears.h"

namespace anvil {

void BlockLinears::forward(BlockLinear linear, Tensor y, Tensor x, Tensor w, Tensor bias, bool x_known,
                           bool w_known) {
  if (fp8_ == Fp8Recipe::kOff)
    ops_.linear_forward(y, x, w, bias);
  else
    ops_.linear_fp8_forward(y, x, w, bias, fp8_, slots_.amax(linear, x_known, w_known));
}

void BlockLinears::backward_input(BlockLinear linear, Tensor dx, Tensor dy, Tensor w) {
  if (fp8_ == Fp8Recipe::kOff)
    ops_.linear_backward_input(dx, dy, w, false);
  else
    ops_.linear_fp8_backward_input(dx, dy, w, fp8_, false, slots_.amax(linear, false, true));
}

void BlockLinears::backward_weight(BlockLinear linear, Tensor dw, Tensor dbias, Tensor dy, Tensor x,
                                   bool accumulate, bool x_known) {
  if (fp8_ == Fp8Recipe::kOff)
    ops_.linear_backward_weight(dw, dbias, dy, x, accumulate);
  else
    ops_.linear_fp8_backward_weight(dw, dbias, dy, x, fp8_, accumulate, slots_.amax(linear, x_known, false));
}

void BlockLinears::backward(BlockLinear linear, Tensor dx, Tensor dw, Tensor dbias, Tensor dy, Tensor x, Tensor w,
                            bool accumulate) {
  if (fp8_ == Fp8Recipe::kOff) {
    ops_.linear_backward_weight(dw, dbias, dy, x, accumulate);
    ops_.linear_backward_input(dx, dy, w, false);
  } else {
    ops_.linear_fp8_backward(dx, dw, dbias, dy, x, w, fp8_, accumulate, slots_.amax(linear, true, true));
  }
}

}  // namespace anvil
