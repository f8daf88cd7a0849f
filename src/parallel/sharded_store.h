// The store of sharded units: FSDP and ZeRO-2 across ranks.
//
// A rank owns one shard of every unit's master, m, v and gradient (F32). weights(u)
// all-gathers the unit into a pooled buffer in the compute dtype, freed by release(u) (the
// backward gathers again); what each rank sends is its shard's bf16 high half as it is held
// (split masters: no conversion, no copy), or on the CPU the fp32 shard. prefetch(u) starts
// the next unit's gather while the current unit computes. grads(u) is a pooled full-unit
// buffer (BF16 for the units written once with bf16 gradients, else F32); grads_ready(u)
// reduce-scatters it into the owned F32 gradient shard (parallel/grad_reducer.h), every
// micro-batch (or, with ParamStore::set_defer_sync, once on the last: fewer collectives, the
// whole model's fp32 gradient in memory; PyTorch's set_requires_gradient_sync(False)).
// The last block stays gathered from its forward to its backward (FSDP2's
// reshard_after_forward=False for the unit that is needed again first); it is freed before
// the update (it would hold the old weights). With the overlapped optimizer, the first use
// of a unit (weights, prefetch, grads) waits for that unit's update only.
// zero2 (FSDP's SHARD_GRAD_OP) is the same store without the gathers and frees per use: the
// compute weights are held whole (whole_weights_), the owned slice of them updated in place,
// and a unit is gathered (in place) at its first use after an update or a load, so once a
// step, in the next forward, unit by unit after its update; release(u) keeps it.
// An experts unit (expert parallel) is held whole, not sharded (param_store.h).
// Which pooled buffer each call takes and gives back is StorePool's (parallel/store_pool.h),
// which the memory plan replays.
#pragma once

#include <map>
#include <set>

#include "parallel/param_store.h"

namespace anvil {

class ShardedStore final : public ParamStore {
 public:
  ShardedStore(const ParamTable& table, Ops& ops, Comm& comm, ParallelMode mode, DType grad_dtype, Comm* replicas);

  // UnitSource
  Tensor weights(int unit) override;
  void release(int unit) override;
  Tensor grads(int unit) override;
  void grads_ready(int unit) override;
  void prefetch(int unit) override;

 private:
  void download_master(int unit, float* out) override;
  void masters_changed() override;
  Tensor gathered(int unit, int buffer);      // fsdp: the pool's buffer of a unit's gather
  void start_gather(int unit, Tensor full);  // the unit all-gathered into full, in flight

  const bool zero2_;
  std::set<int> current_;             // zero2: the units gathered since the last update
  std::map<int, CommWork> in_flight_;  // gathers not yet waited for
};

}  // namespace anvil
