// The CUDA backend's runtime (ops/runtime.h): one device and non-blocking streams: the main
// one, a side one for the optimizer overlapped with the next forward (set_queue; record/wait
// order them with events), and a copy one for the activation offload's copies to and from
// pinned host memory (copy_to_host/copy_to_device/wait_copy, events of their own). Every op
// is enqueued on the current stream; none waits for the host except download(), upload() and
// synchronize(). Memory is cudaMalloc's, host memory page-locked; recordings are CUDA graphs;
// op timing is events on the main queue around each op, and the host's clock.
// (The file is not named cuda_runtime.h, which is the CUDA toolkit's.)
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/runtime.h"

namespace anvil {

class CudaRuntime final : public Runtime {
 public:
  explicit CudaRuntime(int device);
  ~CudaRuntime() override;
  CudaRuntime(const CudaRuntime&) = delete;
  CudaRuntime& operator=(const CudaRuntime&) = delete;

  Device device() const override { return Device::kCUDA; }
  std::string name() const override { return name_; }
  void synchronize() override;
  void* stream() override { return main_; }

  void set_queue(Queue q) override { stream_ = q == Queue::kMain ? main_ : side_; }
  void record(int slot) override;
  void wait(int slot) override;
  void wait_copy(int slot) override;

  void set_op_timing(bool on) override { op_timing_ = on; }
  OpTimes take_op_times() override;

  bool can_record() const override { return true; }
  void begin_recording() override;
  int end_recording() override;
  void replay(int recording) override;
  void drop_recordings() override;

  // For the op set (cuda_ops.h): the current queue's stream, the main one, and the compute
  // capability (major * 10 + minor).
  cudaStream_t current_stream() const { return stream_; }
  cudaStream_t main_stream() const { return main_; }
  bool on_main() const { return stream_ == main_; }
  int sm() const { return sm_; }

 protected:
  ANVIL_RUNTIME_IMPLS(, override)
  int64_t memory_capacity() const override;
  void* alloc_host_impl(size_t bytes) override;  // page-locked (cudaHostAlloc)
  void release_host_impl(void* p) override;
  void copy_to_host_impl(void* host_dst, Tensor src, int slot) override;
  void copy_to_device_impl(Tensor dst, const void* host_src, int slot) override;

  // Op timing (runtime.h): not off the main queue, nor for an op another op runs.
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
  // Event slot `slot`, created on first use (timing off: only ordering).
  cudaEvent_t event(int slot);
  // The copy queue: waits for the current queue's point now, then the copy (the caller
  // enqueues it), then marks copy event `slot`.
  void begin_copy();
  void end_copy(int slot);

  std::string name_;
  int sm_ = 0;  // compute capability, major * 10 + minor
  cudaStream_t main_ = nullptr, side_ = nullptr;
  cudaStream_t stream_ = nullptr;  // the current queue's
  std::vector<cudaEvent_t> events_;
  cudaStream_t copy_ = nullptr;         // the activation offload's copies
  cudaEvent_t copy_issue_ = nullptr;    // the current queue's point a copy starts after
  std::vector<cudaEvent_t> copy_done_;  // by copy slot
  std::vector<cudaGraphExec_t> graphs_;  // recordings (inference decode steps)
  bool op_timing_ = false, in_timed_op_ = false;
  std::vector<std::string> op_names_;                   // timed ops' names, by first use
  std::unordered_map<std::string, int> op_name_index_;  // name -> index into op_names_
  std::vector<TimedOp> timed_ops_;                      // since the last take_op_times()
  std::vector<cudaEvent_t> free_events_;                // timing events, for reuse
};

}  // namespace anvil
