// The FP8 linear layers on the GPU (ops.h's linear_fp8_*): not built yet, so refused; the
// trainer refuses --fp8 on the GPU before this is reached (train/resolve.cpp).
#include "core/error.h"
#include "ops/cuda/cuda_ops.h"

namespace anvil {

namespace {
[[noreturn]] void refuse() {
  raise(ErrorKind::kUnsupported, "FP8 linear layers run on the CPU backend only in this build (use --fp8 off)");
}
}  // namespace

std::string CudaOps::fp8_unsupported() const { return "this build runs FP8 linear layers on the CPU only"; }

void CudaOps::linear_fp8_forward_impl(Tensor, Tensor, Tensor, Tensor, Fp8Recipe) { refuse(); }
void CudaOps::linear_fp8_backward_input_impl(Tensor, Tensor, Tensor, Fp8Recipe, bool) { refuse(); }
void CudaOps::linear_fp8_backward_weight_impl(Tensor, Tensor, Tensor, Tensor, Fp8Recipe, bool) { refuse(); }

}  // namespace anvil
