// The store of sharded units: FSDP and ZeRO-2 across ranks.
//
// A rank owns one shard of every unit's master, m, v and gradient (F32). weights(u)
// all-gathers the unit into a pooled buffer in the compute dtype, freed by release(u) (the
// backward gathers again); what each rank sends is its shard's bf16 high half as it is held
// (split masters: no conversion, no copy), or on the CPU the fp32 shard. prefetch(u) starts
// the next unit's gather while the current unit computes. grads(u) is a pooled full-unit
// buffer (BF16 for the units written once with bf16 gradients, else F32); grads_ready(u)
// reduce-scatters it into the owned F32 gradient shard (parallel/grad_reducer.h), every
// micro-batch (or, with set_defer_sync, once on the last).
// The last block stays gathered from its forward to its backward (FSDP2's
// reshard_after_forward=False for the unit that is needed again first); it is freed before
// the update (it would hold the old weights). With the overlapped optimizer, the first use
// of a unit (weights, prefetch, grads) waits for that unit's update only.
// zero2 (FSDP's SHARD_GRAD_OP) is the same store without the gathers and frees per use: the
// compute weights are held whole (whole_weights_), the owned slice of them updated in place,
// and a unit is gathered (in place) at its first use after an update or a load, so once a
// step, in the next forward, unit by unit after its update; release(u) keeps it.
// The memory plan replays what this store pools and when (parallel/pool_replay.h;
// tests/test_plan.cpp holds the two equal to the byte).
#pragma once

#include <map>

#include "parallel/param_store.h"

namespace anvil {

class ShardedStore final : public ParamStore {
 public:
  ShardedStore(const ParamTable& table, Ops& ops, Comm& comm, ParallelMode mode, DType grad_dtype);
  ~ShardedStore() override;

  // UnitSource
  Tensor weights(int unit) override;
  void release(int unit) override;
  Tensor grads(int unit) override;
  void grads_ready(int unit) override;
  void prefetch(int unit) override;

  // Keep the full-unit gradients across micro-batches and reduce-scatter once, on the last
  // (PyTorch's set_requires_gradient_sync(False)): fewer collectives, the whole model's
  // fp32 gradient in memory.
  void set_defer_sync(bool defer) override { defer_sync_ = defer; }
  // Frees the last block if it is still kept gathered from a forward whose backward did not
  // come (a forward-only pass, evaluation). The Trainer calls it after each forward-only
  // pass; complete_grads calls it before the update, so a kept copy never outlives the
  // weights it was gathered from.
  void drop_kept_unit() override;

 private:
  void download_master(int unit, float* out) override;
  void masters_changed() override;

  const bool zero2_;
  bool defer_sync_ = false;
  const int keep_unit_;  // the last block, kept gathered from forward to backward (parallel/pool_replay.h)
  // keep_unit_ between its forward release and its backward acquire (kHeld), then in use
  // by its backward (kInUse), whose release frees it.
  enum class Keep { kNone, kHeld, kInUse } keep_ = Keep::kNone;
  std::map<int, Tensor> gathered_, full_grads_;  // live pooled buffers (zero2: gathered_ are whole_weights_)
  std::map<int, CommWork> in_flight_;            // gathers not yet waited for
};

}  // namespace anvil
