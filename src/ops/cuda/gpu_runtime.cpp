// The CUDA backend's runtime (gpu_runtime.h): the device, the streams and their events,
// memory, CUDA graphs (recording and replay), and op timing; cuda_available.
#include "ops/cuda/gpu_runtime.h"

#include "core/cuda/check.h"
#include "core/error.h"

namespace anvil {

CudaRuntime::CudaRuntime(int device) {
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
  // The main queue's kernels (the GEMMs of the forward) go first where the side queue's
  // (the optimizer of the last step, memory-bound) compete for the multiprocessors.
  int lowest = 0, highest = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
  CUDA_CHECK(cudaStreamCreateWithPriority(&main_, cudaStreamNonBlocking, highest));
  CUDA_CHECK(cudaStreamCreateWithPriority(&side_, cudaStreamNonBlocking, lowest));
  CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&copy_issue_, cudaEventDisableTiming));
  stream_ = main_;
}

CudaRuntime::~CudaRuntime() {
  cudaStreamSynchronize(copy_);
  cudaStreamSynchronize(side_);
  cudaStreamSynchronize(main_);
  for (cudaGraphExec_t g : graphs_) cudaGraphExecDestroy(g);
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  for (cudaEvent_t e : copy_done_) cudaEventDestroy(e);
  cudaEventDestroy(copy_issue_);
  cudaStreamDestroy(copy_);
  for (const TimedOp& t : timed_ops_) free_events_.insert(free_events_.end(), {t.start, t.end});
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  cudaStreamDestroy(side_);
  cudaStreamDestroy(main_);
}

// ---- memory
void* CudaRuntime::alloc_impl(size_t bytes) {
  void* ptr = nullptr;
  const cudaError_t st = cudaMalloc(&ptr, bytes ? bytes : 1);
  if (st == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    raise(ErrorKind::kOutOfMemory, "GPU allocation of ", bytes, " bytes failed on ", name_, " (", free_b, " of ",
          total_b, " bytes free)");
  }
  CUDA_CHECK(st);
  return ptr;
}

void CudaRuntime::release_impl(void* ptr) { CUDA_CHECK(cudaFree(ptr)); }

int64_t CudaRuntime::memory_capacity() const {
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return static_cast<int64_t>(total_b);
}

void* CudaRuntime::alloc_host_impl(size_t bytes) {
  void* ptr = nullptr;
  const cudaError_t st = cudaHostAlloc(&ptr, bytes ? bytes : 1, cudaHostAllocDefault);
  if (st == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    raise(ErrorKind::kOutOfMemory, "page-locked host allocation of ", bytes, " bytes failed for ", name_,
          " (the host's memory, or its limit on locked memory: ulimit -l)");
  }
  CUDA_CHECK(st);
  return ptr;
}

void CudaRuntime::release_host_impl(void* ptr) { CUDA_CHECK(cudaFreeHost(ptr)); }

void CudaRuntime::upload_impl(Tensor dst, const void* host_src) {
  if (dst.bytes() == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst.data, host_src, dst.bytes(), cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host buffer may be reused on return
}

void CudaRuntime::download_impl(void* host_dst, Tensor src) {
  if (src.bytes() == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src.data, src.bytes(), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaRuntime::begin_copy() {
  CUDA_CHECK(cudaEventRecord(copy_issue_, stream_));
  CUDA_CHECK(cudaStreamWaitEvent(copy_, copy_issue_, 0));
}

void CudaRuntime::end_copy(int slot) {
  while (copy_done_.size() <= static_cast<size_t>(slot)) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    copy_done_.push_back(e);
  }
  CUDA_CHECK(cudaEventRecord(copy_done_[static_cast<size_t>(slot)], copy_));
}

void CudaRuntime::copy_to_host_impl(void* host_dst, Tensor src, int slot) {
  begin_copy();
  if (src.bytes()) CUDA_CHECK(cudaMemcpyAsync(host_dst, src.data, src.bytes(), cudaMemcpyDeviceToHost, copy_));
  end_copy(slot);
}

void CudaRuntime::copy_to_device_impl(Tensor dst, const void* host_src, int slot) {
  begin_copy();
  if (dst.bytes()) CUDA_CHECK(cudaMemcpyAsync(dst.data, host_src, dst.bytes(), cudaMemcpyHostToDevice, copy_));
  end_copy(slot);
}

void CudaRuntime::wait_copy(int slot) {
  if (static_cast<size_t>(slot) < copy_done_.size())
    CUDA_CHECK(cudaStreamWaitEvent(stream_, copy_done_[static_cast<size_t>(slot)], 0));
}

void CudaRuntime::zero_impl(Tensor t) {
  if (t.bytes()) CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), stream_));
}

void CudaRuntime::synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(copy_));
  CUDA_CHECK(cudaStreamSynchronize(side_));
  CUDA_CHECK(cudaStreamSynchronize(main_));
}

// ---- queues
cudaEvent_t CudaRuntime::event(int slot) {
  ANVIL_ENSURE(slot >= 0, kInternal, "event slot ", slot);
  while (events_.size() <= static_cast<size_t>(slot)) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    events_.push_back(e);
  }
  return events_[static_cast<size_t>(slot)];
}

void CudaRuntime::record(int slot) { CUDA_CHECK(cudaEventRecord(event(slot), stream_)); }
void CudaRuntime::wait(int slot) { CUDA_CHECK(cudaStreamWaitEvent(stream_, event(slot), 0)); }

// ---- op timing (runtime.h)
void CudaRuntime::begin_op(const std::string& name) {
  auto [it, fresh] = op_name_index_.emplace(name, static_cast<int>(op_names_.size()));
  if (fresh) op_names_.push_back(name);
  TimedOp t{it->second, timing_event(), timing_event(), std::chrono::steady_clock::now(), 0};
  CUDA_CHECK(cudaEventRecord(t.start, main_));
  timed_ops_.push_back(t);
  in_timed_op_ = true;
}

// Runs in a destructor, also while an exception leaves the op: nothing here throws (a
// failed record shows as an error of take_op_times()).
void CudaRuntime::end_op() noexcept {
  TimedOp& t = timed_ops_.back();
  cudaEventRecord(t.end, main_);
  t.host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t.host_start).count();
  in_timed_op_ = false;
}

cudaEvent_t CudaRuntime::timing_event() {
  if (free_events_.empty()) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));
    return e;
  }
  cudaEvent_t e = free_events_.back();
  free_events_.pop_back();
  return e;
}

Runtime::OpTimes CudaRuntime::take_op_times() {
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

// ---- CUDA graphs: the stream's work between begin and end, instantiated for replay
void CudaRuntime::begin_recording() { CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal)); }

int CudaRuntime::end_recording() {
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t st = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(st);
  graphs_.push_back(exec);
  return static_cast<int>(graphs_.size()) - 1;
}

void CudaRuntime::replay(int recording) {
  ANVIL_ENSURE(recording >= 0 && recording < static_cast<int>(graphs_.size()), kInternal, "replay of recording ",
               recording, " of ", graphs_.size());
  CUDA_CHECK(cudaGraphLaunch(graphs_[static_cast<size_t>(recording)], stream_));
}

void CudaRuntime::drop_recordings() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (cudaGraphExec_t g : graphs_) CUDA_CHECK(cudaGraphExecDestroy(g));
  graphs_.clear();
}

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
