// A training step's pooled buffers (parallel/device_buffers.h), replayed on sizes before
// anything is allocated, for the memory plan (plan/memory_plan.cpp).
//
// The requests are the stores' (parallel/sharded_store.h, parallel/grad_reducer.h), in the
// order the model asks for units (model/transformer.h: the embedding, each block's weights
// with the next unit prefetched, the final norm and the output layer, the blocks backward
// with the one before prefetched, the embedding's gradient), micro-batch by micro-batch,
// and the step's end (the kept unit dropped, the last reduction finished):
//  - fsdp: a unit's gather in the compute dtype, from prefetch (or weights) to release; the
//    last block kept from its forward to its backward.
//  - fsdp and zero2: a unit's full gradient (F32, or BF16 for the units written once with
//    bf16 gradients) from grads to its reduce-scatter, kept across micro-batches with the
//    sync deferred.
//  - every mode across ranks: the gradient's copy in the wire dtype where they differ, taken
//    after the previous reduction is finished and given back when the next one starts
//    (one reduction in flight); a full gradient returns as soon as its copy is made.
// Through PoolSizes, the rule DeviceBuffers allocates by, step after step until a step adds
// no buffer (then every later step reuses what the pool holds): the pool's size is what a
// rank holds for it at its peak.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "model/params.h"
#include "parallel/mode.h"

namespace anvil {

struct PoolRun {
  ParallelMode mode = ParallelMode::kDdp;  // resolved
  DType compute = DType::kBF16;            // the device's compute dtype: FSDP's gathers
  DType grad = DType::kF32;                // the gradients of the units written once (model/params.h)
  DType wire = DType::kF32;                // the reduction's (--reduce-dtype)
  bool defer_sync = false;                 // --fsdp-defer-sync
  int64_t micro_batches = 1;               // per step
};

// The pool's buffers by their first use (a buffer is reused for either later).
struct PooledBytes {
  int64_t gathers = 0;  // FSDP's gathered units
  int64_t grads = 0;    // full-unit gradients and wire copies
};

// Across the table's world (one rank: nothing is pooled).
PooledBytes replay_pool(const ParamTable& table, const PoolRun& run);

// The unit FSDP keeps gathered from its forward to its backward (the last block; -1: none),
// for ShardedStore and the replay alike.
int kept_unit(const ParamTable& table, ParallelMode mode);

}  // namespace anvil
