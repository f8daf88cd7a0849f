// What the CUDA backend's ops share (cuda_ops.h): the runtime they run on, the GEMM plans and
// workspaces, cuDNN's attention and the shared scratch; make_cuda_ops. The ops' dispatch is in
// the <kernel>_ops.cpp files.
#include "ops/cuda/cuda_ops.h"

#include "core/cuda/check.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"

namespace anvil {

CudaOps::CudaOps(int device)
    : Ops(std::make_unique<CudaRuntime>(device)),
      rt_(static_cast<CudaRuntime&>(runtime())),
      gemm_workspace_(rt_.alloc(cuda::Gemm::kWorkspaceBytes)),
      gemm_(std::make_unique<cuda::Gemm>(rt_.main_stream(), gemm_workspace_)),
      attention_impl_(cuda::parse_attention_impl(env_str("ANVIL_ATTENTION", "cudnn"))) {}

// The GEMMs, cuDNN and the scratch run on the main stream only: done with it, they go before
// the runtime (Ops's member) does.
CudaOps::~CudaOps() {
  cudaStreamSynchronize(rt_.main_stream());
  gemm_.reset();
  fp8_gemm_.reset();
  cudnn_attention_.reset();
  for (void* p : {gemm_workspace_, fp8_gemm_workspace_, scratch_})
    if (p) cudaFree(p);
}

// The table's entries for s (ops/workspace.h): the FP8 GEMMs made with their workspace where
// the recipe is on, the scratch grown to its entry.
void CudaOps::reserve_workspaces(const WorkspaceShape& s) {
  const std::vector<WorkspaceEntry> table = workspace_table(Device::kCUDA, s);
  if (workspace_entry(table, "fp8 gemm workspace") > 0) fp8_gemm("reserve_workspaces");
  scratch(static_cast<size_t>(workspace_entry(table, "scratch")));
}

void* CudaOps::scratch(size_t bytes) {
  ANVIL_ENSURE(rt_.on_main(), kInternal, "the shared scratch is used off the main queue");
  if (bytes > scratch_bytes_) {
    rt_.release(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    scratch_ = rt_.alloc(bytes);
    scratch_bytes_ = bytes;
  }
  return scratch_;
}

cuda::Gemm& CudaOps::gemm(const char* op) {
  ANVIL_ENSURE(rt_.on_main(), kInternal, op, ": GEMMs run on the main queue only");
  return *gemm_;
}

cuda::Fp8Gemm& CudaOps::fp8_gemm(const char* op) {
  ANVIL_ENSURE(rt_.on_main(), kInternal, op, ": GEMMs run on the main queue only");
  if (!fp8_gemm_) {
    fp8_gemm_workspace_ = rt_.alloc(cuda::Fp8Gemm::kWorkspaceBytes);
    fp8_gemm_ = std::make_unique<cuda::Fp8Gemm>(rt_.main_stream(), fp8_gemm_workspace_);
  }
  return *fp8_gemm_;
}

cuda::CudnnAttention* CudaOps::cudnn_attention(const cuda::AttentionShape& s, bool backward) {
  using cuda::AttentionImpl;
  if (attention_impl_ == AttentionImpl::kKernel || (backward && attention_impl_ == AttentionImpl::kCudnnForward) ||
      s.batch * s.seq == 0)
    return nullptr;
  if (!cudnn_attention_ && !cudnn_unavailable_) {
    std::string why;
    cudnn_attention_ = cuda::CudnnAttention::create(rt_.main_stream(), rt_.sm(), attention_impl_, &why);
    cudnn_unavailable_ = !cudnn_attention_;
    if (cudnn_unavailable_) log_warn("attention: cuDNN is not available (", why, "); anvil's kernel runs it");
    else log_info("attention: cuDNN ", cuda::cudnn_version(), " fused attention (ANVIL_ATTENTION=",
                  cuda::attention_impl_name(attention_impl_), ")");
  }
  return cudnn_attention_.get();
}

std::unique_ptr<Ops> make_cuda_ops(int device) { return std::make_unique<CudaOps>(device); }

}  // namespace anvil
