// The CUDA backend of the op set (ops/ops.h): bf16 compute, fp32 accumulation.
//
// CudaOps runs on the CUDA runtime (gpu_runtime.h), which it owns: every op is enqueued on
// the runtime's current stream. cuda_ops.cpp holds what the ops share: the GEMM plans and
// their workspaces, cuDNN's attention, and the scratch. Ops that need temporary device memory
// (deterministic partial sums, the cross-entropy chunk, attention's row sums, FP8 operand
// copies) share one scratch buffer that grows to the largest request and is then reused; the
// main stream's order makes the sharing safe (the side and copy streams may not use it). The
// GEMM workspaces and the scratch are the entries of the workspace table (ops/workspace.h),
// which reserve_workspaces allocates for a training micro-batch; past them the scratch grows
// only for requests the table does not count:
//   rmsnorm backward   min(rows, 264) * cols * 4
//   qk-norm backward   min(ceil(rows * heads / 8), 264) * 2 * head_dim * 4
//   bias gradient      min(rows, 264) * cols * 4
//   cached attention   at most 64 MiB of chunk partials (inference only)
// (the first three are below the cross-entropy chunk for any vocabulary over twice the hidden
// size).
// Each op's *_impl (the front in ops.cpp has checked its tensors) picks its kernel and
// launches it in the <kernel>_ops.cpp beside the kernel's file pair, e.g. rmsnorm_ops.cpp.
// Attention runs through cuDNN's fused attention where it supports the shape and through
// the kernel of attention.cu elsewhere; ANVIL_ATTENTION (attention_cudnn.h) chooses.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <utility>

#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/fp8_cast.h"
#include "ops/cuda/gemm_fp8.h"
#include "ops/cuda/gpu_runtime.h"
#include "ops/cuda/reduce.h"
#include "ops/ops.h"

namespace anvil {

namespace cuda {

using nv_bf16 = __nv_bfloat16;

template <class T>
T* p(const Tensor& t) {
  return static_cast<T*>(t.data);
}
inline bool present(const Tensor& t) { return t.data != nullptr; }
// A parameter gradient (ops.h), which the front has checked: F32, or BF16 when written.
inline GradOut grad_out(const Tensor& t) { return {t.data, t.dtype == DType::kBF16}; }

}  // namespace cuda

class CudaOps final : public Ops {
 public:
  explicit CudaOps(int device);
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  DType compute_dtype() const override { return DType::kBF16; }
  std::string fp8_unsupported(Fp8Recipe recipe) const override;
  void reserve_workspaces(const WorkspaceShape& s) override;

 protected:
  ANVIL_OP_IMPLS(, override)
  void add_rmsnorm_forward_impl(Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b, Tensor w,
                                float eps, Tensor amax) override;
  void linear_fp8_backward_impl(Tensor dx, Tensor dw, Tensor dbias, Tensor dy, Tensor x, Tensor w, Fp8Recipe recipe,
                                bool accumulate, const Fp8Amax& amax) override;

 private:
  // The current queue's stream, which every op is enqueued on.
  cudaStream_t queue() const { return rt_.current_stream(); }
  // The shared scratch buffer, grown to `bytes` if smaller (cudaFree waits for the GPU).
  void* scratch(size_t bytes);
  // cuDNN's attention for this direction under ANVIL_ATTENTION, made on first use; nullptr
  // where the kernel runs (the reason cuDNN cannot be used is said once) or there is no work.
  cuda::CudnnAttention* cudnn_attention(const cuda::AttentionShape& s, bool backward);
  // The GEMM plans and workspace belong to the main stream.
  cuda::Gemm& gemm(const char* op);
  cuda::Fp8Gemm& fp8_gemm(const char* op);
  // The two operands of an FP8 GEMM quantized into the shared scratch (ops/cuda/fp8_cast.h):
  // p (p_rows, K) and q (q_rows, K), each from its bf16 source, transposed where asked, each
  // tensorwise amax from or into its slot where it has one (fp8_cast.h's AmaxSlot).
  struct Fp8Source {
    const void* src;
    int64_t rows;
    bool transposed;
    cuda::AmaxSlot amax = {};
  };
  std::pair<cuda::Fp8Operand, cuda::Fp8Operand> quantize_fp8_pair(Fp8Source p, Fp8Source q, int64_t k,
                                                                   Fp8Recipe recipe);

  CudaRuntime& rt_;
  void* gemm_workspace_ = nullptr;  // the workspace table's entries (ops/workspace.h)
  std::unique_ptr<cuda::Gemm> gemm_;
  void* fp8_gemm_workspace_ = nullptr;
  std::unique_ptr<cuda::Fp8Gemm> fp8_gemm_;  // made by reserve_workspaces or the first FP8 linear op
  cuda::AttentionImpl attention_impl_ = cuda::AttentionImpl::kCudnn;
  std::unique_ptr<cuda::CudnnAttention> cudnn_attention_;
  bool cudnn_unavailable_ = false;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

}  // namespace anvil
