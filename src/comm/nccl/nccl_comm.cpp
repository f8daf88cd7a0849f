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
// naming the oldest unfinished collective, the rank, the step and the tag. The NCCL unique
// id travels over the rendezvous (comm/bootstrap.h), so any launcher that sets RANK,
// WORLD_SIZE, MASTER_ADDR and MASTER_PORT works, across machines too.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <thread>

#include "comm/comm.h"
#include "comm/device.h"
#include "core/cuda/check.h"
#include "core/cuda/nccl_check.h"
#include "core/env.h"
#include "core/error.h"

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
    CUDA_CHECK(cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming));
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
  }

  ~NcclComm() override {
    bool idle = true;
    for (const Pending& p : pending_) idle &= cudaEventQuery(p.done) == cudaSuccess;
    // A communicator with work in flight (a peer died, an error unwound the caller) is
    // aborted: ncclCommDestroy would wait for that work forever.
    if (comm_ != nullptr && idle) ncclCommDestroy(comm_);
    else if (comm_ != nullptr) ncclCommAbort(comm_);
    for (const Pending& p : pending_) cudaEventDestroy(p.done);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    cudaEventDestroy(inputs_ready_);
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
    for (const Pending& p : pending_)
      if (p.seq >= work.seq) {
        CUDA_CHECK(cudaStreamWaitEvent(compute_, p.done, 0));
        return;
      }
    // Retired: complete.
  }

  void synchronize() override {
    const auto start = Clock::now();
    for (;;) {
      check_async("synchronize", "");
      retire();
      if (pending_.empty()) return;
      if (Clock::now() - start > std::chrono::duration<double>(timeout_s())) {
        const Pending p = pending_.front();
        abort();
        raise(ErrorKind::kTimeout, where_at(p.op, p.tag, p.step), ": did not finish within ", timeout_s(),
              " s (ANVIL_COMM_TIMEOUT_S); a rank is stuck, slow, dead or calling a different collective. The NCCL "
              "communicator was aborted");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  struct Pending {
    uint64_t seq;
    cudaEvent_t done;
    const char* op;
    std::string tag;
    int64_t step;
  };

  std::string where_at(const char* op, const std::string& tag, int64_t step) {
    const int64_t now = step_;
    step_ = step;
    std::string w = where(op, tag);
    step_ = now;
    return w;
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
    CUDA_CHECK(cudaEventRecord(inputs_ready_, compute_));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, inputs_ready_, 0));
    check(call(), op, tag);
    wait_ready(op, tag, Clock::now());
    cudaEvent_t done = nullptr;
    if (!free_events_.empty()) {
      done = free_events_.back();
      free_events_.pop_back();
    } else {
      CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaEventRecord(done, stream_));
    pending_.push_back(Pending{++seq_, done, op, std::string(tag), step_});
    retire();
    return CommWork{seq_};
  }

  // Drops finished collectives from the front (the comm stream finishes them in order).
  void retire() {
    while (!pending_.empty()) {
      const cudaError_t e = cudaEventQuery(pending_.front().done);
      if (e == cudaErrorNotReady) return;
      CUDA_CHECK(e);
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
  cudaEvent_t inputs_ready_ = nullptr;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  uint64_t seq_ = 0;
};

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(const CommOptions& options) { return std::make_unique<NcclComm>(options); }

}  // namespace anvil
