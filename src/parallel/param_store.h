// The parameter state of every unit on one rank: the store the Trainer and checkpoints use,
// and the UnitSource the model asks for weights and gradient buffers.
//
// One layout serves every mode (model/params.h): a unit is a flat buffer padded to
// world * align elements and rank r owns [r * shard, (r + 1) * shard) of it. Two stores
// implement it, picked by make_param_store:
//  - ReplicatedStore (parallel/replicated_store.h): one process, and DDP across ranks;
//    every rank owns whole units.
//  - ShardedStore (parallel/sharded_store.h): FSDP and ZeRO-2 across ranks; a rank owns one
//    shard of every unit (zero2: and holds the compute weights whole, whole_weights_).
// What both share is here: the owned buffers (masters, AdamW m and v, gradients; the
// optimizer, optim/optimizer.h, which the Trainer runs on owned(), updates them), loading and
// reading them, and the gradient reducer (parallel/grad_reducer.h). Of the optimizer the store
// knows only its PendingUpdates (optim/optimizer.h): it waits for a unit's update before the
// unit's first use, and for every update before the state is read.
// On a bf16 device every master is held split (core/bf16.h, split_master): a bf16 high
// half, which is the compute weight (DDP and one process) or what FSDP's all-gather sends,
// and an int16 low half; no separate bf16 copy is made or held. On the CPU (fp32 compute)
// the masters are fp32 and are the compute weights. zero2 holds each unit's compute weights
// whole and owns a slice of them: its owned high halves (on the CPU its fp32 masters) are
// that slice, in place, and the low halves a shard of their own.
// The update leaves each unit's gradient as it was (not zeroed: 4 bytes per parameter less
// to write), and overwrite_grads(u) says so until the unit's first grads_ready of the next
// step: the first micro-batch overwrites, the next ones add. With grad_dtype BF16 (one
// micro-batch per step: model/params.h, GradDType) the gradients the model writes for the
// units written once per backward are BF16 and always overwritten: the owned gradients in a
// replicated store, the sharded store's pooled full-unit buffers (the owned shards stay
// F32). The sharded store keeps zeroing its owned shards in the update (reduce-scattered
// gradients are added into them). Everything that reads the state from the host goes through finish_updates().
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/comm.h"
#include "model/params.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "optim/optimizer.h"
#include "parallel/device_buffers.h"
#include "parallel/grad_reducer.h"
#include "parallel/mode.h"
#include "parallel/store_pool.h"

namespace anvil {

class ParamStore : public UnitSource {
 public:
  ~ParamStore() override;
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  // The masters, unit by unit, only the elements this rank owns; AdamW state zero.
  void load(const UnitReader& weights);
  // Full units (sharded: gathered; every rank must call); finished updates.
  HostUnits download_masters();
  // AdamW m and v, read as the masters are (resuming from a checkpoint).
  void load_optimizer_state(const UnitReader& exp_avg, const UnitReader& exp_avg_sq);

  bool overwrite_grads(int unit) override;

  // DDP: whether this micro-batch's gradients are synchronised (false: no_sync).
  void set_sync(bool sync) { sync_ = sync; }
  // FSDP, zero2: keep the full-unit gradients across micro-batches and reduce-scatter once, on the
  // last (parallel/sharded_store.h); a replicated store has nothing to defer.
  void set_defer_sync(bool defer) { pool_.set_defer_sync(defer); }
  void set_reduce_dtype(DType dtype);  // F32 (default) or BF16 (parallel/grad_reducer.h)
  void zero_grads();
  // Makes the compute stream wait for every gradient collective of this step and adds the
  // last reduce-scatter in (complete_grads does it too; the step benchmark times it).
  void finish_collectives();
  // FSDP: frees the last block if it is still kept gathered from a forward whose backward
  // did not come (a forward-only pass, evaluation; parallel/sharded_store.h). The Trainer
  // calls it after each forward-only pass; complete_grads calls it before the update, so a
  // kept copy never outlives the weights it was gathered from.
  void drop_kept_unit() { pool_.drop_kept(); }

  // The optimizer's step on owned() goes between these two. complete_grads: every gradient
  // of the step complete on the main queue (collectives finished, the kept unit dropped, no
  // update in flight). grads_applied: the gradients the step applied are stale (above).
  void complete_grads();
  void grads_applied() {
    stale_.assign(stale_.size(), !sharded_);
    masters_changed();
  }
  // The updates of the owned units that may be in flight (the optimizer's), waited for as
  // above; null (the default): none are.
  void set_pending_updates(PendingUpdates* updates) { updates_ = updates; }
  // The main queue waits for every update in flight.
  void finish_updates() {
    if (updates_) updates_->finish();
  }
  // The owned buffers, which the optimizer updates.
  const OwnedUnits& owned() const { return owned_; }

  ParallelMode mode() const { return mode_; }
  bool sharded() const { return sharded_; }
  // Owned memory: [offset, offset + numel) of each unit.
  int64_t owned_offset(int unit) const;
  // The owned state, with every update finished (reads are issued on the main queue):
  // elements [begin, begin + n) of the owned part of a unit, in fp32 (masters joined).
  enum class State { kMaster, kExpAvg, kExpAvgSq };
  void read_owned(State s, int unit, int64_t begin, int64_t n, float* out);
  // The device tensors that hold owned state s of a unit, every update finished: one F32
  // tensor, or split masters' high (BF16) and low (I16) halves (core/bf16.h). For copies
  // that bypass read_owned's conversion (an asynchronous save's snapshot).
  std::vector<Tensor> owned_tensors(State s, int unit);
  const std::vector<Tensor>& exp_avg() { return finish_updates(), owned_.m; }
  const std::vector<Tensor>& exp_avg_sq() { return finish_updates(), owned_.v; }
  const std::vector<Tensor>& owned_grads() { return finish_updates(), owned_.grads; }  // F32 or BF16 (above)

 protected:
  // comm: null for a single process (then table.world() must be 1). grad_dtype: F32, or
  // BF16 for the units whose gradients are written once. sharded: each rank owns one shard
  // of every unit (else whole units); with mode zero2 the compute weights are held whole.
  // replicas: the ranks holding this rank's experts (expert parallel, below; null: none else).
  ParamStore(const ParamTable& table, Ops& ops, Comm* comm, ParallelMode mode, DType grad_dtype, bool sharded,
             Comm* replicas);
  // Expert parallel (model/params.h, ExpertLayout): an experts unit is this rank's whole, in
  // every mode: its weights are the owned masters (split: their high halves), its gradient the
  // owned one, all-reduced over `replicas` on the last micro-batch (grads_ready_experts).
  bool experts(int unit) const { return table_.units()[static_cast<size_t>(unit)].experts; }
  void grads_ready_experts(int unit);
  Tensor expert_weights(int unit) {
    await_update(unit);
    return owned_.split() ? owned_.hi[static_cast<size_t>(unit)] : owned_.master[static_cast<size_t>(unit)];
  }
  void await_update(int unit) {
    if (updates_) updates_->await_update(unit);
  }
  // The dtype of the gradient the model writes for a unit (above).
  DType unit_grad_dtype(int unit) const { return table_.grads_written_once(unit) ? grad_dtype_ : DType::kF32; }
  // The whole fp32 master of a unit (padded), into out.
  virtual void download_master(int unit, float* out) = 0;
  // The owned masters were loaded or updated (zero2: the whole weights are gathered again).
  virtual void masters_changed() {}

  const ParamTable& table_;
  Ops& ops_;
  Comm* comm_;
  DType grad_dtype_;
  bool sync_ = true;
  DeviceBuffers buffers_;
  StorePool pool_;  // which pooled buffer each call takes and gives back (parallel/store_pool.h)
  // zero2 (else empty): every unit's compute weights, whole; filled by allocate, with owned_.
  std::vector<Tensor> whole_weights_;
  OwnedUnits owned_;
  std::vector<char> stale_;              // per unit, not sharded: the gradient holds the last step's values
  std::unique_ptr<GradReducer> reducer_;  // null on one rank
  Comm* replicas_;                         // the experts' replica group (null: one replica)
  std::vector<CommWork> expert_works_;     // its all-reduces of this step

 private:
  OwnedUnits allocate(DType grad_dtype, bool sharded, bool whole_weights);  // the layout, in allocation order
  void fill(const std::vector<Tensor>& owned, const UnitReader& reader);
  void fill_split(const UnitReader& reader);

  ParallelMode mode_;
  bool sharded_;
  PendingUpdates* updates_ = nullptr;
};

// The store of a resolved mode: sharded for FSDP and ZeRO-2 across ranks, else replicated.
// replicas: the experts' replica group under expert parallelism (null: none, or one replica).
std::unique_ptr<ParamStore> make_param_store(const ParamTable& table, Ops& ops, Comm* comm, ParallelMode mode,
                                             DType grad_dtype = DType::kF32, Comm* replicas = nullptr);

}  // namespace anvil
