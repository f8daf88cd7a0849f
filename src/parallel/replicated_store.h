// The store of whole units: one process, and DDP across ranks.
//
// A rank owns whole units. Master weights, AdamW m and v and the gradients are whole; the
// compute copies (bf16 on GPUs; on the CPU the masters themselves) are persistent and
// rewritten by each update. One process on a GPU (either mode): each master is held as two
// 16-bit halves (core/bf16.h, split_master), and the high half, the bf16 value, is the
// compute weight itself: no copy to make or to hold, and the fp32 value bit for bit (AdamW
// joins, updates and splits; checkpoints and exports join). On one GPU, ddp and fsdp are
// then the same. A unit's gradient is all-reduced (summed; parallel/grad_reducer.h) as
// soon as the model says it is complete, on the last micro-batch only (no_sync before),
// while the backward of the next unit runs. With the overlapped optimizer, the first use
// of a unit (weights, grads) waits for that unit's update only.
#pragma once

#include "parallel/param_store.h"

namespace anvil {

class ReplicatedStore final : public ParamStore {
 public:
  ReplicatedStore(const ParamTable& table, Ops& ops, Comm* comm, ParallelMode mode, DType grad_dtype,
                  Comm* replicas = nullptr);

  // UnitSource
  Tensor weights(int unit) override;
  void release(int unit) override { (void)unit; }
  Tensor grads(int unit) override;
  void grads_ready(int unit) override;

 private:
  void download_master(int unit, float* out) override;
};

}  // namespace anvil
