// The embedding's dispatch (CudaOps, cuda_ops.h) to the kernels of embedding.cu.
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/embedding.h"

namespace anvil {

using cuda::nv_bf16;
using cuda::p;

void CudaOps::embedding_forward_impl(Tensor out, Tensor ids, Tensor table) {
  cuda::embedding_forward(p<nv_bf16>(out), p<int32_t>(ids), p<nv_bf16>(table), ids.numel(), table.dim(0), table.cols(),
                          queue());
}

void CudaOps::embedding_backward_impl(Tensor dtable, Tensor ids, Tensor dout, bool accumulate) {
  cuda::embedding_backward(p<float>(dtable), p<int32_t>(ids), p<nv_bf16>(dout), ids.numel(), dtable.dim(0),
                           dtable.cols(), accumulate, queue());
}

}  // namespace anvil
