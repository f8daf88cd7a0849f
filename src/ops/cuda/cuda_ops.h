// The CUDA backend of the op set (ops/ops.h): bf16 compute, fp32 accumulation.
//
// CudaOps is the runtime (cuda_ops.cpp): one device and non-blocking streams: the main one,
// a side one for the optimizer overlapped with the next forward (set_queue; record/wait
// order them with events), and a copy one for the activation offload's copies to and from
// pinned host memory (copy_to_host/copy_to_device/wait_copy, events of their own). Every op
// is enqueued on the current stream; none waits for the host except download(), upload() and
// synchronize(). Ops that need temporary device memory (deterministic partial sums, the
// cross-entropy chunk, attention's row sums) share one scratch buffer that grows to the
// largest request and is then reused; the main stream's order makes the sharing safe (the
// side and copy streams may not use it).
// Scratch needs, for the memory plan: the largest of
//   rmsnorm backward   min(rows, 264) * cols * 4
//   qk-norm backward   min(ceil(rows * heads / 8), 264) * 2 * head_dim * 4
//   attention          the kernel's backward B * H * T * 4 + B * T * H * 2 * head_dim * 4, or
//                      cuDNN's workspace, at most attention_scratch_bytes (ops/attention_scratch.h)
//   bias gradient      min(rows, 264) * cols * 4
//   cross-entropy      its logits and dlogits (at most 512 MiB) + N * 4 (ops/cross_entropy_chunks.h)
//   cached attention   at most 64 MiB of chunk partials (inference only)
// plus the cuBLASLt workspace (32 MiB) for the backend's lifetime.
// Each op's *_impl (the front in ops.cpp has checked its tensors) picks its kernel and
// launches it in the <kernel>_ops.cpp beside the kernel's file pair, e.g. rmsnorm_ops.cpp.
// Attention runs through cuDNN's fused attention where it supports the shape and through
// the kernel of attention.cu elsewhere; ANVIL_ATTENTION (attention_cudnn.h) chooses.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/fp8_cast.h"
#include "ops/cuda/gemm_fp8.h"
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

  Device device() const override { return Device::kCUDA; }
  DType compute_dtype() const override { return DType::kBF16; }
  std::string name() const override { return name_; }
  void synchronize() override;
  void* stream() override { return main_; }

  void set_queue(Queue q) override { stream_ = q == Queue::kMain ? main_ : side_; }
  void record(int slot) override;
  void wait(int slot) override;
  void wait_copy(int slot) override;

  void set_op_timing(bool on) override { op_timing_ = on; }
  OpTimes take_op_times() override;

  std::string fp8_unsupported(Fp8Recipe recipe) const override;
  bool can_record() const override { return true; }
  void begin_recording() override;
  int end_recording() override;
  void replay(int recording) override;
  void drop_recordings() override;

 protected:
  void* alloc_impl(size_t bytes) override;
  void release_impl(void* p) override;
  int64_t memory_capacity() const override;
  void* alloc_host_impl(size_t bytes) override;  // page-locked (cudaHostAlloc)
  void release_host_impl(void* p) override;
  void copy_to_host_impl(void* host_dst, Tensor src, int slot) override;
  void copy_to_device_impl(Tensor dst, const void* host_src, int slot) override;
  void upload_impl(Tensor dst, const void* host_src) override;
  void download_impl(void* host_dst, Tensor src) override;
  void zero_impl(Tensor t) override;
  void convert_impl(Tensor dst, Tensor src) override;
  void copy_rows_impl(Tensor out, int64_t out_pitch, Tensor in, int64_t in_pitch, int64_t rows,
                      int64_t width) override;

  ANVIL_OP_IMPLS(, override)
  void add_rmsnorm_forward_impl(Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b, Tensor w,
                                float eps, Tensor amax) override;
  void linear_fp8_backward_impl(Tensor dx, Tensor dw, Tensor dbias, Tensor dy, Tensor x, Tensor w, Fp8Recipe recipe,
                                bool accumulate, const Fp8Amax& amax) override;

  // Op timing (ops.h): events on the main queue around each op, and the host's clock; not
  // off the main queue, nor for an op another op runs.
  bool op_timed() const override { return op_timing_ && stream_ == main_ && !in_timed_op_; }
  void begin_op(const std::string& name) override;
  void end_op() noexcept override;

 private:
  struct TimedOp {
    int name;  // index into op_names_
    cudaEvent_t start, end;
    std::chrono::steady_clock::time_point host_start;
    double host_ms;
  };

  cudaEvent_t timing_event();
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
  // Event slot `slot`, created on first use (timing off: only ordering).
  cudaEvent_t event(int slot);
  // The copy queue: waits for the current queue's point now, then the copy (the caller
  // enqueues it), then marks copy event `slot`.
  void begin_copy();
  void end_copy(int slot);

  std::string name_;
  cudaStream_t main_ = nullptr, side_ = nullptr;
  cudaStream_t stream_ = nullptr;  // the current queue's
  std::vector<cudaEvent_t> events_;
  cudaStream_t copy_ = nullptr;         // the activation offload's copies
  cudaEvent_t copy_issue_ = nullptr;    // the current queue's point a copy starts after
  std::vector<cudaEvent_t> copy_done_;  // by copy slot
  std::unique_ptr<cuda::Gemm> gemm_;
  std::unique_ptr<cuda::Fp8Gemm> fp8_gemm_;  // made by the first FP8 linear op
  int sm_ = 0;  // compute capability, major * 10 + minor
  cuda::AttentionImpl attention_impl_ = cuda::AttentionImpl::kCudnn;
  std::unique_ptr<cuda::CudnnAttention> cudnn_attention_;
  bool cudnn_unavailable_ = false;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  std::vector<cudaGraphExec_t> graphs_;  // recordings (inference decode steps)
  bool op_timing_ = false, in_timed_op_ = false;
  std::vector<std::string> op_names_;                   // timed ops' names, by first use
  std::unordered_map<std::string, int> op_name_index_;  // name -> index into op_names_
  std::vector<TimedOp> timed_ops_;                      // since the last take_op_times()
  std::vector<cudaEvent_t> free_events_;                // timing events, for reuse
};

}  // namespace anvil
