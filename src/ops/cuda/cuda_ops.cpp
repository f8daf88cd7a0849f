// The CUDA backend of the op set (ops/ops.h): bf16 compute, fp32 accumulation.
//
// This file checks each op's tensors (device, dtype, shapes) and calls the launcher of the
// op's own file pair; kernels live there. One backend = one device and two non-blocking
// streams: the main one and a side one for the optimizer overlapped with the next forward
// (set_queue; record/wait order them with events). Every op is enqueued on the current stream; none waits for the host except
// download(), upload() and synchronize(). Ops that need temporary device memory
// (deterministic partial sums, the cross-entropy chunk, attention's row sums) share one
// scratch buffer that grows to the largest request and is then reused; the main stream's
// order makes the sharing safe (the side stream may not use it).
// Scratch needs, for the memory plan: the largest of
//   rmsnorm backward   min(rows, 264) * cols * 4
//   qk-norm backward   min(ceil(rows * heads / 8), 264) * 2 * head_dim * 4
//   attention          the kernel's backward B * H * T * 4 + B * T * H * 2 * head_dim * 4, or
//                      cuDNN's workspace, at most attention_scratch_bytes (ops/attention_scratch.h)
//   bias gradient      min(rows, 264) * cols * 4
//   cross-entropy      its logits and dlogits (at most 512 MiB) + N * 4 (ops/cross_entropy_chunks.h)
//   cached attention   at most 64 MiB of chunk partials (inference only)
// plus the cuBLASLt workspace (32 MiB) for the backend's lifetime.
// Attention runs through cuDNN's fused attention where it supports the shape and through
// the kernel of attention.cu elsewhere; ANVIL_ATTENTION (attention_cudnn.h) chooses.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cuda/check.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "ops/cross_entropy_chunks.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/argmax.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/decode_attention.h"
#include "ops/cuda/elementwise.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/gemv.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/linear.h"
#include "ops/cuda/qk_norm_rope.h"
#include "ops/cuda/rmsnorm.h"
#include "ops/cuda/sum_squares.h"
#include "ops/cuda/swiglu.h"
#include "ops/ops.h"

namespace anvil {
namespace {

using nv_bf16 = __nv_bfloat16;

bool present(const Tensor& t) { return t.data != nullptr; }

void expect(const Tensor& t, DType dtype, const char* op, const char* name) {
  ANVIL_ENSURE(t.data != nullptr || t.numel() == 0, kInternal, op, ": tensor ", name, " is missing");
  ANVIL_ENSURE(t.device == Device::kCUDA, kInternal, op, ": tensor ", name, " is not on the GPU");
  ANVIL_ENSURE(t.dtype == dtype, kInternal, op, ": tensor ", name, " is ", dtype_name(t.dtype), ", expected ",
               dtype_name(dtype));
}

// A parameter gradient (ops.h): F32, or BF16 when it is written, not accumulated.
cuda::GradOut grad_out(const Tensor& t, bool accumulate, const char* op, const char* name) {
  expect(t, t.dtype == DType::kBF16 ? DType::kBF16 : DType::kF32, op, name);
  ANVIL_ENSURE(t.dtype == DType::kF32 || !accumulate, kInternal, op, ": the bf16 gradient ", name,
               " can be written, not accumulated");
  return {t.data, t.dtype == DType::kBF16};
}

void expect_numel(const Tensor& t, int64_t n, const char* op, const char* name) {
  ANVIL_ENSURE(t.numel() == n, kInternal, op, ": tensor ", name, " has shape ", t.shape.str(), " (", t.numel(),
               " elements), expected ", n, " elements");
}

template <class T>
T* p(const Tensor& t) {
  return static_cast<T*>(t.data);
}

class CudaOps final : public Ops {
 public:
  explicit CudaOps(int device) {
    int count = 0;
    const cudaError_t st = cudaGetDeviceCount(&count);
    ANVIL_ENSURE(st == cudaSuccess && count > 0, kNoDevice, "no usable CUDA GPU (",
                 st == cudaSuccess ? "none found" : cudaGetErrorString(st), "); use --device cpu");
    ANVIL_ENSURE(device >= 0 && device < count, kNoDevice, "CUDA device ", device, " does not exist (", count,
                 " visible)");
    CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    ANVIL_ENSURE(prop.major >= 8, kUnsupported, "GPU ", prop.name, " has compute capability ", prop.major, ".",
                 prop.minor, "; anvil's CUDA backend needs 8.0 or newer (bf16 tensor cores)");
    name_ = cat("cuda:", device, " (", prop.name, ")");
    sm_ = prop.major * 10 + prop.minor;
    attention_impl_ = cuda::parse_attention_impl(env_str("ANVIL_ATTENTION", "cudnn"));
    // The main queue's kernels (the GEMMs of the forward) go first where the side queue's
    // (the optimizer of the last step, memory-bound) compete for the multiprocessors.
    int lowest = 0, highest = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
    CUDA_CHECK(cudaStreamCreateWithPriority(&main_, cudaStreamNonBlocking, highest));
    CUDA_CHECK(cudaStreamCreateWithPriority(&side_, cudaStreamNonBlocking, lowest));
    stream_ = main_;
    gemm_ = std::make_unique<cuda::Gemm>(main_);
  }

  ~CudaOps() override {
    cudaStreamSynchronize(side_);
    cudaStreamSynchronize(main_);
    for (cudaGraphExec_t g : graphs_) cudaGraphExecDestroy(g);
    gemm_.reset();
    cudnn_attention_.reset();
    if (scratch_) cudaFree(scratch_);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    for (const TimedOp& t : timed_ops_) free_events_.insert(free_events_.end(), {t.start, t.end});
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    cudaStreamDestroy(side_);
    cudaStreamDestroy(main_);
  }

  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  Device device() const override { return Device::kCUDA; }
  DType compute_dtype() const override { return DType::kBF16; }
  std::string name() const override { return name_; }

  // ---- memory
  void* alloc(size_t bytes) override {
    void* ptr = nullptr;
    const cudaError_t st = cudaMalloc(&ptr, bytes ? bytes : 1);
    if (st == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      raise(ErrorKind::kOutOfMemory, "GPU allocation of ", bytes, " bytes failed on ", name_, " (", free_b,
            " of ", total_b, " bytes free)");
    }
    CUDA_CHECK(st);
    sizes_[ptr] = bytes;
    stats_.allocated += static_cast<int64_t>(bytes);
    stats_.peak = std::max(stats_.peak, stats_.allocated);
    return ptr;
  }
  void release(void* ptr) override {
    if (!ptr) return;
    auto it = sizes_.find(ptr);
    ANVIL_ENSURE(it != sizes_.end(), kInternal, "GPU release of a pointer this backend did not allocate");
    stats_.allocated -= static_cast<int64_t>(it->second);
    sizes_.erase(it);
    CUDA_CHECK(cudaFree(ptr));
  }
  MemoryStats memory_stats() const override {
    MemoryStats m = stats_;
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    m.capacity = static_cast<int64_t>(total_b);
    return m;
  }
  void upload(Tensor dst, const void* host_src) override {
    ANVIL_ENSURE(dst.device == Device::kCUDA, kInternal, "upload: destination is not on the GPU");
    if (dst.bytes() == 0) return;
    CUDA_CHECK(cudaMemcpyAsync(dst.data, host_src, dst.bytes(), cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host buffer may be reused on return
  }
  void download(void* host_dst, Tensor src) override {
    ANVIL_ENSURE(src.device == Device::kCUDA, kInternal, "download: source is not on the GPU");
    if (src.bytes() == 0) return;
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src.data, src.bytes(), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void zero(Tensor t) override {
    ANVIL_ENSURE(t.device == Device::kCUDA, kInternal, "zero: tensor is not on the GPU");
    const Timed timing = timed("zero", [&] { return cat(t.bytes(), " bytes"); });
    if (t.bytes()) CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), stream_));
  }
  void convert(Tensor dst, Tensor src) override {
    ANVIL_ENSURE(dst.device == Device::kCUDA && src.device == Device::kCUDA, kInternal,
                 "convert: tensors are not on the GPU");
    expect_numel(dst, src.numel(), "convert", "dst");
    const int64_t n = src.numel();
    const Timed timing =
        timed("convert", [&] { return cat(dtype_name(src.dtype), "->", dtype_name(dst.dtype), " ", n); });
    if (dst.dtype == src.dtype) {
      if (dst.data != src.data && n)
        CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, stream_));
    } else if (dst.dtype == DType::kBF16 && src.dtype == DType::kF32) {
      cuda::convert_f32_to_bf16(p<nv_bf16>(dst), p<float>(src), n, stream_);
    } else if (dst.dtype == DType::kF32 && src.dtype == DType::kBF16) {
      cuda::convert_bf16_to_f32(p<float>(dst), p<nv_bf16>(src), n, stream_);
    } else {
      raise(ErrorKind::kInternal, "convert: ", dtype_name(src.dtype), " to ", dtype_name(dst.dtype),
            " is not supported (F32 <-> BF16 only)");
    }
  }
  void synchronize() override {
    CUDA_CHECK(cudaStreamSynchronize(side_));
    CUDA_CHECK(cudaStreamSynchronize(main_));
  }
  void* stream() override { return main_; }

  // ---- queues
  void set_queue(Queue q) override { stream_ = q == Queue::kMain ? main_ : side_; }
  void record(int slot) override { CUDA_CHECK(cudaEventRecord(event(slot), stream_)); }
  void wait(int slot) override { CUDA_CHECK(cudaStreamWaitEvent(stream_, event(slot), 0)); }

  // ---- op timing (ops.h)
  void set_op_timing(bool on) override { op_timing_ = on; }

  OpTimes take_op_times() override {
    CUDA_CHECK(cudaStreamSynchronize(main_));
    OpTimes r;
    std::vector<int> row(op_names_.size(), -1);  // op name -> its row of r.ops
    for (const TimedOp& t : timed_ops_) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, t.start, t.end));
      int& i = row[static_cast<size_t>(t.name)];
      if (i < 0) {
        i = static_cast<int>(r.ops.size());
        r.ops.push_back({op_names_[static_cast<size_t>(t.name)], 0, 0, 0});
      }
      OpTime& o = r.ops[static_cast<size_t>(i)];
      ++o.calls;
      o.device_ms += ms;
      o.host_ms += t.host_ms;
    }
    if (!timed_ops_.empty()) {
      float span = 0;
      CUDA_CHECK(cudaEventElapsedTime(&span, timed_ops_.front().start, timed_ops_.back().end));
      r.span_ms = span;
    }
    for (const TimedOp& t : timed_ops_) free_events_.insert(free_events_.end(), {t.start, t.end});
    timed_ops_.clear();
    return r;
  }

  // ---- linear layers
  void linear_forward(Tensor y, Tensor x, Tensor w, Tensor bias) override {
    const char* op = "linear_forward";
    const bool f32_out = y.dtype == DType::kF32 && !present(bias);  // inference logits
    if (!f32_out) expect(y, DType::kBF16, op, "y");
    expect(x, DType::kBF16, op, "x");
    expect(w, DType::kBF16, op, "w");
    const int64_t M = x.rows(), K = x.cols(), N = w.dim(0);
    ANVIL_ENSURE(w.cols() == K && y.rows() == M && y.cols() == N, kInternal, op, " shapes: x ", x.shape.str(),
                 " w ", w.shape.str(), " y ", y.shape.str());
    const Timed timing = timed(op, [&] { return cat(M, "x", N, "x", K); });
    if (present(bias)) {
      expect(bias, DType::kBF16, op, "bias");
      expect_numel(bias, N, op, "bias");
    }
    cuda::Gemm& gemm_main = gemm(op);  // linear layers run on the main queue only
    if (env_gemv() && cuda::gemv_fits(M, K, x.data, w.data)) {  // a decode step's few rows
      cuda::gemv(y.data, f32_out, p<nv_bf16>(x), p<nv_bf16>(w), present(bias) ? p<nv_bf16>(bias) : nullptr, M, N, K,
                 stream_);
      return;
    }
    gemm_main.run(y.data, f32_out ? CUDA_R_32F : CUDA_R_16BF, N, {x.data, K, false}, {w.data, K, true}, M, N, K, 0.0f,
               present(bias) ? bias.data : nullptr);
  }

  void linear_backward_input(Tensor dx, Tensor dy, Tensor w, bool accumulate) override {
    const char* op = "linear_backward_input";
    expect(dx, DType::kBF16, op, "dx");
    expect(dy, DType::kBF16, op, "dy");
    expect(w, DType::kBF16, op, "w");
    const int64_t M = dy.rows(), N = dy.cols(), K = w.cols();
    ANVIL_ENSURE(w.dim(0) == N && dx.rows() == M && dx.cols() == K, kInternal, op, " shapes: dy ", dy.shape.str(),
                 " w ", w.shape.str(), " dx ", dx.shape.str());
    const Timed timing = timed(op, [&] { return cat(M, "x", N, "x", K); });
    gemm(op).run(dx.data, CUDA_R_16BF, K, {dy.data, N, false}, {w.data, K, false}, M, K, N, accumulate ? 1.0f : 0.0f,
               nullptr);
  }

  void linear_backward_weight(Tensor dw, Tensor dbias, Tensor dy, Tensor x, bool accumulate) override {
    const char* op = "linear_backward_weight";
    const cuda::GradOut dw_out = grad_out(dw, accumulate, op, "dw");
    expect(dy, DType::kBF16, op, "dy");
    expect(x, DType::kBF16, op, "x");
    const int64_t M = dy.rows(), N = dy.cols(), K = x.cols();
    ANVIL_ENSURE(x.rows() == M && dw.dim(0) == N && dw.cols() == K, kInternal, op, " shapes: dy ", dy.shape.str(),
                 " x ", x.shape.str(), " dw ", dw.shape.str());
    const Timed timing = timed(op, [&] { return cat(M, "x", N, "x", K); });
    if (M > 0)
      gemm(op).run(dw.data, dw_out.bf16 ? CUDA_R_16BF : CUDA_R_32F, K, {dy.data, N, true}, {x.data, K, false}, N, K, M,
                   accumulate ? 1.0f : 0.0f, nullptr);
    else if (!accumulate)
      zero(dw);
    if (present(dbias)) {
      const cuda::GradOut db_out = grad_out(dbias, accumulate, op, "dbias");
      expect_numel(dbias, N, op, "dbias");
      cuda::bias_grad(db_out, p<nv_bf16>(dy), M, N, accumulate, scratch(cuda::bias_grad_scratch_bytes(M, N)), stream_);
    }
  }

  // ---- embedding
  void embedding_forward(Tensor out, Tensor ids, Tensor table) override {
    const char* op = "embedding_forward";
    expect(out, DType::kBF16, op, "out");
    expect(ids, DType::kI32, op, "ids");
    expect(table, DType::kBF16, op, "table");
    const int64_t N = ids.numel(), C = table.cols();
    expect_numel(out, N * C, op, "out");
    const Timed timing = timed(op, [&] { return cat(N, "x", C); });
    cuda::embedding_forward(p<nv_bf16>(out), p<int32_t>(ids), p<nv_bf16>(table), N, table.dim(0), C, stream_);
  }

  void embedding_backward(Tensor dtable, Tensor ids, Tensor dout, bool accumulate) override {
    const char* op = "embedding_backward";
    expect(dtable, DType::kF32, op, "dtable");
    expect(ids, DType::kI32, op, "ids");
    expect(dout, DType::kBF16, op, "dout");
    const int64_t N = ids.numel(), C = dtable.cols();
    expect_numel(dout, N * C, op, "dout");
    const Timed timing = timed(op, [&] { return cat(N, "x", C); });
    cuda::embedding_backward(p<float>(dtable), p<int32_t>(ids), p<nv_bf16>(dout), N, dtable.dim(0), C, accumulate,
                             stream_);
  }

  // ---- RMSNorm
  void rmsnorm_forward(Tensor out, Tensor rstd, Tensor x, Tensor w, float eps) override {
    const char* op = "rmsnorm_forward";
    expect(out, DType::kBF16, op, "out");
    expect(rstd, DType::kF32, op, "rstd");
    expect(x, DType::kBF16, op, "x");
    expect(w, DType::kBF16, op, "w");
    const int64_t R = x.rows(), C = x.cols();
    const Timed timing = timed(op, [&] { return cat(R, "x", C); });
    expect_numel(out, R * C, op, "out");
    expect_numel(rstd, R, op, "rstd");
    expect_numel(w, C, op, "w");
    cuda::rmsnorm_forward(p<nv_bf16>(out), p<float>(rstd), p<nv_bf16>(x), p<nv_bf16>(w), R, C, eps, stream_);
  }

  void add_rmsnorm_forward(Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b, Tensor w, float eps) override {
    const char* op = "add_rmsnorm_forward";
    expect(sum, DType::kBF16, op, "sum");
    expect(out, DType::kBF16, op, "out");
    expect(rstd, DType::kF32, op, "rstd");
    expect(a, DType::kBF16, op, "a");
    expect(b, DType::kBF16, op, "b");
    expect(w, DType::kBF16, op, "w");
    const int64_t R = a.rows(), C = a.cols();
    const Timed timing = timed(op, [&] { return cat(R, "x", C); });
    expect_numel(sum, R * C, op, "sum");
    expect_numel(out, R * C, op, "out");
    expect_numel(b, R * C, op, "b");
    expect_numel(rstd, R, op, "rstd");
    expect_numel(w, C, op, "w");
    cuda::add_rmsnorm_forward(p<nv_bf16>(sum), p<nv_bf16>(out), p<float>(rstd), p<nv_bf16>(a), p<nv_bf16>(b),
                              p<nv_bf16>(w), R, C, eps, stream_);
  }

  void rmsnorm_backward(Tensor dx, Tensor dw, Tensor dout, Tensor x, Tensor w, Tensor rstd,
                        bool accumulate, bool accumulate_dw) override {
    const char* op = "rmsnorm_backward";
    expect(dx, DType::kBF16, op, "dx");
    const cuda::GradOut dw_out = grad_out(dw, accumulate_dw, op, "dw");
    expect(dout, DType::kBF16, op, "dout");
    expect(x, DType::kBF16, op, "x");
    expect(w, DType::kBF16, op, "w");
    expect(rstd, DType::kF32, op, "rstd");
    const int64_t R = x.rows(), C = x.cols();
    const Timed timing = timed(op, [&] { return cat(R, "x", C); });
    expect_numel(dx, R * C, op, "dx");
    expect_numel(dout, R * C, op, "dout");
    expect_numel(dw, C, op, "dw");
    expect_numel(rstd, R, op, "rstd");
    cuda::rmsnorm_backward(p<nv_bf16>(dx), dw_out, p<nv_bf16>(dout), p<nv_bf16>(x), p<nv_bf16>(w),
                           p<float>(rstd), R, C, accumulate, accumulate_dw,
                           scratch(cuda::rmsnorm_backward_scratch_bytes(R, C)), stream_);
  }

  // ---- qk-norm + RoPE
  void qk_norm_rope_forward(Tensor out, Tensor rstd, Tensor in, Tensor q_w, Tensor k_w, Tensor cos, Tensor sin,
                            int n_heads, int n_kv_heads, float eps) override {
    const char* op = "qk_norm_rope_forward";
    const cuda::QkRopeShape s = qk_shape(op, in, cos, sin, n_heads, n_kv_heads);
    const Timed timing = timed(op, [&] { return cat(s.rows, "x", n_heads, "+", n_kv_heads, "x", s.head_dim); });
    expect(out, DType::kBF16, op, "out");
    expect_numel(out, in.numel(), op, "out");
    const bool norm = check_qk_weights(op, q_w, k_w, s.head_dim);
    if (norm) {
      expect(rstd, DType::kF32, op, "rstd");
      expect_numel(rstd, s.rows * (n_heads + n_kv_heads), op, "rstd");
    }
    cuda::qk_norm_rope_forward(p<nv_bf16>(out), norm ? p<float>(rstd) : nullptr, p<nv_bf16>(in),
                               norm ? p<nv_bf16>(q_w) : nullptr, norm ? p<nv_bf16>(k_w) : nullptr, p<float>(cos),
                               p<float>(sin), s, eps, stream_);
  }

  void qk_norm_rope_backward(Tensor din, Tensor dq_w, Tensor dk_w, Tensor dout, Tensor in, Tensor q_w, Tensor k_w,
                             Tensor rstd, Tensor cos, Tensor sin, int n_heads, int n_kv_heads,
                             bool accumulate_dw) override {
    const char* op = "qk_norm_rope_backward";
    const cuda::QkRopeShape s = qk_shape(op, in, cos, sin, n_heads, n_kv_heads);
    const Timed timing = timed(op, [&] { return cat(s.rows, "x", n_heads, "+", n_kv_heads, "x", s.head_dim); });
    expect(din, DType::kBF16, op, "din");
    expect(dout, DType::kBF16, op, "dout");
    expect_numel(din, in.numel(), op, "din");
    expect_numel(dout, in.numel(), op, "dout");
    const bool norm = check_qk_weights(op, q_w, k_w, s.head_dim);
    cuda::GradOut dq_out, dk_out;
    if (norm) {
      expect(rstd, DType::kF32, op, "rstd");
      expect_numel(rstd, s.rows * (n_heads + n_kv_heads), op, "rstd");
      dq_out = grad_out(dq_w, accumulate_dw, op, "dq_w");
      dk_out = grad_out(dk_w, accumulate_dw, op, "dk_w");
      expect_numel(dq_w, s.head_dim, op, "dq_w");
      expect_numel(dk_w, s.head_dim, op, "dk_w");
    }
    cuda::qk_norm_rope_backward(p<nv_bf16>(din), dq_out, dk_out,
                                p<nv_bf16>(dout), p<nv_bf16>(in), norm ? p<nv_bf16>(q_w) : nullptr,
                                norm ? p<nv_bf16>(k_w) : nullptr, norm ? p<float>(rstd) : nullptr, p<float>(cos),
                                p<float>(sin), s, accumulate_dw, scratch(cuda::qk_norm_rope_backward_scratch_bytes(s)),
                                stream_);
  }

  // ---- attention
  void attention_forward(Tensor out, Tensor lse, Tensor qkv, int n_heads, int n_kv_heads) override {
    const char* op = "attention_forward";
    const cuda::AttentionShape s = attn_shape(op, qkv, n_heads, n_kv_heads);
    const Timed timing =
        timed(op, [&] { return cat(s.batch, "x", s.seq, "x", n_heads, "/", n_kv_heads, "x", s.head_dim); });
    expect(out, DType::kBF16, op, "out");
    expect(lse, DType::kF32, op, "lse");
    expect_numel(out, s.batch * s.seq * n_heads * s.head_dim, op, "out");
    expect_numel(lse, s.batch * n_heads * s.seq, op, "lse");
    if (cuda::CudnnAttention* dnn = cudnn_attention(s, false)) {
      const int64_t ws = dnn->forward_workspace(s);
      if (ws >= 0 && dnn->forward(p<nv_bf16>(out), p<float>(lse), p<nv_bf16>(qkv), s, scratch(static_cast<size_t>(ws))))
        return;
    }
    cuda::attention_forward(p<nv_bf16>(out), p<float>(lse), p<nv_bf16>(qkv), s, stream_);
  }

  void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int n_heads,
                          int n_kv_heads) override {
    const char* op = "attention_backward";
    const cuda::AttentionShape s = attn_shape(op, qkv, n_heads, n_kv_heads);
    const Timed timing =
        timed(op, [&] { return cat(s.batch, "x", s.seq, "x", n_heads, "/", n_kv_heads, "x", s.head_dim); });
    expect(dqkv, DType::kBF16, op, "dqkv");
    expect(dout, DType::kBF16, op, "dout");
    expect(out, DType::kBF16, op, "out");
    expect(lse, DType::kF32, op, "lse");
    expect_numel(dqkv, qkv.numel(), op, "dqkv");
    expect_numel(dout, s.batch * s.seq * n_heads * s.head_dim, op, "dout");
    expect_numel(out, s.batch * s.seq * n_heads * s.head_dim, op, "out");
    expect_numel(lse, s.batch * n_heads * s.seq, op, "lse");
    if (cuda::CudnnAttention* dnn = cudnn_attention(s, true)) {
      const int64_t ws = dnn->backward_workspace(s);
      if (ws >= 0 && dnn->backward(p<nv_bf16>(dqkv), p<nv_bf16>(dout), p<nv_bf16>(qkv), p<nv_bf16>(out),
                                   p<float>(lse), s, scratch(static_cast<size_t>(ws))))
        return;
    }
    cuda::attention_backward(p<nv_bf16>(dqkv), p<nv_bf16>(dout), p<nv_bf16>(qkv), p<nv_bf16>(out), p<float>(lse), s,
                             scratch(cuda::attention_backward_scratch_bytes(s)), stream_);
  }

  // ---- inference attention against a KV cache (decode_attention.h)
  void attention_cached(Tensor out, Tensor qkv, Tensor k_cache, Tensor v_cache, Tensor slots, Tensor positions,
                        int n_heads, int n_kv_heads) override {
    const char* op = "attention_cached";
    expect(out, DType::kBF16, op, "out");
    expect(qkv, DType::kBF16, op, "qkv");
    expect(k_cache, DType::kBF16, op, "k_cache");
    expect(v_cache, DType::kBF16, op, "v_cache");
    expect(slots, DType::kI32, op, "slots");
    expect(positions, DType::kI32, op, "positions");
    ANVIL_ENSURE(k_cache.shape.ndim == 4 && k_cache.dim(1) == n_kv_heads && k_cache.shape == v_cache.shape, kInternal,
                 op, ": cache ", k_cache.shape.str(), " is not (S, ", n_kv_heads, ", P, head_dim)");
    cuda::DecodeAttentionShape s;
    s.rows = slots.numel();
    s.slots = k_cache.dim(0);
    s.positions = k_cache.dim(2);
    s.n_heads = n_heads;
    s.n_kv_heads = n_kv_heads;
    s.head_dim = static_cast<int>(k_cache.dim(3));
    expect_numel(positions, s.rows, op, "positions");
    expect_numel(qkv, s.rows * (n_heads + 2 * n_kv_heads) * s.head_dim, op, "qkv");
    expect_numel(out, s.rows * n_heads * s.head_dim, op, "out");
    const Timed timing = timed(op, [&] { return cat(s.rows, " rows"); });
    cuda::attention_cached(p<nv_bf16>(out), p<nv_bf16>(qkv), p<nv_bf16>(k_cache), p<nv_bf16>(v_cache),
                           p<int32_t>(slots), p<int32_t>(positions), s,
                           scratch(cuda::decode_attention_scratch_bytes(s)), stream_);
  }

  void argmax_rows(Tensor out, Tensor x) override {
    expect(out, DType::kI32, "argmax_rows", "out");
    expect(x, DType::kF32, "argmax_rows", "x");
    expect_numel(out, x.rows(), "argmax_rows", "out");
    const Timed timing = timed("argmax_rows", [&] { return cat(x.rows(), "x", x.cols()); });
    cuda::argmax_rows(p<int32_t>(out), p<float>(x), x.rows(), x.cols(), stream_);
  }

  // ---- CUDA graphs: the stream's work between begin and end, instantiated for replay
  bool can_record() const override { return true; }
  void begin_recording() override {
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  }
  int end_recording() override {
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t st = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_CHECK(st);
    graphs_.push_back(exec);
    return static_cast<int>(graphs_.size()) - 1;
  }
  void replay(int recording) override {
    ANVIL_ENSURE(recording >= 0 && recording < static_cast<int>(graphs_.size()), kInternal, "replay of recording ",
                 recording, " of ", graphs_.size());
    CUDA_CHECK(cudaGraphLaunch(graphs_[static_cast<size_t>(recording)], stream_));
  }
  void drop_recordings() override {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (cudaGraphExec_t g : graphs_) CUDA_CHECK(cudaGraphExecDestroy(g));
    graphs_.clear();
  }

  // ---- SwiGLU, add
  void swiglu_forward(Tensor out, Tensor gate_up) override {
    const char* op = "swiglu_forward";
    expect(out, DType::kBF16, op, "out");
    expect(gate_up, DType::kBF16, op, "gate_up");
    const int64_t N = gate_up.rows(), I = gate_up.cols() / 2;
    const Timed timing = timed(op, [&] { return cat(N, "x", I); });
    ANVIL_ENSURE(gate_up.cols() % 2 == 0, kInternal, op, ": gate_up ", gate_up.shape.str(), " has an odd width");
    expect_numel(out, N * I, op, "out");
    cuda::swiglu_forward(p<nv_bf16>(out), p<nv_bf16>(gate_up), N, I, stream_);
  }

  void swiglu_backward(Tensor dgate_up, Tensor dout, Tensor gate_up, Tensor act) override {
    const char* op = "swiglu_backward";
    expect(dgate_up, DType::kBF16, op, "dgate_up");
    expect(dout, DType::kBF16, op, "dout");
    expect(gate_up, DType::kBF16, op, "gate_up");
    const int64_t N = gate_up.rows(), I = gate_up.cols() / 2;
    const Timed timing = timed(op, [&] { return cat(N, "x", I); });
    ANVIL_ENSURE(gate_up.cols() % 2 == 0, kInternal, op, ": gate_up ", gate_up.shape.str(), " has an odd width");
    expect_numel(dgate_up, N * 2 * I, op, "dgate_up");
    expect_numel(dout, N * I, op, "dout");
    if (present(act)) {
      expect(act, DType::kBF16, op, "act");
      expect_numel(act, N * I, op, "act");
    }
    cuda::swiglu_backward(p<nv_bf16>(dgate_up), present(act) ? p<nv_bf16>(act) : nullptr, p<nv_bf16>(dout),
                          p<nv_bf16>(gate_up), N, I, stream_);
  }

  void add(Tensor out, Tensor a, Tensor b) override {
    const char* op = "add";
    const int64_t n = out.numel();
    const Timed timing = timed(op, [&] { return cat(dtype_name(out.dtype), " ", n); });
    expect(a, out.dtype, op, "a");
    expect(b, out.dtype, op, "b");
    expect_numel(a, n, op, "a");
    expect_numel(b, n, op, "b");
    if (out.dtype == DType::kBF16) {
      expect(out, DType::kBF16, op, "out");
      cuda::add_bf16(p<nv_bf16>(out), p<nv_bf16>(a), p<nv_bf16>(b), n, stream_);
    } else {
      expect(out, DType::kF32, op, "out");
      cuda::add_f32(p<float>(out), p<float>(a), p<float>(b), n, stream_);
    }
  }

  // ---- output projection + cross-entropy
  void cross_entropy_forward_backward(Tensor loss_sum, Tensor dh, Tensor dw, Tensor h, Tensor w, Tensor targets,
                                      float loss_scale, Tensor logits, bool accumulate_dw) override {
    const char* op = "cross_entropy_forward_backward";
    expect(loss_sum, DType::kF32, op, "loss_sum");
    const bool grads = present(dh);
    ANVIL_ENSURE(grads == present(dw), kInternal, op, ": dh and dw are given together or not at all");
    if (grads) {
      expect(dh, DType::kBF16, op, "dh");
      expect(dw, DType::kF32, op, "dw");
    }
    expect(h, DType::kBF16, op, "h");
    expect(w, DType::kBF16, op, "w");
    expect(targets, DType::kI32, op, "targets");
    const int64_t N = h.rows(), C = h.cols(), V = w.dim(0);
    ANVIL_ENSURE(w.cols() == C, kInternal, op, " shapes: h ", h.shape.str(), " w ", w.shape.str());
    const Timed timing = timed(grads ? op : "cross_entropy_forward", [&] { return cat(N, "x", V, "x", C); });
    expect_numel(loss_sum, 1, op, "loss_sum");
    if (grads) {
      expect_numel(dh, N * C, op, "dh");
      expect_numel(dw, V * C, op, "dw");
    }
    expect_numel(targets, N, op, "targets");
    if (present(logits)) {
      expect(logits, DType::kF32, op, "logits");
      expect_numel(logits, N * V, op, "logits");
    }
    cuda::CrossEntropyArgs a{p<float>(loss_sum), grads ? p<nv_bf16>(dh) : nullptr, grads ? p<float>(dw) : nullptr,
                             p<nv_bf16>(h),      p<nv_bf16>(w),       p<int32_t>(targets),
                             present(logits) ? p<float>(logits) : nullptr,
                             N,                  V,                   C,
                             loss_scale,         accumulate_dw};
    cuda::cross_entropy_forward_backward(a, scratch(static_cast<size_t>(cross_entropy_chunks(N, V).bytes)), gemm(op),
                                         stream_);
  }

  // ---- optimizer
  void adamw_step(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWHyper& h, float grad_scale, Tensor copy,
                  bool zero_grad) override {
    const char* op = "adamw_step";
    expect(param, DType::kF32, op, "param");
    const int64_t n = param.numel();
    const cuda::GradOut g = adamw_state(op, grad, m, v, n);
    const Timed timing = timed(op, [&] { return cat(n); });
    if (present(copy)) {
      expect(copy, DType::kBF16, op, "copy");
      expect_numel(copy, n, op, "copy");
    }
    cuda::adamw_step(p<float>(param), g.ptr, g.bf16, p<float>(m), p<float>(v),
                     present(copy) ? p<nv_bf16>(copy) : nullptr, zero_grad, n, adamw_args(h, grad_scale), stream_);
  }

  void adamw_step_split(Tensor hi, Tensor lo, Tensor grad, Tensor m, Tensor v, const AdamWHyper& h,
                        float grad_scale) override {
    const char* op = "adamw_step";
    expect(hi, DType::kBF16, op, "hi");
    expect(lo, DType::kI16, op, "lo");
    const int64_t n = hi.numel();
    expect_numel(lo, n, op, "lo");
    const cuda::GradOut g = adamw_state(op, grad, m, v, n);
    const Timed timing = timed(op, [&] { return cat("split ", n); });
    cuda::adamw_step_split(p<uint16_t>(hi), p<int16_t>(lo), g.ptr, g.bf16, p<float>(m), p<float>(v), n,
                           adamw_args(h, grad_scale), stream_);
  }

  // AdamW's gradient (F32 or BF16) and moments, checked against n elements.
  static cuda::GradOut adamw_state(const char* op, const Tensor& grad, const Tensor& m, const Tensor& v, int64_t n) {
    const cuda::GradOut g = grad_out(grad, false, op, "grad");
    expect(m, DType::kF32, op, "m");
    expect(v, DType::kF32, op, "v");
    expect_numel(grad, n, op, "grad");
    expect_numel(m, n, op, "m");
    expect_numel(v, n, op, "v");
    return g;
  }
  // Scalars as torch.optim.AdamW computes them (Python floats), then used in fp32.
  static cuda::AdamWArgs adamw_args(const AdamWHyper& h, float grad_scale) {
    const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step));
    const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step));
    return {h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, static_cast<float>(bc1), static_cast<float>(std::sqrt(bc2)),
            grad_scale};
  }

  void sum_squares(Tensor out, Tensor x) override {
    const char* op = "sum_squares";
    expect(out, DType::kF32, op, "out");
    const cuda::GradOut in = grad_out(x, false, op, "x");
    expect_numel(out, 1, op, "out");
    const Timed timing = timed(op, [&] { return cat(dtype_name(x.dtype), " ", x.numel()); });
    cuda::sum_squares(p<float>(out), in.ptr, in.bf16, x.numel(), scratch(cuda::sum_squares_scratch_bytes(x.numel())),
                      stream_);
  }

 private:
  // One op's timing, from timed() to the end of the op's scope; inert (index -1) when timing
  // is off, off the main queue, or inside another timed op.
  class Timed {
   public:
    Timed(CudaOps* ops, int index) : ops_(ops), index_(index) {}
    ~Timed() {
      if (index_ >= 0) ops_->end_timed(index_);
    }
    Timed(const Timed&) = delete;
    Timed& operator=(const Timed&) = delete;

   private:
    CudaOps* ops_;
    int index_;
  };
  struct TimedOp {
    int name;  // index into op_names_
    cudaEvent_t start, end;
    std::chrono::steady_clock::time_point host_start;
    double host_ms;
  };

  // label() gives the shape part of the name; it is called only while timing.
  template <class Label>
  Timed timed(const char* op, const Label& label) {
    if (!op_timing_ || stream_ != main_ || in_timed_op_) return Timed(this, -1);
    const std::string name = cat(op, " ", label());
    auto [it, fresh] = op_name_index_.emplace(name, static_cast<int>(op_names_.size()));
    if (fresh) op_names_.push_back(name);
    TimedOp t{it->second, timing_event(), timing_event(), std::chrono::steady_clock::now(), 0};
    CUDA_CHECK(cudaEventRecord(t.start, main_));
    timed_ops_.push_back(t);
    in_timed_op_ = true;
    return Timed(this, static_cast<int>(timed_ops_.size()) - 1);
  }
  // Runs in a destructor, also while an exception leaves the op: nothing here throws (a
  // failed record shows as an error of take_op_times()).
  void end_timed(int index) noexcept {
    TimedOp& t = timed_ops_[static_cast<size_t>(index)];
    cudaEventRecord(t.end, main_);
    t.host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t.host_start).count();
    in_timed_op_ = false;
  }
  cudaEvent_t timing_event() {
    if (free_events_.empty()) {
      cudaEvent_t e = nullptr;
      CUDA_CHECK(cudaEventCreate(&e));
      return e;
    }
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }

  // The shared scratch buffer, grown to `bytes` if smaller (cudaFree waits for the GPU).
  void* scratch(size_t bytes) {
    ANVIL_ENSURE(stream_ == main_, kInternal, "the shared scratch is used off the main queue");
    if (bytes > scratch_bytes_) {
      release(scratch_);
      scratch_ = nullptr;
      scratch_bytes_ = 0;
      scratch_ = alloc(bytes);
      scratch_bytes_ = bytes;
    }
    return scratch_;
  }

  // cuDNN's attention for this direction under ANVIL_ATTENTION, made on first use; nullptr
  // where the kernel runs (the reason cuDNN cannot be used is said once) or there is no work.
  cuda::CudnnAttention* cudnn_attention(const cuda::AttentionShape& s, bool backward) {
    using cuda::AttentionImpl;
    if (attention_impl_ == AttentionImpl::kKernel || (backward && attention_impl_ == AttentionImpl::kCudnnForward) ||
        s.batch * s.seq == 0)
      return nullptr;
    if (!cudnn_attention_ && !cudnn_unavailable_) {
      std::string why;
      cudnn_attention_ = cuda::CudnnAttention::create(
          main_, sm_, attention_impl_ != AttentionImpl::kCudnnNondeterministic, &why);
      cudnn_unavailable_ = !cudnn_attention_;
      if (cudnn_unavailable_) log_warn("attention: cuDNN is not available (", why, "); anvil's kernel runs it");
      else log_info("attention: cuDNN ", cuda::cudnn_version(), " fused attention (ANVIL_ATTENTION=",
                    cuda::attention_impl_name(attention_impl_), ")");
    }
    return cudnn_attention_.get();
  }

  // The GEMM plans and workspace belong to the main stream.
  cuda::Gemm& gemm(const char* op) {
    ANVIL_ENSURE(stream_ == main_, kInternal, op, ": GEMMs run on the main queue only");
    return *gemm_;
  }

  // Event slot `slot`, created on first use (timing off: only ordering).
  cudaEvent_t event(int slot) {
    ANVIL_ENSURE(slot >= 0, kInternal, "event slot ", slot);
    while (events_.size() <= static_cast<size_t>(slot)) {
      cudaEvent_t e = nullptr;
      CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      events_.push_back(e);
    }
    return events_[static_cast<size_t>(slot)];
  }

  cuda::QkRopeShape qk_shape(const char* op, const Tensor& in, const Tensor& cos, const Tensor& sin, int n_heads,
                             int n_kv_heads) {
    expect(in, DType::kBF16, op, "in");
    expect(cos, DType::kF32, op, "cos");
    expect(sin, DType::kF32, op, "sin");
    cuda::QkRopeShape s;
    s.head_dim = static_cast<int>(in.cols());
    s.n_heads = n_heads;
    s.n_kv_heads = n_kv_heads;
    const int64_t heads = n_heads + 2 * n_kv_heads;
    ANVIL_ENSURE(heads > 0 && in.numel() % (heads * s.head_dim) == 0, kInternal, op, ": in ", in.shape.str(),
                 " is not (rows, ", heads, ", head_dim)");
    s.rows = in.numel() / (heads * s.head_dim);
    s.seq = cos.dim(0);
    ANVIL_ENSURE(cos.cols() == s.head_dim / 2 && sin.numel() == cos.numel(), kInternal, op, ": cos ",
                 cos.shape.str(), " sin ", sin.shape.str(), " for head_dim ", s.head_dim);
    // The kernels read angle pairs as float2.
    ANVIL_ENSURE(reinterpret_cast<uintptr_t>(cos.data) % 8 == 0 && reinterpret_cast<uintptr_t>(sin.data) % 8 == 0,
                 kInternal, op, ": cos and sin must be 8-byte aligned");
    return s;
  }

  bool check_qk_weights(const char* op, const Tensor& q_w, const Tensor& k_w, int head_dim) {
    if (!present(q_w)) return false;
    expect(q_w, DType::kBF16, op, "q_w");
    expect(k_w, DType::kBF16, op, "k_w");
    expect_numel(q_w, head_dim, op, "q_w");
    expect_numel(k_w, head_dim, op, "k_w");
    return true;
  }

  cuda::AttentionShape attn_shape(const char* op, const Tensor& qkv, int n_heads, int n_kv_heads) {
    expect(qkv, DType::kBF16, op, "qkv");
    ANVIL_ENSURE(qkv.shape.ndim == 4 && qkv.dim(2) == n_heads + 2 * n_kv_heads, kInternal, op, ": qkv ",
                 qkv.shape.str(), " is not (B, T, ", n_heads + 2 * n_kv_heads, ", head_dim)");
    cuda::AttentionShape s;
    s.batch = qkv.dim(0);
    s.seq = qkv.dim(1);
    s.n_heads = n_heads;
    s.n_kv_heads = n_kv_heads;
    s.head_dim = static_cast<int>(qkv.dim(3));
    return s;
  }

  std::string name_;
  cudaStream_t main_ = nullptr, side_ = nullptr;
  cudaStream_t stream_ = nullptr;  // the current queue's
  std::vector<cudaEvent_t> events_;
  std::unique_ptr<cuda::Gemm> gemm_;
  int sm_ = 0;  // compute capability, major * 10 + minor
  cuda::AttentionImpl attention_impl_ = cuda::AttentionImpl::kCudnn;
  std::unique_ptr<cuda::CudnnAttention> cudnn_attention_;
  bool cudnn_unavailable_ = false;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  std::unordered_map<void*, size_t> sizes_;  // live allocations, for memory_stats()
  std::vector<cudaGraphExec_t> graphs_;      // recordings (inference decode steps)
  bool op_timing_ = false, in_timed_op_ = false;
  std::vector<std::string> op_names_;                   // timed ops' names, by first use
  std::unordered_map<std::string, int> op_name_index_;  // name -> index into op_names_
  std::vector<TimedOp> timed_ops_;                      // since the last take_op_times()
  std::vector<cudaEvent_t> free_events_;                // timing events, for reuse
  MemoryStats stats_;
};

}  // namespace

std::unique_ptr<Ops> make_cuda_ops(int device) { return std::make_unique<CudaOps>(device); }

bool cuda_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess && prop.major >= 8) return true;
  }
  return false;
}

}  // namespace anvil
