// The parameter state of every unit on one rank, in either parallel mode.
//
// One layout serves every mode (model/params.h): a unit is a flat buffer padded to
// world * align elements and rank r owns [r * shard, (r + 1) * shard) of it.
//  - Single process and DDP: a rank owns whole units. Master weights, AdamW m and v and
//    the gradients are whole; the compute copies (bf16 on GPUs; on the CPU the masters
//    themselves) are refreshed after each step. One process on a GPU (either mode): each
//    master is held as two 16-bit halves (core/bf16.h, split_master), and the high half,
//    the bf16 value, is the compute weight itself: no copy to make or to hold, and the
//    fp32 value bit for bit (AdamW joins, updates and splits; checkpoints and exports join).
//    On one GPU, ddp and fsdp are then the same. A unit's gradient is all-reduced (summed)
//    as soon as the model says it is complete, on the last micro-batch only (no_sync
//    before), while the backward of the next unit runs.
//  - FSDP: a rank owns one shard of every unit's master, m, v and gradient. weights(u)
//    converts the owned shard to the compute dtype and all-gathers the unit into a pooled
//    buffer, freed by release(u) (the backward gathers again); prefetch(u) starts the next
//    unit's gather while the current unit computes. grads(u) is a pooled
//    full-unit F32 buffer; grads_ready(u) reduce-scatters it into the owned gradient shard,
//    every micro-batch (or, with set_defer_sync, once on the last). The last block stays
//    gathered from its forward to its backward (FSDP2's reshard_after_forward=False for
//    the unit that is needed again first).
// Gradients are summed, not averaged, across ranks: the loss is normalised by the global
// count of target tokens (train/trainer.cpp), so the sum is the gradient of the global mean.
// The optimizer is one AdamW pass over the owned memory and clips by the global norm
// (squares summed across ranks in FSDP; in DDP every rank holds the same whole gradient).
// Gradient reduction runs in F32, or in BF16 (set_reduce_dtype): the unit's gradient is
// rounded to a pooled bf16 copy, reduced, and widened back (DDP) or added to the owned F32
// shard (FSDP), with one reduction in flight at a time; half the bytes on the wire. All of
// it is on the main queue, before the norm; the update below starts after it.
// The update leaves each unit's gradient as it was (not zeroed: 4 bytes per parameter less
// to write), and overwrite_grads(u) says so until the unit's first grads_ready of the next
// step: the first micro-batch overwrites, the next ones add. With grad_dtype BF16 (one
// process, one micro-batch per step: model/params.h, GradDType) the gradients of the units
// written once per backward are BF16 and always overwritten. FSDP across ranks keeps zeroing
// its owned shards in the update (reduce-scattered gradients are added into them).
// With overlap (the default), once the norm is known the update runs unit by unit, in
// forward order, on the ops' side queue: AdamW, the compute copy (DDP across ranks), then an event per
// unit. The next step's first use of a unit (weights, prefetch, grads) waits for that
// unit's event only, so the next forward follows the optimizer unit by unit. The same ops on the same data in the same order: the same bits as without.
// FSDP's kept last block is freed before the update (it would hold the old weights).
// Everything that reads the state from the host goes through finish_optimizer().
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "comm/comm.h"
#include "model/params.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "optim/adamw.h"
#include "parallel/mode.h"

namespace anvil {

class ParamStore final : public UnitSource {
 public:
  // comm: null for a single process (then table.world() must be 1). grad_dtype: F32, or
  // BF16 for the units whose gradients are written once (one process only).
  ParamStore(const ParamTable& table, Ops& ops, Comm* comm, ParallelMode mode, DType grad_dtype = DType::kF32);
  ~ParamStore() override;
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  // The masters, unit by unit, only the elements this rank owns; AdamW state zero.
  void load(const UnitReader& weights);
  HostUnits download_masters();        // full units (FSDP: gathered; every rank must call); finished updates
  // AdamW m and v, read as the masters are (resuming from a checkpoint).
  void load_optimizer_state(const UnitReader& exp_avg, const UnitReader& exp_avg_sq);

  // UnitSource
  Tensor weights(int unit) override;
  void release(int unit) override;
  Tensor grads(int unit) override;
  bool overwrite_grads(int unit) override;
  void grads_ready(int unit) override;
  void prefetch(int unit) override;

  // DDP: whether this micro-batch's gradients are synchronised (false: no_sync).
  void set_sync(bool sync) { sync_ = sync; }
  // FSDP: keep the full-unit gradients across micro-batches and reduce-scatter once, on the
  // last (PyTorch's set_requires_gradient_sync(False)): fewer collectives, the whole
  // model's fp32 gradient in memory.
  void set_defer_sync(bool defer) { defer_sync_ = defer; }
  void set_reduce_dtype(DType dtype);  // F32 (default) or BF16
  void zero_grads();
  // Makes the compute stream wait for every gradient collective of this step and adds the
  // last reduce-scatter in (optimizer_step does it too; the step benchmark times it).
  void finish_collectives();
  // FSDP: frees the last block if it is still kept gathered from a forward whose backward
  // did not come (a forward-only pass, evaluation). The Trainer calls it after each
  // forward-only pass; optimizer_step calls it before the update, so a kept copy never
  // outlives the weights it was gathered from.
  void drop_kept_unit();
  // Clips by the global norm and takes one AdamW step; returns the pre-clip norm (checked
  // finite before anything is updated). The gradients it applied are then stale (above).
  double optimizer_step(const OptimizerConfig& c, int64_t step, double lr);
  // Overlap the update with what follows (see above); off: it runs on the main queue.
  void set_overlap_optimizer(bool on) { overlap_ = on; }
  // The main queue waits for every update in flight: what is issued after it (downloads,
  // checkpoints, export, evaluation) sees finished updates.
  void finish_optimizer();

  ParallelMode mode() const { return mode_; }
  bool sharded() const { return mode_ == ParallelMode::kFsdp && world_ > 1; }
  // Owned memory: [offset, offset + numel) of each unit.
  int64_t owned_offset(int unit) const;
  // The owned state, with every update finished (reads are issued on the main queue):
  // elements [begin, begin + n) of the owned part of a unit, in fp32 (masters joined).
  enum class State { kMaster, kExpAvg, kExpAvgSq };
  void read_owned(State s, int unit, int64_t begin, int64_t n, float* out);
  const std::vector<Tensor>& exp_avg() { return finish_optimizer(), m_; }
  const std::vector<Tensor>& exp_avg_sq() { return finish_optimizer(), v_; }
  const std::vector<Tensor>& owned_grads() { return finish_optimizer(), grads_; }  // F32 or BF16 (above)
  int64_t persistent_bytes() const { return persistent_bytes_; }

 private:
  Tensor make(int64_t n, DType dtype);  // persistent
  Tensor pooled(int64_t n, DType dtype, bool exact = false);  // exact: a free buffer of this size only
  void unpool(const Tensor& t);
  void finish_pending();
  void reduce_bf16(int unit, Tensor grad);
  void fill(const std::vector<Tensor>& owned, const UnitReader& reader);
  void fill_split(const UnitReader& reader);
  void refresh_compute_copies();
  void await_update(int unit);  // the main queue waits for this unit's update, if in flight

  const ParamTable& table_;
  Ops& ops_;
  Comm* comm_;
  ParallelMode mode_;
  int world_ = 1, rank_ = 0;
  bool sync_ = true;
  bool defer_sync_ = false;
  DType reduce_dtype_ = DType::kF32;
  int keep_unit_ = -1;   // FSDP: the last block, kept gathered from forward to backward
  // keep_unit_ between its forward release and its backward acquire (kHeld), then in use
  // by its backward (kInUse), whose release frees it.
  enum class Keep { kNone, kHeld, kInUse } keep_ = Keep::kNone;
  bool overlap_ = true;
  std::vector<char> updating_;  // per unit: an update on the side queue not yet waited for
  std::vector<char> stale_;     // per unit, not sharded: the gradient holds the last step's values
  std::vector<void*> buffers_;
  int64_t persistent_bytes_ = 0;
  bool split_ = false;                 // one process on a bf16 device: masters as hi_ and lo_
  std::vector<Tensor> master_;         // F32 masters (not split)
  std::vector<Tensor> hi_, lo_;        // split masters: the bf16 high halves (compute weights), I16 low halves
  std::vector<Tensor> grads_, m_, v_;
  std::vector<Tensor> compute_;        // not sharded: persistent compute weights (copies, masters or hi_)
  std::map<int, Tensor> gathered_, full_grads_;           // FSDP: live pooled buffers
  std::map<int, CommWork> in_flight_;                      // FSDP: gathers not yet waited for
  std::multimap<size_t, void*> pool_;                     // free pooled buffers by size
  Tensor rs_tmp_;          // FSDP: the reduce-scatter output awaiting accumulation
  Tensor rs_tmp16_;        // FSDP, bf16 reduction: the same in bf16
  Tensor pending_full_;    // the full gradient (FSDP) or bf16 copy (bf16) being reduced
  int pending_unit_ = -1;  // unit whose reduction is in flight
  CommWork pending_work_, last_work_;
  Tensor scratch_;
};

}  // namespace anvil
