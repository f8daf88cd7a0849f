// sum_squares' dispatch (CudaOps, cuda_ops.h) to the two-pass reduction of sum_squares.cu.
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/sum_squares.h"

namespace anvil {

void CudaOps::sum_squares_impl(Tensor out, Tensor x) {
  const cuda::GradOut in = cuda::grad_out(x);
  cuda::sum_squares(cuda::p<float>(out), in.ptr, in.bf16, x.numel(),
                    scratch(cuda::sum_squares_scratch_bytes(x.numel())), queue());
}

}  // namespace anvil
