// The optimizer step over the units a rank owns: global-norm clipping, then AdamW.
//
// The store (parallel/param_store.h) allocates the owned buffers and hands them over as
// OwnedUnits; the Trainer runs the optimizer on them, which owns what is done at each step:
//  - Clipping by the global norm (optim/adamw.h): the squares of every owned gradient,
//    summed over the ranks when the gradients are sharded (norm_comm), and the norm
//    checked finite before anything is updated.
//  - AdamW, unit by unit, in forward order (embedding, blocks, final norm, output layer),
//    in one pass with the compute copy (split masters: the high half is it) and, where the
//    store asks (FSDP across ranks: the next reduce-scatters add into the owned shards),
//    the zeroing of the gradient. Elsewhere the gradient is left as it was (4 bytes per
//    parameter less to write); the store marks it stale.
//  - The overlap (the default): once the norm is known the update runs unit by unit on the
//    ops' side queue, with an event per unit (slot u; the end of the gradients is slot
//    units). The next step's first use of a unit waits for that unit's event only
//    (await_update), so the next forward follows the optimizer unit by unit. The same ops
//    on the same data in the same order: the same bits as without. Everything that reads
//    the state from the host first calls finish(). The store, which hands the units out,
//    reaches these two through PendingUpdates.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/comm.h"
#include "ops/ops.h"
#include "optim/adamw.h"

namespace anvil {

// The owned buffers of every unit, indexed by unit, as one rank holds them.
struct OwnedUnits {
  std::vector<Tensor> master;          // F32 masters (empty with split masters)
  std::vector<Tensor> hi, lo;          // split masters (core/bf16.h): bf16 high halves (compute weights), I16 low
  std::vector<Tensor> grads, m, v;     // gradients (F32 or BF16), AdamW moments
  std::vector<Tensor> compute;         // compute weights written by the update (empty where sharded)
  bool split() const { return !hi.empty(); }
};

// The updates of owned units that may still be in flight on another queue, for whoever hands
// the units out (the store): what it waits for before a unit's first use, and before the
// state is read.
class PendingUpdates {
 public:
  virtual ~PendingUpdates() = default;
  virtual void await_update(int unit) = 0;  // the main queue waits for this unit's update, if in flight
  // The main queue waits for every update in flight: what is issued after it (downloads,
  // checkpoints, export, evaluation) sees finished updates.
  virtual void finish() = 0;
};

class Optimizer final : public PendingUpdates {
 public:
  // units and scratch (one F32 element) outlive the optimizer. norm_comm: sums the squares
  // over the ranks (sharded gradients); null: every rank holds the whole gradient.
  // zero_grads: the update zeroes each gradient it reads.
  Optimizer(Ops& ops, const OwnedUnits& units, Tensor scratch, Comm* norm_comm, bool zero_grads);
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Overlap the update with what follows (above); off: it runs on the main queue.
  void set_overlap(bool on) { overlap_ = on; }
  // How each unit's gradient squares enter the norm: kLocal, the unit is whole and alike on
  // every rank (counted here alone); kSummed, summed over norm_comm's ranks (sharded units, or an
  // expert shard's first replica); kSkipped, another rank counts it (an expert shard's other
  // replicas). By default every unit is kSummed with a norm_comm, else kLocal.
  enum class NormPart : char { kLocal, kSummed, kSkipped };
  void set_norm_parts(Comm* norm_comm, std::vector<NormPart> parts);
  // Clips by the global norm and takes one AdamW step; returns the pre-clip norm (checked
  // finite before anything is updated). After finish(), with the gradients complete on the
  // main queue.
  double step(const OptimizerConfig& c, int64_t step, double lr);
  void await_update(int unit) override;
  void finish() override;

 private:
  double global_norm(int64_t step);
  void update(size_t u, const AdamWHyper& h, float scale);

  Ops& ops_;
  const OwnedUnits& units_;
  Tensor scratch_;
  Comm* norm_comm_;
  bool zero_grads_;
  bool overlap_ = true;
  std::vector<char> updating_;  // per unit: an update on the side queue not yet waited for
  std::vector<NormPart> norm_parts_;
};

}  // namespace anvil
