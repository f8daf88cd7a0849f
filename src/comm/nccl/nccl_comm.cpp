// The NCCL comm: one communicator per process, on GPU LOCAL_RANK, with its own stream.
//
// Ordering without host waits: each collective first makes the comm stream wait for an
// event recorded on the compute stream (so it reads what compute wrote), then records a
// "done" event on the comm stream, kept with the collective's name, tag and step;
// wait(work) makes the compute stream wait for that event. Comm-stream events retire in
// order, so a work handle whose event is gone is complete.
// The stream has the lowest priority (below the compute stream, which is at the highest),
// or the highest with ANVIL_NCCL_HIGH_PRIORITY=1; the communicator's CTA limits come from
// NCCL's own NCCL_MAX_CTAS, NCCL_MIN_CTAS and NCCL_CGA_CLUSTER_SIZE (they override
// ncclConfig_t), so they need no flag of ours.
// Never hanging: the communicator is non-blocking (config.blocking = 0), so init and
// every call return at once; synchronize() polls the events and ncclCommGetAsyncError
// against the comm timeout, and on expiry aborts the communicator and throws kTimeout
// naming the oldest unfinished collective, the rank, the step and the tag. The main thread
// may instead be blocked in a CUDA call that waits for a hung collective (a download), so
// a watchdog thread checks the oldest unfinished collective every 100 ms: if this rank's
// own GPU work before it (its "ready" event) has not finished within the timeout, this rank
// is stuck; if it started here and has not finished within the timeout plus a grace
// period (so that a stuck rank, which knows it is, exits first and the launcher names it),
// another rank has not joined. Either way it says which and ends the process (exit 1), as
// PyTorch's NCCL watchdog does; checkpoints are atomic, so the last complete one is intact.
// synchronize() applies the same rule. ANVIL_FAULT=gpu_hang_at_step:N (core/fault.h) blocks
// the compute stream of the last rank before its first collective of step N. The NCCL unique
// id travels over the rendezvous (comm/bootstrap.h), so any launcher that sets RANK,
// WORLD_SIZE, MASTER_ADDR and MASTER_PORT works, across machines too.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "comm/comm.h"
#include "comm/device.h"
#include "core/cuda/check.h"
#include "core/cuda/nccl_check.h"
#include "core/env.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/log.h"

namespace anvil {

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kF64: return ncclFloat64;
    case DType::kI64: return ncclInt64;
    case DType::kI32: return ncclInt32;
    case DType::kU8:
    case DType::kBool: return ncclUint8;
    case DType::kI16: return ncclFloat16;  // the low halves of split masters: gathered, never reduced (comm.h)
  }
  raise(ErrorKind::kInternal, "NCCL has no type for ", dtype_name(t));
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclAvg; }

using Clock = std::chrono::steady_clock;

// A peer is declared missing this long after the timeout, so that a rank that knows it is
// stuck (its own GPU work did not finish) exits first.
constexpr double kPeerGraceS = 5;

// ANVIL_FAULT gpu_hang_at_step: the stream stops here until the process ends.
void CUDART_CB hang_forever(void*) {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

class NcclComm final : public Comm {
 public:
  explicit NcclComm(const CommOptions& o)
      : Comm(std::make_unique<Bootstrap>(
            BootstrapOptions{o.rank, o.world, o.master_addr, o.master_port, o.timeout_s})),
        device_(o.local_rank) {
    const int gpus = gpu_count();
    ANVIL_ENSURE(gpus > 0, kNoDevice, "NCCL comm on rank ", rank(), ": no GPU is visible (no driver or no GPU)");
    ANVIL_ENSURE(device_ >= 0 && device_ < gpus, kNoDevice, "NCCL comm on rank ", rank(), ": LOCAL_RANK ", device_,
                 " has no GPU (", gpus, " visible); start at most one rank per GPU");
    CUDA_CHECK(cudaSetDevice(device_));
    int least = 0, greatest = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, env_nccl_high_priority() ? greatest : least));
    ncclUniqueId id{};
    if (rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    const std::string blob = bootstrap_->broadcast_from_root(
        std::string(reinterpret_cast<const char*>(&id), sizeof id), "NCCL unique id");
    ANVIL_ENSURE(blob.size() == sizeof id, kComm, "NCCL comm on rank ", rank(), ": the unique id from rank 0 has ",
                 blob.size(), " bytes, expected ", sizeof id, " (different NCCL versions?)");
    std::memcpy(&id, blob.data(), sizeof id);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check(ncclCommInitRankConfig(&comm_, world(), id, rank(), &config), "ncclCommInitRankConfig", "");
    wait_ready("NCCL init", "", Clock::now());
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclComm() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    bool idle = true;
    for (const Pending& p : pending_) idle &= cudaEventQuery(p.done) == cudaSuccess;
    // A communicator with work in flight (a peer died, an error unwound the caller) is
    // aborted: ncclCommDestroy would wait for that work forever.
    if (comm_ != nullptr && idle) ncclCommDestroy(comm_);
    else if (comm_ != nullptr) ncclCommAbort(comm_);
    for (const Pending& p : pending_) {
      cudaEventDestroy(p.ready);
      cudaEventDestroy(p.done);
    }
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::kCUDA; }
  int gpu() const override { return device_; }
  std::string backend() const override { return "nccl"; }

  CommWork all_reduce(Tensor out, Tensor in, ReduceOp op, std::string_view tag) override {
    check_reduce("all_reduce", out, in, 1);
    return enqueue("all_reduce", tag, [&] {
      return ncclAllReduce(in.data, out.data, static_cast<size_t>(in.numel()), nccl_type(in.dtype), nccl_op(op), comm_,
                           stream_);
    });
  }

  CommWork reduce_scatter(Tensor out, Tensor in, ReduceOp op, std::string_view tag) override {
    check_reduce("reduce_scatter", out, in, world());
    return enqueue("reduce_scatter", tag, [&] {
      return ncclReduceScatter(in.data, out.data, static_cast<size_t>(out.numel()), nccl_type(in.dtype), nccl_op(op),
                               comm_, stream_);
    });
  }

  CommWork all_gather(Tensor out, Tensor in, std::string_view tag) override {
    check_gather("all_gather", out, in, world());
    return enqueue("all_gather", tag, [&] {
      return ncclAllGather(in.data, out.data, static_cast<size_t>(in.numel()), nccl_type(in.dtype), comm_, stream_);
    });
  }

  // Grouped sends and receives, one pair per peer (NCCL has no all-to-all call of its own).
  CommWork all_to_all(Tensor out, Tensor in, std::string_view tag) override {
    check_all_to_all(out, in);
    const size_t count = static_cast<size_t>(in.numel() / world()), bytes = count * dtype_size(in.dtype);
    return enqueue("all_to_all", tag, [&] {
      char* dst = static_cast<char*>(out.data);
      const char* src = static_cast<const char*>(in.data);
      check(ncclGroupStart(), "ncclGroupStart", tag);
      for (int p = 0; p < world(); ++p) {
        check(ncclSend(src + static_cast<size_t>(p) * bytes, count, nccl_type(in.dtype), p, comm_, stream_),
              "ncclSend", tag);
        check(ncclRecv(dst + static_cast<size_t>(p) * bytes, count, nccl_type(in.dtype), p, comm_, stream_),
              "ncclRecv", tag);
      }
      return ncclGroupEnd();
    });
  }

  CommWork broadcast(Tensor buf, int root, std::string_view tag) override {
    check_device("broadcast", buf);
    ANVIL_ENSURE(root >= 0 && root < world(), kInternal, where("broadcast", tag), ": root ", root, " is not a rank");
    return enqueue("broadcast", tag, [&] {
      return ncclBroadcast(buf.data, buf.data, static_cast<size_t>(buf.numel()), nccl_type(buf.dtype), root, comm_,
                           stream_);
    });
  }

  // Host-side: every rank has reached it (the GPU work it issued may still run).
  void barrier(std::string_view tag) override { bootstrap_->all_gather(std::string(), where("barrier", tag)); }

  void set_compute_stream(void* stream) override { compute_ = static_cast<cudaStream_t>(stream); }

  void wait(CommWork work) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Pending& p : pending_)
      if (p.seq >= work.seq) {
        CUDA_CHECK(cudaStreamWaitEvent(compute_, p.done, 0));
        return;
      }
    // Retired: complete.
  }

  void synchronize() override {
    for (;;) {
      check_async("synchronize", "");
      std::unique_lock<std::mutex> lock(mutex_);
      retire();
      if (pending_.empty()) return;
      const std::string why = expired(pending_.front(), Clock::now());
      if (!why.empty()) {
        lock.unlock();
        abort();
        raise(ErrorKind::kTimeout, why, "; the NCCL communicator was aborted");
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  struct Pending {
    uint64_t seq;
    cudaEvent_t ready, done;  // recorded on the compute stream before it, on the comm stream after it
    const char* op;
    std::string tag;
    int64_t step;
    Clock::time_point issued, started;  // started: when its ready event was first seen complete
  };

  std::string where_at(const char* op, const std::string& tag, int64_t step) const { return where(op, tag, step); }

  // Why the collective p has hung, by the rule at the top of this file; empty while it has
  // not. With mutex_ held.
  std::string expired(Pending& p, Clock::time_point now) {
    const auto limit = std::chrono::duration<double>(timeout_s());
    if (cudaEventQuery(p.ready) == cudaErrorNotReady) {
      if (now - p.issued <= limit) return {};
      return cat(where_at(p.op, p.tag, p.step), ": this rank's GPU did not reach it within ", timeout_s(),
                 " s (ANVIL_COMM_TIMEOUT_S): the work queued before it has not finished, so this rank is stuck");
    }
    if (p.started == Clock::time_point{}) p.started = now;
    if (now - p.started <= limit + std::chrono::duration<double>(kPeerGraceS)) return {};
    return cat(where_at(p.op, p.tag, p.step), ": it started on this rank but did not finish within ",
               timeout_s() + kPeerGraceS, " s (ANVIL_COMM_TIMEOUT_S plus ", kPeerGraceS,
               "): another rank has not joined it (stuck, slow, dead, or calling a different collective)");
  }

  // The watchdog (top of this file): the oldest unfinished collective, every 100 ms.
  void watch() {
    (void)cudaSetDevice(device_);  // this thread's device as the constructor's (which checked the call)
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stopping_; })) {
      for (Pending& p : pending_) {
        if (cudaEventQuery(p.done) != cudaErrorNotReady) continue;
        const std::string why = expired(p, Clock::now());
        if (!why.empty()) hung(why);
        break;
      }
    }
  }

  // Ends the process at once: the main thread may be blocked in a CUDA call that will not
  // return, and an abort of the communicator may wait too; the driver frees the GPU.
  [[noreturn]] void hung(const std::string& message) {
    log_error("error: ", message, "; the process ends");
    std::_Exit(1);
  }

  void check(ncclResult_t r, const char* call, std::string_view tag) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    raise(ErrorKind::kComm, where(call, tag), ": ", ncclGetErrorString(r),
          comm_ ? cat(" (", ncclGetLastError(comm_), ")") : std::string());
  }

  void check_async(const char* op, std::string_view tag) {
    ncclResult_t state = ncclSuccess;
    check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", tag);
    if (state != ncclSuccess && state != ncclInProgress) {
      const std::string msg = cat(where(op, tag), ": NCCL reports ", ncclGetErrorString(state), " (",
                                  ncclGetLastError(comm_), ")");
      abort();
      raise(ErrorKind::kComm, msg);
    }
  }

  // A non-blocking communicator may still be completing the last call: wait until it is not.
  void wait_ready(const char* op, std::string_view tag, Clock::time_point start) {
    for (;;) {
      ncclResult_t state = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", tag);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) check(state, op, tag);
      if (Clock::now() - start > std::chrono::duration<double>(timeout_s())) {
        abort();
        raise(ErrorKind::kTimeout, where(op, tag), ": did not finish within ", timeout_s(),
              " s (ANVIL_COMM_TIMEOUT_S); the NCCL communicator was aborted");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  template <class F>
  CommWork enqueue(const char* op, std::string_view tag, F call) {
    ANVIL_ENSURE(comm_ != nullptr, kComm, where(op, tag), ": the NCCL communicator was aborted by an earlier error");
    CUDA_CHECK(cudaSetDevice(device_));
    if (!gpu_hang_ && fault_armed(Fault::kGpuHangAtStep, step_, rank(), world())) {
      gpu_hang_ = true;
      log_error("fault gpu_hang_at_step (ANVIL_FAULT): the GPU of rank ", rank(), " stops before ", op, " of step ",
                step_);
      CUDA_CHECK(cudaLaunchHostFunc(compute_, hang_forever, nullptr));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    const cudaEvent_t ready = take_event(), done = take_event();
    const auto issued = Clock::now();
    CUDA_CHECK(cudaEventRecord(ready, compute_));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    check(call(), op, tag);
    wait_ready(op, tag, Clock::now());
    CUDA_CHECK(cudaEventRecord(done, stream_));
    pending_.push_back(Pending{++seq_, ready, done, op, std::string(tag), step_, issued, {}});
    retire();
    return CommWork{seq_};
  }

  cudaEvent_t take_event() {
    cudaEvent_t e = nullptr;
    if (free_events_.empty()) {
      CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      return e;
    }
    e = free_events_.back();
    free_events_.pop_back();
    return e;
  }

  // Drops finished collectives from the front (the comm stream finishes them in order).
  // With mutex_ held.
  void retire() {
    while (!pending_.empty()) {
      const cudaError_t e = cudaEventQuery(pending_.front().done);
      if (e == cudaErrorNotReady) return;
      CUDA_CHECK(e);
      free_events_.push_back(pending_.front().ready);
      free_events_.push_back(pending_.front().done);
      pending_.pop_front();
    }
  }

  void abort() {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaStream_t compute_ = nullptr;  // the legacy default stream until set_compute_stream
  std::mutex mutex_;                // pending_ and free_events_, shared with the watchdog
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread watchdog_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  uint64_t seq_ = 0;
  bool gpu_hang_ = false;  // ANVIL_FAULT gpu_hang_at_step done
};

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(const CommOptions& options) { return std::make_unique<NcclComm>(options); }

}  // namespace anvil
