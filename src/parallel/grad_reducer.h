// The gradient reduction across ranks: all-reduce (replicated units) or reduce-scatter
// (sharded units), in F32 or BF16.
//
// Gradients are summed, not averaged, across ranks: the loss is normalised by the global
// count of target tokens (train/trainer.cpp), so the sum is the gradient of the global mean.
//  - Replicated (DDP): a unit's gradient is all-reduced in place as soon as the model says
//    it is complete, while the backward of the next unit runs.
//  - Sharded (FSDP): the pooled full-unit gradient is reduce-scattered, and the result added
//    to the rank's owned F32 shard; the full buffer returns to the pool once the collective
//    that reads it is done.
// The wire dtype (set_dtype) is F32 (default) or BF16 (half the bytes). A gradient already
// in the wire dtype is reduced as it is (DDP: in place); another is first converted to a
// pooled copy in the wire dtype (F32 gradients on a BF16 wire are rounded; BF16 gradients,
// model/params.h, on an F32 wire are widened), reduced, and converted back into the
// gradient (DDP: a bf16 gradient receives the fp32 sum rounded once) or added to the owned
// F32 shard (FSDP). One reduction in flight at a time (every reduce-scatter, and the DDP
// all-reduces of copies): the previous one is finished (converted back or accumulated)
// before the next starts (and before its copy is made), so it overlaps the next unit's
// backward and one pooled copy exists at a time (which buffers: parallel/store_pool.h).
// In-place DDP all-reduces may be in flight together. All of it is on the main queue;
// finish() makes the compute stream wait for every collective of the step, before the
// optimizer reads the gradients for the norm.
#pragma once

#include <cstdint>

#include "comm/comm.h"
#include "model/params.h"
#include "ops/ops.h"
#include "parallel/device_buffers.h"
#include "parallel/store_pool.h"

namespace anvil {

class GradReducer {
 public:
  // sharded: reduce-scatters into owned shards (the outputs are persistent buffers of the
  // largest shard, allocated here); else all-reduces whole units. The pool's buffers are
  // the store's: `pool` says which, `buffers` holds them.
  GradReducer(const ParamTable& table, Ops& ops, Comm& comm, DeviceBuffers& buffers, StorePool& pool, bool sharded);
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  void set_dtype(DType dtype);  // F32 (default) or BF16
  // The unit's gradient `grad` (replicated: the owned gradient; sharded: its pooled full
  // gradient) reduced as StorePool::grads_ready said (r.reduce): summed over the ranks in
  // place or through a copy (replicated), or reduce-scattered and added to `owned` (sharded).
  void reduce(int unit, const StorePool::Ready& r, Tensor grad, Tensor owned);
  // The compute stream waits for every collective started, and the last result is in.
  void finish();

 private:
  void start(int unit, Tensor wire, Tensor owned);
  void finish_pending();

  const ParamTable& table_;
  Ops& ops_;
  Comm& comm_;
  DeviceBuffers& buffers_;
  StorePool& pool_;
  bool sharded_;
  DType dtype_ = DType::kF32;
  Tensor rs_tmp_;          // sharded: the reduce-scatter output awaiting accumulation
  Tensor rs_tmp16_;        // sharded, bf16 reduction: the same in bf16
  bool pending_ = false;   // a pooled reduction in flight (below)
  Tensor pending_wire_;    // what it reads: the full gradient (sharded) or a wire copy
  Tensor pending_owned_;   // the gradient its result goes to
  CommWork pending_work_, last_work_;
};

}  // namespace anvil
