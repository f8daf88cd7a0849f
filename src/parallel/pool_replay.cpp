// A training step's pooled buffers, replayed on sizes (parallel/pool_replay.h).
#include "parallel/pool_replay.h"

#include <map>

#include "core/error.h"
#include "parallel/device_buffers.h"

namespace anvil {
namespace {

// The stores' pool requests on sizes: ShardedStore's gathers and full gradients, and
// GradReducer's wire copies, each step's as the model's calls bring them.
class StepPool {
 public:
  StepPool(const ParamTable& table, const PoolRun& run)
      : table_(table),
        run_(run),
        sharded_(shards_state(run.mode)),
        gathers_(run.mode == ParallelMode::kFsdp),
        keep_unit_(kept_unit(table, run.mode)) {}

  // One step; whether it added a buffer.
  bool step() {
    const int64_t added = pool_.total();
    for (int64_t i = 0; i < run_.micro_batches; ++i) forward_backward(i + 1 == run_.micro_batches);
    if (keep_ == Keep::kHeld) give_gather(keep_unit_);  // drop_kept_unit
    keep_ = Keep::kNone;
    finish_pending();
    return pool_.total() != added;
  }
  const PooledBytes& bytes() const { return bytes_; }

 private:
  enum class Keep { kNone, kHeld, kInUse };

  int64_t padded(int unit) const { return table_.units()[static_cast<size_t>(unit)].padded; }
  int64_t bytes_of(int unit, DType dtype) const { return padded(unit) * static_cast<int64_t>(dtype_size(dtype)); }
  DType grad_dtype(int unit) const { return table_.grads_written_once(unit) ? run_.grad : DType::kF32; }
  int take(int64_t bytes, int64_t PooledBytes::*use) {
    const PoolSizes::Taken t = pool_.take(bytes);
    if (t.added) bytes_.*use += bytes;
    return t.buffer;
  }

  // Transformer::forward_backward's calls of its UnitSource.
  void forward_backward(bool sync) {
    const int embed = table_.embed_unit(), norm = table_.norm_unit(), head = table_.lm_head_unit();
    const int64_t L = norm - table_.block_unit(0);
    weights(embed);
    release(embed);
    for (int64_t l = 0; l < L; ++l) {
      weights(table_.block_unit(l));
      prefetch(l + 1 < L ? table_.block_unit(l + 1) : norm);
      release(table_.block_unit(l));
    }
    weights(norm);
    if (head != norm) prefetch(head);
    weights(head);
    grads(head);
    release(head);
    if (head != embed) grads_ready(head, sync);
    grads(norm);
    release(norm);
    grads_ready(norm, sync);
    for (int64_t l = L - 1; l >= 0; --l) {
      weights(table_.block_unit(l));
      if (l > 0) prefetch(table_.block_unit(l - 1));
      grads(table_.block_unit(l));
      release(table_.block_unit(l));
      grads_ready(table_.block_unit(l), sync);
    }
    grads(embed);
    grads_ready(embed, sync);
  }

  // ShardedStore's weights, prefetch and release (zero2 and replicated stores pool none).
  void weights(int unit) {
    if (unit == keep_unit_ && keep_ == Keep::kHeld) {
      keep_ = Keep::kInUse;
      return;
    }
    prefetch(unit);
  }
  void prefetch(int unit) {
    if (gathers_ && !gathered_.count(unit)) gathered_[unit] = take(bytes_of(unit, run_.compute), &PooledBytes::gathers);
  }
  void release(int unit) {
    if (!gathers_) return;
    if (unit == keep_unit_) {
      keep_ = keep_ == Keep::kNone ? Keep::kHeld : Keep::kNone;
      if (keep_ == Keep::kHeld) return;
    }
    give_gather(unit);
  }
  void give_gather(int unit) {
    pool_.give(gathered_.at(unit));
    gathered_.erase(unit);
  }

  // ShardedStore's grads and grads_ready, ReplicatedStore's grads_ready, and GradReducer's
  // reductions.
  void grads(int unit) {
    if (sharded_ && !full_.count(unit)) full_[unit] = take(bytes_of(unit, grad_dtype(unit)), &PooledBytes::grads);
  }
  void grads_ready(int unit, bool sync) {
    const bool wire_copy = grad_dtype(unit) != run_.wire;
    if (!sharded_) {  // all_reduce: in place, or through a copy
      if (!sync || !wire_copy) return;
      finish_pending();
      pending_ = take(bytes_of(unit, run_.wire), &PooledBytes::grads);
      return;
    }
    if (run_.defer_sync && !sync) return;
    finish_pending();  // reduce_scatter
    const int full = full_.at(unit);
    full_.erase(unit);
    if (!wire_copy) {
      pending_ = full;
      return;
    }
    pending_ = take(bytes_of(unit, run_.wire), &PooledBytes::grads);
    pool_.give(full);
  }
  void finish_pending() {
    if (pending_ >= 0) pool_.give(pending_);
    pending_ = -1;
  }

  const ParamTable& table_;
  const PoolRun& run_;
  const bool sharded_, gathers_;
  const int keep_unit_;
  Keep keep_ = Keep::kNone;
  PoolSizes pool_;
  PooledBytes bytes_;
  std::map<int, int> gathered_, full_;  // unit -> the pool's buffer
  int pending_ = -1;                    // the buffer of the reduction in flight
};

}  // namespace

int kept_unit(const ParamTable& table, ParallelMode mode) {
  return mode == ParallelMode::kFsdp && table.norm_unit() > 1 ? table.norm_unit() - 1 : -1;
}

PooledBytes replay_pool(const ParamTable& table, const PoolRun& run) {
  if (table.world() == 1) return {};
  StepPool pool(table, run);
  constexpr int kMostSteps = 8;
  int steps = 1;
  while (pool.step()) ANVIL_ENSURE(++steps <= kMostSteps, kInternal, "the pool grows step after step");
  return pool.bytes();
}

}  // namespace anvil
