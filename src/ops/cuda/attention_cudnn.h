// Causal GQA attention through cuDNN's fused flash attention (SDPA), built with the
// cudnn-frontend graph API: the CUDA backend's path wherever cuDNN supports the shape
// (Hopper first), with anvil's own kernel (attention.h) for the rest.
//
// Same contract as attention.h: q, k and v are strided 4-D views (B, heads, T, hd) straight
// into the packed qkv (B, T, H + 2KV, hd), no copies; out (B, T, H, hd); lse (B, H, T) F32 is
// cuDNN's softmax Stats, the natural-log log-sum-exp of the scaled scores, as the kernel's
// and the CPU reference's lse; dq, dk, dv are written into the packed dqkv. Scale
// 1/sqrt(hd), causal (key <= query).
//
// Packed documents run through cuDNN's ragged (THD) path, each document one of cuDNN's batch
// entries, with the same tensors and layouts (lse too, so the kernel's backward reads a
// ragged forward's lse, and the ragged backward the kernel's).
//
// Graphs and their plans are built once per shape and direction and cached (the ragged ones
// all at a call shape's first packed call: ragged_group_shapes). A shape cuDNN
// cannot run (the support check fails, or its workspace is more than the memory plan's
// attention_scratch_bytes) is said once in the log and answered "no": the caller runs the
// kernel. The backward uses cuDNN's deterministic algorithm while its dP is within
// kCudnnDpBound, else the non-deterministic one or the kernel, as AttentionImpl says.
// libcudnn.so.9 is loaded at run time; built without cuDNN (ANVIL_HAVE_CUDNN unset), or
// where the library cannot be loaded, create() says why and returns nothing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ops/attention_ragged.h"
#include "ops/cuda/attention.h"

namespace anvil::cuda {

// How the CUDA backend runs attention: ANVIL_ATTENTION, read when a backend is made.
enum class AttentionImpl {
  // "cudnn" (default): cuDNN forward; its deterministic backward up to kCudnnDpBound of dP
  // (ops/attention_scratch.h), its non-deterministic one past it (runs there do not repeat
  // bit for bit; the kernel would take about twice as long)
  kCudnn,
  kCudnnDeterministic,     // "cudnn-deterministic": as cudnn, but past the bound the kernel's backward
  kCudnnForward,           // "cudnn-forward": cuDNN forward, the kernel's backward
  kCudnnNondeterministic,  // "cudnn-nondeterministic": cuDNN's faster backward; runs do not repeat bit for bit
  kKernel,                 // "kernel": anvil's mma.sync kernel only
};
AttentionImpl parse_attention_impl(const std::string& value);  // throws kUsage on anything else
const char* attention_impl_name(AttentionImpl impl);

bool cudnn_attention_built();  // this build has cuDNN and the frontend (ANVIL_HAVE_CUDNN)
std::string cudnn_version();    // of the cuDNN library loaded, e.g. "9.14.0"; "" without cuDNN

// Process-wide counts of attention calls that cuDNN ran, for tests and benchmarks.
struct CudnnAttentionCounts {
  int64_t forward = 0, backward = 0;
};
CudnnAttentionCounts cudnn_attention_counts();

class CudnnAttention {
 public:
  // nullptr, with the reason in *why, where cuDNN cannot be used at all (built without it,
  // libcudnn.so.9 not found, no handle). sm: the GPU's compute capability, major * 10 + minor.
  // impl: kCudnn, kCudnnDeterministic, kCudnnForward or kCudnnNondeterministic.
  static std::unique_ptr<CudnnAttention> create(cudaStream_t stream, int sm, AttentionImpl impl, std::string* why);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Workspace bytes of the forward (backward) of this shape, or -1 when cuDNN cannot run it.
  int64_t forward_workspace(const AttentionShape& s);
  int64_t backward_workspace(const AttentionShape& s);
  // Runs it with `workspace` of at least that many bytes; false when cuDNN failed, and then
  // the caller runs the kernel (the shape is not tried again).
  bool forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, const AttentionShape& s, void* workspace);
  bool backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const __nv_bfloat16* out,
                const float* lse, const AttentionShape& s, void* workspace);

  // Packed documents (ops/attention_ragged.h) over the call's B x T tokens `s`, the same
  // tensors and layouts: the scratch bytes (index arrays and the largest group's workspace),
  // or -1 where cuDNN cannot run every group within the memory plan's bound; then each
  // group's graph, all on the stream (the index arrays travel as kernel parameters).
  int64_t ragged_workspace(const AttentionShape& s, const std::vector<RaggedGroup>& groups, bool backward);
  bool forward_ragged(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, const AttentionShape& s,
                      const std::vector<RaggedGroup>& groups, void* scratch);
  bool backward_ragged(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                       const __nv_bfloat16* out, const float* lse, const AttentionShape& s,
                       const std::vector<RaggedGroup>& groups, void* scratch);

 private:
  struct Impl;
  explicit CudnnAttention(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace anvil::cuda
