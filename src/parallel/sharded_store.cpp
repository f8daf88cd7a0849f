// The store of sharded units (parallel/sharded_store.h).
#include "parallel/sharded_store.h"

#include <vector>

#include "core/bf16.h"
#include "core/error.h"

namespace anvil {

ShardedStore::ShardedStore(const ParamTable& table, Ops& ops, Comm& comm, ParallelMode mode, DType grad_dtype,
                           Comm* replicas)
    : ParamStore(table, ops, &comm, mode, grad_dtype, true, replicas), zero2_(mode == ParallelMode::kZero2) {}

// The owned parts of every rank, gathered whole: fp32 masters, or both halves of split ones
// (joined on the host).
void ShardedStore::download_master(int unit, float* out) {
  const size_t u = static_cast<size_t>(unit);
  if (experts(unit)) return read_owned(State::kMaster, unit, 0, table_.units()[u].padded, out);
  const int64_t n = table_.units()[u].padded;
  auto gather = [&](Tensor owned, void* host) {
    const int64_t bytes = n * static_cast<int64_t>(dtype_size(owned.dtype));
    const int buffer = pool_.take(bytes);
    Tensor full = buffers_.pooled(buffer, pool_.size(buffer), n, owned.dtype);
    comm_->wait(comm_->all_gather(full, owned, "masters"));
    comm_->synchronize();
    ops_.runtime().download(host, full);
    pool_.give(buffer);
  };
  if (!owned_.split()) return gather(owned_.master[u], out);
  std::vector<uint16_t> hi(static_cast<size_t>(n));
  std::vector<int16_t> lo(static_cast<size_t>(n));
  gather(owned_.hi[u], hi.data());
  gather(owned_.lo[u], lo.data());
  for (size_t i = 0; i < hi.size(); ++i) out[i] = join_master(hi[i], lo[i]);
}

Tensor ShardedStore::gathered(int unit, int buffer) {
  return buffers_.pooled(buffer, pool_.size(buffer), table_.units()[static_cast<size_t>(unit)].padded,
                         ops_.compute_dtype());
}

void ShardedStore::start_gather(int unit, Tensor full) {
  await_update(unit);
  const size_t u = static_cast<size_t>(unit);
  const UnitInfo& info = table_.units()[u];
  Tensor mine = owned_.split() ? owned_.hi[u] : full.slice_rows(owned_offset(unit), owned_offset(unit) + info.shard());
  if (!owned_.split() && !zero2_) ops_.runtime().convert(mine, owned_.master[u]);  // fp32 compute: a copy
  // Ordered after the compute queued so far (an event), so a pooled buffer that earlier
  // kernels still read is not overwritten; the compute stream waits for it in weights().
  in_flight_[unit] = comm_->all_gather(full, mine, info.name);
}

void ShardedStore::prefetch(int unit) {
  if (experts(unit)) return;
  if (zero2_) {  // in place, once after each update
    if (current_.insert(unit).second) start_gather(unit, whole_weights_[static_cast<size_t>(unit)]);
    return;
  }
  const StorePool::Use g = pool_.prefetch(unit);
  if (g.fresh) start_gather(unit, gathered(unit, g.buffer));
}

Tensor ShardedStore::weights(int unit) {
  if (experts(unit)) return expert_weights(unit);
  await_update(unit);
  Tensor full;
  if (zero2_) {
    prefetch(unit);
    full = whole_weights_[static_cast<size_t>(unit)];
  } else {
    const StorePool::Use g = pool_.weights(unit);  // kept since its forward, prefetched, or fresh
    full = gathered(unit, g.buffer);
    if (g.kept) return full;
    if (g.fresh) start_gather(unit, full);
  }
  auto it = in_flight_.find(unit);
  if (it == in_flight_.end()) {
    ANVIL_ENSURE(zero2_, kInternal, "unit ", unit, " acquired twice");
    return full;  // zero2: gathered since the last update
  }
  comm_->wait(it->second);
  in_flight_.erase(it);
  return full;
}

void ShardedStore::release(int unit) {
  if (experts(unit)) return;
  ANVIL_ENSURE(!in_flight_.count(unit) && (!zero2_ || current_.count(unit)), kInternal, "unit ", unit,
               " released but not acquired");
  pool_.release(unit);  // zero2: whole until the next update
}

Tensor ShardedStore::grads(int unit) {
  await_update(unit);  // the update reads the owned gradient
  if (experts(unit)) return owned_.grads[static_cast<size_t>(unit)];
  const StorePool::Use g = pool_.grads(unit);
  const DType dtype = unit_grad_dtype(unit);
  const UnitInfo& info = table_.units()[static_cast<size_t>(unit)];
  Tensor full = buffers_.pooled(g.buffer, pool_.size(g.buffer), info.padded, dtype);
  if (!g.fresh) return full;
  if (dtype == DType::kF32)
    ops_.runtime().zero(full);  // summed into
  else if (info.padded > info.numel)  // bf16 is overwritten (param_store.h), all but the padding
    ops_.runtime().zero(full.slice_rows(info.numel, info.padded));
  return full;
}

void ShardedStore::grads_ready(int unit) {
  if (experts(unit)) return grads_ready_experts(unit);
  const size_t u = static_cast<size_t>(unit);
  stale_[u] = 0;
  const StorePool::Ready r = pool_.grads_ready(unit, sync_);
  if (!r.reduce) return;  // deferred: the full buffer accumulates the next micro-batch too
  const Tensor full = buffers_.pooled(r.full, pool_.size(r.full), table_.units()[u].padded, unit_grad_dtype(unit));
  reducer_->reduce(unit, r, full, owned_.grads[u]);
}

// zero2: every unit is gathered again at its next use. Its gathers were all waited for
// (weights() follows each prefetch), so none writes the weights the update changes.
void ShardedStore::masters_changed() {
  if (!zero2_) return;
  ANVIL_ENSURE(in_flight_.empty(), kInternal, "a gather in flight across an update");
  current_.clear();
}

}  // namespace anvil
