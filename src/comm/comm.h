// Comm: the collectives of one process group, one rank per process (or per thread in
// tests), whatever carries them (NCCL on GPUs, TCP on the CPU).
//
// Why this shape: gradient sync is one collective per parameter unit (DDP: all_reduce of
// the unit's fp32 gradients, averaged; FSDP: reduce_scatter of them into the local shard,
// all_gather of the bf16 weights), so the interface is the five collectives over dense
// Tensor views (and all_to_all, for context parallelism's attention: train/config.h's
// --context-parallel), plus what the training loop needs around them:
//  - Ordering. Each collective returns a CommWork. On the GPU the collective runs on the
//    comm's own stream, after the work queued so far on the compute stream (an event, not
//    a host wait); wait(work) makes the compute stream wait for it, still without a host
//    wait, and synchronize() is the host wait, bounded by the timeout. On the CPU a
//    collective is complete when it returns; wait() and synchronize() cost nothing.
//  - Errors. A collective that does not finish within timeout_s (ANVIL_COMM_TIMEOUT_S)
//    throws kTimeout naming the collective, the rank, the step (set_step) and the caller's
//    tag (say, the unit's name); a peer that died throws kComm naming that peer.
//  - Determinism. Reductions add the ranks' contributions in rank order (CPU), so the same
//    inputs give the same bits on every run and on every rank.
//  - Host exchanges (host_all_gather) for small values such as global token counts and
//    bench timings, through the rendezvous connection.
// Invariants: every rank calls the same collectives in the same order with the same sizes
// (the CPU comm detects a mismatch and says so); reduce ops take F32 or BF16, all_gather,
// all_to_all and broadcast any dtype; out and in may be the same memory where noted.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/bootstrap.h"
#include "core/tensor.h"

namespace anvil {

enum class ReduceOp { kSum, kAvg };
const char* reduce_op_name(ReduceOp op);

// Handle of one issued collective, for Comm::wait(). Cheap to copy; never dangles.
struct CommWork {
  uint64_t seq = 0;
};

struct CommOptions {
  bool joined = false;  // this process is one rank of a group started by a launcher
  int rank = 0;
  int world = 1;
  int local_rank = 0;  // the GPU of this rank on its machine (NCCL)
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  double timeout_s = 600;
};

// From RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT and ANVIL_COMM_TIMEOUT_S (as
// torchrun and anvil's launcher set them). Without RANK, from Slurm's task variables (a
// step started by srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the first host of
// SLURM_JOB_NODELIST as the master (unless MASTER_ADDR is set), MASTER_PORT or else a port
// derived from SLURM_JOB_ID. With neither, a world of one (joined = false).
CommOptions comm_options_from_env();
// The first host of a Slurm node list: "node[01-04,07],gpu1" -> "node01".
std::string slurm_first_host(const std::string& nodelist);

class Comm {
 public:
  virtual ~Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // A group comm (group(), below): this rank's place among the group's ranks, and their number.
  int rank() const { return members_.empty() ? bootstrap_->rank() : group_rank_; }
  int world() const { return members_.empty() ? bootstrap_->world() : static_cast<int>(members_.size()); }
  double timeout_s() const { return bootstrap_->timeout_s(); }
  virtual Device device() const = 0;
  virtual int gpu() const = 0;               // the CUDA device of the buffers; -1 on the CPU
  virtual std::string backend() const = 0;  // "cpu" or "nccl"

  // The step named in error messages (the training loop sets it once per step).
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }

  // out = reduce over ranks of in (same numel; out may be in: in place).
  virtual CommWork all_reduce(Tensor out, Tensor in, ReduceOp op, std::string_view tag = {}) = 0;
  CommWork all_reduce(Tensor buf, ReduceOp op, std::string_view tag = {}) { return all_reduce(buf, buf, op, tag); }
  // in: world * n elements; out (n): rank r gets the reduction of slice r of every rank's
  // in. out may be slice `rank()` of in.
  virtual CommWork reduce_scatter(Tensor out, Tensor in, ReduceOp op, std::string_view tag = {}) = 0;
  // in: n elements; out: world * n, slice r from rank r. in may be slice `rank()` of out.
  virtual CommWork all_gather(Tensor out, Tensor in, std::string_view tag = {}) = 0;
  // in and out: world * n elements each; chunk r of in goes to rank r, and chunk r of out
  // comes from rank r (slice `rank()` is copied). out and in must not overlap.
  virtual CommWork all_to_all(Tensor out, Tensor in, std::string_view tag = {}) = 0;
  // buf on every rank becomes root's buf.
  virtual CommWork broadcast(Tensor buf, int root, std::string_view tag = {}) = 0;
  // Returns when every rank has reached it (host-side, bounded by the timeout).
  virtual void barrier(std::string_view tag = {}) = 0;

  // GPU ordering (see the top of this file); `stream` is a cudaStream_t (nullptr: the
  // default stream). No-ops on the CPU.
  virtual void set_compute_stream(void* stream) = 0;
  virtual void wait(CommWork work) = 0;
  virtual void synchronize() = 0;

  // A comm over `members` (ranks of this comm, ascending, this rank among them; every member
  // calls it, in the same order): the collectives above among those ranks only, ranked by
  // their place in `members`, in order with this comm's (expert parallelism's groups,
  // model/expert_parallel.h). Host exchanges are the whole run's: call them on its comm.
  // kUnsupported where the backend has no groups (NCCL, today).
  virtual std::unique_ptr<Comm> group(const std::vector<int>& members);

  // Every rank's `bytes` bytes, in rank order, into all (world * bytes).
  void host_all_gather(const void* mine, size_t bytes, void* all, std::string_view tag = {});
  // Sum over ranks, added in rank order: the same bits on every rank.
  double host_sum(double value, std::string_view tag = {});
  int64_t host_sum(int64_t value, std::string_view tag = {});
  double host_max(double value, std::string_view tag = {});

 protected:
  explicit Comm(std::unique_ptr<Bootstrap> bootstrap) : bootstrap_(std::move(bootstrap)) {}
  // A group of `parent`'s ranks (group()): its bootstrap shared, ranked by place in members.
  Comm(const Comm& parent, std::vector<int> members);
  // "all_reduce on rank 1 of 4 (step 12, tag 'layers.3')": the start of every error.
  std::string where(std::string_view op, std::string_view tag) const;
  std::string where(std::string_view op, std::string_view tag, int64_t step) const;  // at another step
  // Checks shared by the implementations: dtypes, sizes, devices, root.
  void check_reduce(std::string_view op, Tensor out, Tensor in, int64_t in_per_out) const;
  void check_gather(std::string_view op, Tensor out, Tensor in, int64_t out_per_in) const;
  void check_all_to_all(Tensor out, Tensor in) const;
  void check_device(std::string_view op, Tensor t) const;

  std::shared_ptr<Bootstrap> bootstrap_;
  int64_t step_ = -1;
  std::vector<int> members_;  // a group comm: the run's ranks in it, ascending (else empty)
  int group_rank_ = 0;
};

// Moves GPU tensors through host memory for the CPU comm, so that GPU ranks can reduce
// without NCCL: several ranks on one GPU (NCCL refuses two ranks on a device), for tests
// of the multi-rank GPU paths. Each copy first waits for the compute stream, so a
// collective reads what compute wrote and is complete, on the device too, when it returns.
class HostStager {
 public:
  virtual ~HostStager() = default;
  virtual int gpu() const = 0;
  virtual void set_compute_stream(void* stream) = 0;
  virtual void to_host(void* host, const void* device, size_t bytes) = 0;
  virtual void to_device(void* device, const void* host, size_t bytes) = 0;
};
// The stager of GPU local_rank % (visible GPUs) (comm/nccl; kNoDevice without CUDA or a GPU).
std::unique_ptr<HostStager> make_host_stager(int local_rank);

// The CPU comm: TCP between the ranks of one or several machines (cpu_comm.cpp). With a
// stager its tensors are on that stager's GPU, staged through host memory.
std::unique_ptr<Comm> make_cpu_comm(const CommOptions& options, std::unique_ptr<HostStager> stager = nullptr);
// The NCCL comm on GPU options.local_rank (comm/nccl; throws kNoDevice in a build without
// CUDA or on a machine without a GPU).
std::unique_ptr<Comm> make_nccl_comm(const CommOptions& options);
// make_cpu_comm or make_nccl_comm, by device; on GPUs with ANVIL_GPU_COMM_HOST=1 the CPU
// comm with a HostStager (core/env.h).
std::unique_ptr<Comm> make_comm(Device device, const CommOptions& options);

}  // namespace anvil
