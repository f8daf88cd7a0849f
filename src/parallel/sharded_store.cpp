// The store of sharded units (parallel/sharded_store.h).
#include "parallel/sharded_store.h"

#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "parallel/pool_replay.h"

namespace anvil {

ShardedStore::ShardedStore(const ParamTable& table, Ops& ops, Comm& comm, ParallelMode mode, DType grad_dtype)
    : ParamStore(table, ops, &comm, mode, grad_dtype, true),
      zero2_(mode == ParallelMode::kZero2),
      keep_unit_(kept_unit(table, mode)) {}

ShardedStore::~ShardedStore() {
  if (!zero2_)
    for (auto& [u, t] : gathered_) buffers_.unpool(t);
  for (auto& [u, t] : full_grads_) buffers_.unpool(t);
}

// The owned parts of every rank, gathered whole: fp32 masters, or both halves of split ones
// (joined on the host).
void ShardedStore::download_master(int unit, float* out) {
  const size_t u = static_cast<size_t>(unit);
  const int64_t n = table_.units()[u].padded;
  auto gather = [&](Tensor owned, void* host) {
    Tensor full = buffers_.pooled(n, owned.dtype);
    comm_->wait(comm_->all_gather(full, owned, "masters"));
    comm_->synchronize();
    ops_.runtime().download(host, full);
    buffers_.unpool(full);
  };
  if (!owned_.split()) return gather(owned_.master[u], out);
  std::vector<uint16_t> hi(static_cast<size_t>(n));
  std::vector<int16_t> lo(static_cast<size_t>(n));
  gather(owned_.hi[u], hi.data());
  gather(owned_.lo[u], lo.data());
  for (size_t i = 0; i < hi.size(); ++i) out[i] = join_master(hi[i], lo[i]);
}

void ShardedStore::prefetch(int unit) {
  if (gathered_.count(unit)) return;
  await_update(unit);
  const size_t u = static_cast<size_t>(unit);
  const UnitInfo& info = table_.units()[u];
  Tensor full = zero2_ ? whole_weights_[u] : buffers_.pooled(info.padded, ops_.compute_dtype());
  Tensor mine = owned_.split() ? owned_.hi[u] : full.slice_rows(owned_offset(unit), owned_offset(unit) + info.shard());
  if (!owned_.split() && !zero2_) ops_.runtime().convert(mine, owned_.master[u]);  // fp32 compute: a copy
  // Ordered after the compute queued so far (an event), so a pooled buffer that earlier
  // kernels still read is not overwritten; the compute stream waits for it in weights().
  in_flight_[unit] = comm_->all_gather(full, mine, info.name);
  gathered_[unit] = full;
}

Tensor ShardedStore::weights(int unit) {
  await_update(unit);
  if (unit == keep_unit_ && keep_ == Keep::kHeld) {  // gathered since its forward
    keep_ = Keep::kInUse;
    return gathered_.at(unit);
  }
  prefetch(unit);
  auto it = in_flight_.find(unit);
  if (zero2_ && it == in_flight_.end()) return gathered_.at(unit);  // gathered since the last update
  ANVIL_ENSURE(it != in_flight_.end(), kInternal, "unit ", unit, " acquired twice");
  comm_->wait(it->second);
  in_flight_.erase(it);
  return gathered_.at(unit);
}

void ShardedStore::release(int unit) {
  auto it = gathered_.find(unit);
  ANVIL_ENSURE(it != gathered_.end() && !in_flight_.count(unit), kInternal, "unit ", unit,
               " released but not acquired");
  if (zero2_) return;  // whole until the next update
  if (unit == keep_unit_) {
    keep_ = keep_ == Keep::kNone ? Keep::kHeld : Keep::kNone;
    if (keep_ == Keep::kHeld) return;  // after its forward: its backward comes next
  }
  buffers_.unpool(it->second);
  gathered_.erase(it);
}

Tensor ShardedStore::grads(int unit) {
  await_update(unit);  // the update reads the owned gradient
  auto it = full_grads_.find(unit);
  if (it != full_grads_.end()) return it->second;
  const DType dtype = unit_grad_dtype(unit);
  const UnitInfo& info = table_.units()[static_cast<size_t>(unit)];
  Tensor full = buffers_.pooled(info.padded, dtype);
  if (dtype == DType::kF32)
    ops_.runtime().zero(full);  // summed into
  else if (info.padded > info.numel)  // bf16 is overwritten (param_store.h), all but the padding
    ops_.runtime().zero(full.slice_rows(info.numel, info.padded));
  full_grads_[unit] = full;
  return full;
}

void ShardedStore::grads_ready(int unit) {
  stale_[static_cast<size_t>(unit)] = 0;
  if (defer_sync_ && !sync_) return;  // the full buffer accumulates the next micro-batch too
  auto it = full_grads_.find(unit);
  ANVIL_ENSURE(it != full_grads_.end(), kInternal, "unit ", unit, " has no gradient buffer");
  reducer_->reduce_scatter(unit, it->second, owned_.grads[static_cast<size_t>(unit)]);
  full_grads_.erase(it);
}

void ShardedStore::drop_kept_unit() {
  if (keep_ == Keep::kNone) return;
  ANVIL_ENSURE(keep_ == Keep::kHeld, kInternal, "unit ", keep_unit_, " dropped while its backward uses it");
  auto it = gathered_.find(keep_unit_);
  buffers_.unpool(it->second);
  gathered_.erase(it);
  keep_ = Keep::kNone;
}

// zero2: every unit is gathered again at its next use. Its gathers were all waited for
// (weights() follows each prefetch), so none writes the weights the update changes.
void ShardedStore::masters_changed() {
  if (!zero2_) return;
  ANVIL_ENSURE(in_flight_.empty(), kInternal, "a gather in flight across an update");
  gathered_.clear();
}

}  // namespace anvil
