// The runtime of a backend: what the op set (ops/ops.h) runs on, and what its callers use
// besides the math: device memory and host memory, copies between them, zeroing and dtype
// conversion, the queues and their events, the activation offload's copies, recorded op
// sequences (CUDA graphs), per-op timing, and synchronisation.
//
// Each backend gives one (ops/cpu/cpu_runtime.h, ops/cuda/gpu_runtime.h), owned by its op set
// (Ops::runtime()). The public methods are the front, one for every backend (runtime.cpp):
// each checks its tensors as the op front does (op_checks.h) and calls the backend's
// protected *_impl. zero, convert and copy_rows are timed like ops (set_op_timing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace anvil {

// The memory and copy implementations (*_impl) every backend gives, declared once for the base
// class, ANVIL_RUNTIME_IMPLS(virtual, = 0), and for each backend's, ANVIL_RUNTIME_IMPLS(, override).
#define ANVIL_RUNTIME_IMPLS(VIRTUAL, TAIL)                                                            \
  VIRTUAL void* alloc_impl(size_t bytes) TAIL;                                                        \
  VIRTUAL void release_impl(void* p) TAIL;                                                            \
  VIRTUAL void upload_impl(Tensor dst, const void* host_src) TAIL;                                    \
  VIRTUAL void download_impl(void* host_dst, Tensor src) TAIL;                                        \
  VIRTUAL void zero_impl(Tensor t) TAIL;                                                              \
  VIRTUAL void convert_impl(Tensor dst, Tensor src) TAIL;                                             \
  VIRTUAL void copy_rows_impl(Tensor out, int64_t out_pitch, Tensor in, int64_t in_pitch, int64_t rows, \
                              int64_t width) TAIL;

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;

  // ---- memory
  struct MemoryStats {
    int64_t allocated = 0;  // bytes live now, through alloc()
    int64_t peak = 0;       // the most live at once since construction
    int64_t capacity = 0;   // the device's memory (0 on the CPU: the host's is not planned)
  };
  void* alloc(size_t bytes);
  void release(void* p);
  MemoryStats memory_stats() const;
  // Host memory that copies to and from the device run at the link's full speed from:
  // page-locked on CUDA, page-aligned on the CPU; not in memory_stats (the device's). For the
  // snapshot of an asynchronous save (train/checkpoint_async.h).
  void* alloc_host(size_t bytes) { return alloc_host_impl(bytes); }
  void release_host(void* p) { if (p) release_host_impl(p); }
  void upload(Tensor dst, const void* host_src);  // host -> dst, same dtype
  void download(void* host_dst, Tensor src);      // src -> host, same dtype
  void zero(Tensor t);
  void convert(Tensor dst, Tensor src);  // elementwise dtype conversion (F32 <-> BF16, or a copy)
  // Strided rows (the layout changes around context parallelism's all-to-all,
  // model/context_parallel.h): `rows` rows of `width` elements, row r from element
  // r * in_pitch of in to element r * out_pitch of out (same dtype; they must not overlap).
  void copy_rows(Tensor out, int64_t out_pitch, Tensor in, int64_t in_pitch, int64_t rows, int64_t width);
  virtual void synchronize() = 0;  // the host waits for every op issued, on either queue
  // The main stream (a cudaStream_t), for ordering collectives; nullptr on the CPU.
  virtual void* stream() { return nullptr; }

  // ---- side queue, for work that overlaps the main one: kSide (the optimizer beside the
  // next forward). Ops are issued to the current queue (main unless set). record(slot) marks
  // the point the current queue has reached; wait(slot) holds the current queue until the
  // slot's last mark is passed (at once if it was never recorded). Ops that use the shared
  // scratch or the GEMM workspace are refused off the main queue. On the CPU an op is done
  // when it returns, so these are no-ops.
  enum class Queue { kMain, kSide };
  virtual void set_queue(Queue q) { (void)q; }
  virtual void record(int slot) { (void)slot; }
  virtual void wait(int slot) { (void)slot; }

  // ---- activation offload (model/offload.h, --offload-activations): copies between device
  // buffers and host memory from alloc_host, on a copy queue of their own that overlaps the
  // main queue's compute, with events of their own (slots apart from record/wait's).
  // copy_to_host / copy_to_device start the copy once the main queue has reached this point
  // (the source's producer, or the destination's last reader, is done) and mark `slot` when
  // the copy is done; wait_copy(slot) holds the main queue until then (at once if never
  // marked). The CPU copies at once (memcpy), so there the waits are no-ops.
  void copy_to_host(void* host_dst, Tensor src, int slot);
  void copy_to_device(Tensor dst, const void* host_src, int slot);
  virtual void wait_copy(int slot) { (void)slot; }

  // ---- recorded op sequences (CUDA graphs), for the decode step. Between begin_recording()
  // and end_recording() the ops are recorded, not run; replay(id) runs them again on the
  // same tensors (their contents may change in between). A backend that cannot record says
  // so with can_record() == false, and the caller runs the ops directly.
  virtual bool can_record() const { return false; }
  virtual void begin_recording() {}
  virtual int end_recording() { return -1; }  // the recording's id
  virtual void replay(int recording) { (void)recording; }
  virtual void drop_recordings() {}

  // ---- per-op timing (anvil bench step --op-times). While on, each op issued to the main
  // queue is timed on the device, between events recorded before and after it (so time the
  // queue spends waiting for the host to launch the op counts as the op's), and on the host
  // (checks and launches). take_op_times() waits for the device and returns the totals since
  // the last call, by op and shape, in order of first use, and the span from the first op's
  // start to the last op's end: span minus the ops' sum is time between ops, where the queue
  // ran dry or waited for another queue. A backend that cannot time returns nothing.
  struct OpTime {
    std::string op;  // the op and its shape, e.g. "linear_forward 2048x4096x2048" (M x N x K)
    int64_t calls = 0;
    double device_ms = 0, host_ms = 0;
  };
  struct OpTimes {
    std::vector<OpTime> ops;
    double span_ms = 0;
  };
  virtual void set_op_timing(bool on) { (void)on; }
  virtual OpTimes take_op_times() { return {}; }

  // Times one op where the backend asks for it (op_timed), from after the op's checks to the
  // end of its call: label() gives the shape part of the name and is called only then. The
  // fronts of the runtime and of the op set bracket each timed call with one.
  class OpScope {
   public:
    template <class Label>
    OpScope(Runtime& rt, const char* op, const Label& label) : rt_(rt), timed_(rt.op_timed()) {
      if (timed_) rt_.begin_op(cat(op, " ", label()));
    }
    ~OpScope() {
      if (timed_) rt_.end_op();
    }
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;

   private:
    Runtime& rt_;
    bool timed_;
  };

 protected:
  // ---- the backend: memory and copies, after the front's checks
  ANVIL_RUNTIME_IMPLS(virtual, = 0)
  virtual int64_t memory_capacity() const { return 0; }  // MemoryStats::capacity
  virtual void* alloc_host_impl(size_t bytes);  // throws kOutOfMemory naming the bytes
  virtual void release_host_impl(void* p);
  // The activation offload's copies (default: download and upload, which wait for them).
  virtual void copy_to_host_impl(void* host_dst, Tensor src, int slot);
  virtual void copy_to_device_impl(Tensor dst, const void* host_src, int slot);

  // ---- the backend: op timing. OpScope asks op_timed() before each op; when true it calls
  // begin_op with the op's name and shape, and end_op when the op's call ends (also when it
  // throws, so end_op must not).
  virtual bool op_timed() const { return false; }
  virtual void begin_op(const std::string& name) { (void)name; }
  virtual void end_op() noexcept {}

 private:
  std::unordered_map<void*, size_t> sizes_;  // live allocations, for memory_stats()
  MemoryStats stats_;
};

}  // namespace anvil
