// The linear layers' dispatch (CudaOps, cuda_ops.h): cuBLASLt GEMMs on the main queue (gemm.h),
// gemv.cu for a decode step's few rows, and the bias gradient of linear.cu.
#include "core/env.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemv.h"
#include "ops/cuda/linear.h"

namespace anvil {

using cuda::nv_bf16;
using cuda::p;
using cuda::present;

void CudaOps::linear_forward_impl(Tensor y, Tensor x, Tensor w, Tensor bias) {
  const char* op = "linear_forward";
  const bool f32_out = y.dtype == DType::kF32 && !present(bias);  // inference logits
  const int64_t M = x.rows(), K = x.cols(), N = w.dim(0);
  cuda::Gemm& gemm_main = gemm(op);  // linear layers run on the main queue only
  if (env_gemv() && cuda::gemv_fits(M, K, x.data, w.data)) {  // a decode step's few rows
    cuda::gemv(y.data, f32_out, p<nv_bf16>(x), p<nv_bf16>(w), present(bias) ? p<nv_bf16>(bias) : nullptr, M, N, K,
               queue());
    return;
  }
  gemm_main.run(y.data, f32_out ? CUDA_R_32F : CUDA_R_16BF, N, {x.data, K, false}, {w.data, K, true}, M, N, K, 0.0f,
                present(bias) ? bias.data : nullptr);
}

void CudaOps::linear_backward_input_impl(Tensor dx, Tensor dy, Tensor w, bool accumulate) {
  const int64_t M = dy.rows(), N = dy.cols(), K = w.cols();
  gemm("linear_backward_input")
      .run(dx.data, CUDA_R_16BF, K, {dy.data, N, false}, {w.data, K, false}, M, K, N, accumulate ? 1.0f : 0.0f,
           nullptr);
}

void CudaOps::linear_backward_weight_impl(Tensor dw, Tensor dbias, Tensor dy, Tensor x, bool accumulate) {
  const char* op = "linear_backward_weight";
  const cuda::GradOut dw_out = cuda::grad_out(dw);
  const int64_t M = dy.rows(), N = dy.cols(), K = x.cols();
  if (M > 0)
    gemm(op).run(dw.data, dw_out.bf16 ? CUDA_R_16BF : CUDA_R_32F, K, {dy.data, N, true}, {x.data, K, false}, N, K, M,
                 accumulate ? 1.0f : 0.0f, nullptr);
  else if (!accumulate)
    rt_.zero(dw);
  if (present(dbias))
    cuda::bias_grad(cuda::grad_out(dbias), p<nv_bf16>(dy), M, N, accumulate,
                    scratch(cuda::bias_grad_scratch_bytes(M, N)), queue());
}

}  // namespace anvil
