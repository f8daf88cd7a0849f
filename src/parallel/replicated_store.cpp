// The store of whole units (parallel/replicated_store.h).
#include "parallel/replicated_store.h"

namespace anvil {

ReplicatedStore::ReplicatedStore(const ParamTable& table, Ops& ops, Comm* comm, ParallelMode mode, DType grad_dtype,
                                 Comm* replicas)
    : ParamStore(table, ops, comm, mode, grad_dtype, false, replicas) {}

void ReplicatedStore::download_master(int unit, float* out) {
  read_owned(State::kMaster, unit, 0, table_.units()[static_cast<size_t>(unit)].padded, out);
}

Tensor ReplicatedStore::weights(int unit) {
  await_update(unit);
  return owned_.compute[static_cast<size_t>(unit)];
}

Tensor ReplicatedStore::grads(int unit) {
  await_update(unit);  // the update reads the gradient
  return owned_.grads[static_cast<size_t>(unit)];
}

void ReplicatedStore::grads_ready(int unit) {
  if (experts(unit)) return grads_ready_experts(unit);
  const size_t u = static_cast<size_t>(unit);
  stale_[u] = 0;
  if (!reducer_) return;
  const StorePool::Ready r = pool_.grads_ready(unit, sync_);  // no_sync before the last micro-batch
  if (r.reduce) reducer_->reduce(unit, r, owned_.grads[u], owned_.grads[u]);
}

}  // namespace anvil
