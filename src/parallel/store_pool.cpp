// What a parameter store pools, and when (parallel/store_pool.h).
#include "parallel/store_pool.h"

#include "core/error.h"

namespace anvil {

PoolSizes::Taken PoolSizes::take(int64_t bytes) {
  auto it = free_.lower_bound(bytes);
  if (it != free_.end()) {
    const int buffer = it->second;
    free_.erase(it);
    return {buffer, false};
  }
  sizes_.push_back(bytes);
  total_ += bytes;
  return {static_cast<int>(sizes_.size()) - 1, true};
}

void PoolSizes::give(int buffer) { free_.emplace(size(buffer), buffer); }

int kept_unit(const ParamTable& table, ParallelMode mode) {
  return mode == ParallelMode::kFsdp && table.world() > 1 && table.norm_unit() > 1 ? table.norm_unit() - 1 : -1;
}

StorePool::StorePool(const ParamTable& table, ParallelMode mode, DType compute, DType grad)
    : table_(table),
      sharded_(shards_state(mode) && table.world() > 1),
      gathers_(sharded_ && mode == ParallelMode::kFsdp),
      keep_unit_(kept_unit(table, mode)),
      compute_(compute),
      grad_(grad) {}

int64_t StorePool::bytes_of(int unit, DType dtype) const {
  return table_.units()[static_cast<size_t>(unit)].padded * static_cast<int64_t>(dtype_size(dtype));
}

DType StorePool::grad_dtype(int unit) const { return table_.grads_written_once(unit) ? grad_ : DType::kF32; }

int StorePool::take_for(int64_t bytes, bool gather) {
  const PoolSizes::Taken t = sizes_.take(bytes);
  if (t.added && gather) gather_bytes_ += bytes;
  return t.buffer;
}

StorePool::Use StorePool::prefetch(int unit) {
  if (!gathers_) return {};
  auto it = gathered_.find(unit);
  if (it != gathered_.end()) return {it->second, false};
  const int buffer = take_for(bytes_of(unit, compute_), true);
  gathered_[unit] = buffer;
  return {buffer, true};
}

StorePool::Use StorePool::weights(int unit) {
  if (unit == keep_unit_ && keep_ == Keep::kHeld) {  // gathered since its forward
    keep_ = Keep::kInUse;
    return {gathered_.at(unit), false, true};
  }
  return prefetch(unit);
}

void StorePool::release(int unit) {
  if (!gathers_) return;
  auto it = gathered_.find(unit);
  ANVIL_ENSURE(it != gathered_.end(), kInternal, "unit ", unit, " released but not acquired");
  if (unit == keep_unit_) {
    keep_ = keep_ == Keep::kNone ? Keep::kHeld : Keep::kNone;
    if (keep_ == Keep::kHeld) return;  // after its forward: its backward comes next
  }
  sizes_.give(it->second);
  gathered_.erase(it);
}

void StorePool::drop_kept() {
  if (keep_ == Keep::kNone) return;
  ANVIL_ENSURE(keep_ == Keep::kHeld, kInternal, "unit ", keep_unit_, " dropped while its backward uses it");
  keep_ = Keep::kNone;
  sizes_.give(gathered_.at(keep_unit_));
  gathered_.erase(keep_unit_);
}

StorePool::Use StorePool::grads(int unit) {
  if (!sharded_) return {};
  auto it = full_.find(unit);
  if (it != full_.end()) return {it->second, false};
  const int buffer = take_for(bytes_of(unit, grad_dtype(unit)), false);
  full_[unit] = buffer;
  return {buffer, true};
}

StorePool::Ready StorePool::grads_ready(int unit, bool sync) {
  Ready r;
  const bool copy = grad_dtype(unit) != wire_;
  if (sharded_ ? defer_ && !sync : !sync) return r;
  r.reduce = true;
  if (!sharded_ && !copy) return r;  // all-reduced in place, beside any in flight
  r.finish_previous = true;
  finish();
  if (sharded_) {
    auto it = full_.find(unit);
    ANVIL_ENSURE(it != full_.end(), kInternal, "unit ", unit, " has no gradient buffer");
    r.full = it->second;
    full_.erase(it);
  }
  r.wire = copy ? take_for(bytes_of(unit, wire_), false) : r.full;
  if (copy && r.full != kNone) sizes_.give(r.full);  // read by the copy, queued before any later use
  pending_ = r.wire;
  return r;
}

void StorePool::finish() {
  if (pending_ != kNone) sizes_.give(pending_);
  pending_ = kNone;
}

namespace {

// Transformer::forward_backward's calls of its UnitSource, on the pool.
void forward_backward(StorePool& pool, const ParamTable& table, bool sync) {
  const int embed = table.embed_unit(), norm = table.norm_unit(), head = table.lm_head_unit();
  const int64_t L = norm - table.block_unit(0);
  pool.weights(embed);
  pool.release(embed);
  for (int64_t l = 0; l < L; ++l) {
    pool.weights(table.block_unit(l));
    pool.prefetch(l + 1 < L ? table.block_unit(l + 1) : norm);
    pool.release(table.block_unit(l));
  }
  pool.weights(norm);
  if (head != norm) pool.prefetch(head);
  pool.weights(head);
  pool.grads(head);
  pool.release(head);
  if (head != embed) pool.grads_ready(head, sync);
  pool.grads(norm);
  pool.release(norm);
  pool.grads_ready(norm, sync);
  for (int64_t l = L - 1; l >= 0; --l) {
    pool.weights(table.block_unit(l));
    if (l > 0) pool.prefetch(table.block_unit(l - 1));
    pool.grads(table.block_unit(l));
    pool.release(table.block_unit(l));
    pool.grads_ready(table.block_unit(l), sync);
  }
  pool.grads(embed);
  pool.grads_ready(embed, sync);
}

}  // namespace

PooledBytes replay_pool(const ParamTable& table, const PoolRun& run) {
  if (table.world() == 1) return {};
  StorePool pool(table, run.mode, run.compute, run.grad);
  pool.set_wire(run.wire);
  pool.set_defer_sync(run.defer_sync);
  constexpr int kMostSteps = 8;
  for (int step = 1;; ++step) {
    const int64_t before = pool.total();
    for (int64_t i = 0; i < run.micro_batches; ++i) forward_backward(pool, table, i + 1 == run.micro_batches);
    pool.drop_kept();  // ParamStore::complete_grads
    pool.finish();
    if (pool.total() == before) break;
    ANVIL_ENSURE(step < kMostSteps, kInternal, "the store's pool grows step after step");
  }
  return {pool.gather_bytes(), pool.total() - pool.gather_bytes()};
}

}  // namespace anvil
