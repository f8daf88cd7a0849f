// What a parameter store pools, and when: the one account of it, on sizes.
//
// The pooled buffers are FSDP's gathered units, the sharded stores' full-unit gradients, the
// copies in the wire dtype that GradReducer reduces (parallel/grad_reducer.h), and the
// downloads of sharded masters. A request takes the smallest free buffer that holds it, else
// a new one of its size (PoolSizes); a buffer keeps its size when it comes back, and the pool
// keeps every buffer until the store is destroyed. StorePool decides, at each call of the
// store, which buffer is taken or given back; the stores (parallel/sharded_store.h,
// parallel/replicated_store.h) and the reducer ask it and do the rest (the collectives, the
// conversions), and DeviceBuffers holds the memory of each numbered buffer. What is pooled:
//  - fsdp: a unit's gather in the compute dtype, from prefetch (or weights) to release; the
//    last block kept from its forward to its backward (kept_unit).
//  - fsdp and zero2: a unit's full gradient (F32, or BF16 for the units written once with
//    bf16 gradients) from its first grads to its reduction, kept across micro-batches with
//    the sync deferred.
//  - every mode across ranks: a gradient's copy in the wire dtype where they differ; one
//    pooled reduction in flight, finished (its buffer given back) before the next one takes
//    its copy; a full gradient comes back as soon as its copy is taken.
// replay_pool runs a training step's calls through the same class, in the order the model
// makes them, before anything is allocated: the memory plan's count (plan/memory_plan.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "core/tensor.h"
#include "model/params.h"
#include "parallel/mode.h"

namespace anvil {

// The pool's rule on sizes; buffers are numbered in the order they were added.
class PoolSizes {
 public:
  struct Taken {
    int buffer = 0;
    bool added = false;  // a new buffer of the request's size
  };
  Taken take(int64_t bytes);
  void give(int buffer);
  int64_t size(int buffer) const { return sizes_[static_cast<size_t>(buffer)]; }
  int64_t total() const { return total_; }  // every buffer, free or taken

 private:
  std::vector<int64_t> sizes_;
  std::multimap<int64_t, int> free_;  // free buffers by size
  int64_t total_ = 0;
};

// The unit FSDP keeps gathered from its forward to its backward (the last block; -1: none).
int kept_unit(const ParamTable& table, ParallelMode mode);

class StorePool {
 public:
  static constexpr int kNone = -1;  // no buffer
  // A store of `mode` over the table's world: sharded (fsdp, zero2) across ranks, else
  // replicated. compute: the device's compute dtype (the gathers'); grad: the gradients of
  // the units written once (model/params.h, GradDType).
  StorePool(const ParamTable& table, ParallelMode mode, DType compute, DType grad);
  void set_wire(DType wire) { wire_ = wire; }          // the reduction's dtype (F32 default)
  void set_defer_sync(bool defer) { defer_ = defer; }  // sharded: reduce on the last micro-batch only

  // A buffer a call uses: `fresh` when this call took it for the unit (a gather to start,
  // a gradient to initialise).
  struct Use {
    int buffer = kNone;
    bool fresh = false;
    bool kept = false;  // weights: the unit held gathered since its forward (no gather in flight)
  };
  // fsdp's gathers (kNone in the other modes).
  Use prefetch(int unit);  // the unit's gather, fresh unless it is gathered already
  Use weights(int unit);   // the same, or the kept unit, now in use by its backward
  void release(int unit);  // the gather back to the pool; the kept unit after its forward stays
  void drop_kept();        // the kept unit back, where its backward did not come
  // Sharded: the unit's full gradient, fresh at the first call of the step (or of the
  // micro-batch, where it is reduced every micro-batch).
  Use grads(int unit);
  // The unit's gradient is complete for the micro-batch (sync: the last one of the step).
  struct Ready {
    bool reduce = false;           // reduce it now (else: no_sync, or the sync deferred)
    bool finish_previous = false;  // the pooled reduction in flight is finished first (its buffer is back)
    int full = kNone;              // sharded: the full gradient, leaving the unit
    int wire = kNone;              // what the collective reads: full, a new copy in the wire dtype, or
                                   // kNone: the gradient itself, in place (replicated)
  };
  Ready grads_ready(int unit, bool sync);
  void finish();  // the reduction in flight is finished: its buffer back (the step's end)
  // A download's staging buffer (sharded masters), taken and given back at once.
  int take(int64_t bytes) { return sizes_.take(bytes).buffer; }
  void give(int buffer) { sizes_.give(buffer); }

  int64_t size(int buffer) const { return sizes_.size(buffer); }
  int64_t total() const { return sizes_.total(); }
  // Every buffer's bytes by the first call that added it: fsdp's gathers, the rest.
  int64_t gather_bytes() const { return gather_bytes_; }

 private:
  // The kept unit between its forward's release and its backward's weights (kHeld), then in
  // use by its backward (kInUse), whose release gives it back.
  enum class Keep { kNone, kHeld, kInUse };
  int64_t bytes_of(int unit, DType dtype) const;
  DType grad_dtype(int unit) const;
  int take_for(int64_t bytes, bool gather);

  const ParamTable& table_;
  const bool sharded_, gathers_;
  const int keep_unit_;
  const DType compute_, grad_;
  DType wire_ = DType::kF32;
  bool defer_ = false;
  Keep keep_ = Keep::kNone;
  PoolSizes sizes_;
  int64_t gather_bytes_ = 0;
  std::map<int, int> gathered_, full_;  // unit -> buffer
  int pending_ = kNone;                 // the buffer of the pooled reduction in flight
};

// A training step's pooled buffers on one rank, replayed.
struct PoolRun {
  ParallelMode mode = ParallelMode::kDdp;  // resolved
  DType compute = DType::kBF16;
  DType grad = DType::kF32;
  DType wire = DType::kF32;  // --reduce-dtype
  bool defer_sync = false;   // --fsdp-defer-sync
  int64_t micro_batches = 1;
};
// The pool's buffers by their first use (a buffer is reused for either later).
struct PooledBytes {
  int64_t gathers = 0;  // fsdp's gathered units
  int64_t grads = 0;    // full-unit gradients and wire copies
};
// StorePool through the calls of training steps (model/transformer.h's order, micro-batch by
// micro-batch; the step's end: the kept unit dropped, the reduction finished), step after
// step until one adds no buffer: what a rank holds for the pool at its peak. Nothing on one
// rank.
PooledBytes replay_pool(const ParamTable& table, const PoolRun& run);

}  // namespace anvil
