// argmax_rows' dispatch (CudaOps, cuda_ops.h) to the kernel of argmax.cu.
#include "ops/cuda/argmax.h"
#include "ops/cuda/cuda_ops.h"

namespace anvil {

void CudaOps::argmax_rows_impl(Tensor out, Tensor x) {
  cuda::argmax_rows(cuda::p<int32_t>(out), cuda::p<float>(x), x.rows(), x.cols(), queue());
}

}  // namespace anvil
