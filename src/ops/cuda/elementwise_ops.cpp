// The elementwise dispatch: add (CudaOps, cuda_ops.h) and the runtime's dtype conversion
// (CudaRuntime, gpu_runtime.h), to the kernels of elementwise.cu, and the runtime's strided row
// copy (cudaMemcpy2DAsync).
#include "core/cuda/check.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/elementwise.h"

namespace anvil {

using cuda::nv_bf16;
using cuda::p;

void CudaRuntime::convert_impl(Tensor dst, Tensor src) {
  const int64_t n = src.numel();
  if (dst.dtype == src.dtype) {
    if (dst.data != src.data && n)
      CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, stream_));
  } else if (dst.dtype == DType::kBF16) {  // from F32
    cuda::convert_f32_to_bf16(p<nv_bf16>(dst), p<float>(src), n, stream_);
  } else {  // BF16 to F32
    cuda::convert_bf16_to_f32(p<float>(dst), p<nv_bf16>(src), n, stream_);
  }
}

// CUDA's 2-D copy: one call for all the rows.
void CudaRuntime::copy_rows_impl(Tensor out, int64_t out_pitch, Tensor in, int64_t in_pitch, int64_t rows,
                             int64_t width) {
  const size_t es = dtype_size(in.dtype);
  CUDA_CHECK(cudaMemcpy2DAsync(out.data, static_cast<size_t>(out_pitch) * es, in.data,
                               static_cast<size_t>(in_pitch) * es, static_cast<size_t>(width) * es,
                               static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream_));
}

void CudaOps::add_impl(Tensor out, Tensor a, Tensor b) {
  const int64_t n = out.numel();
  if (out.dtype == DType::kBF16)
    cuda::add_bf16(p<nv_bf16>(out), p<nv_bf16>(a), p<nv_bf16>(b), n, queue());
  else
    cuda::add_f32(p<float>(out), p<float>(a), p<float>(b), n, queue());
}

}  // namespace anvil
