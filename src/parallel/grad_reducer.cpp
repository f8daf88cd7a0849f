// The gradient reduction across ranks (parallel/grad_reducer.h).
#include "parallel/grad_reducer.h"

#include <algorithm>

#include "core/error.h"

namespace anvil {

GradReducer::GradReducer(const ParamTable& table, Ops& ops, Comm& comm, DeviceBuffers& buffers, StorePool& pool,
                         bool sharded)
    : table_(table), ops_(ops), comm_(comm), buffers_(buffers), pool_(pool), sharded_(sharded) {
  if (!sharded) return;
  int64_t max_shard = 0;
  for (const UnitInfo& info : table.units())
    if (!info.experts) max_shard = std::max(max_shard, info.shard());  // experts units: not reduced here
  rs_tmp_ = buffers.make(max_shard, DType::kF32);
}

void GradReducer::set_dtype(DType dtype) {
  dtype_ = dtype;
  if (sharded_ && dtype == DType::kBF16 && !rs_tmp16_.data) rs_tmp16_ = buffers_.make(rs_tmp_.numel(), DType::kBF16);
}

void GradReducer::finish_pending() {
  if (!pending_) return;
  comm_.wait(pending_work_);
  if (!sharded_) {  // DDP: the reduced wire copy replaces the gradient (widened, or rounded once)
    ops_.runtime().convert(pending_owned_, pending_wire_);
  } else {
    Tensor reduced = rs_tmp_.slice_rows(0, pending_owned_.numel());
    if (dtype_ == DType::kBF16) ops_.runtime().convert(reduced, rs_tmp16_.slice_rows(0, pending_owned_.numel()));
    ops_.add(pending_owned_, pending_owned_, reduced);
  }
  pending_ = false;
}

// Reduces `wire` (the gradient itself, or a copy in the wire dtype) into owned; after
// finish_pending. The pool has its buffer back once the next reduction finishes this one.
void GradReducer::start(int unit, Tensor wire, Tensor owned) {
  const UnitInfo& info = table_.units()[static_cast<size_t>(unit)];
  if (sharded_) {
    Tensor out = (dtype_ == DType::kBF16 ? rs_tmp16_ : rs_tmp_).slice_rows(0, info.shard());
    pending_work_ = comm_.reduce_scatter(out, wire, ReduceOp::kSum, info.name);
  } else {
    pending_work_ = comm_.all_reduce(wire, ReduceOp::kSum, info.name);
  }
  pending_ = true;
  pending_wire_ = wire;
  pending_owned_ = owned;
}

void GradReducer::reduce(int unit, const StorePool::Ready& r, Tensor grad, Tensor owned) {
  ANVIL_ENSURE(r.reduce, kInternal, "unit ", unit, " reduced while its sync waits");
  if (r.finish_previous) finish_pending();
  if (r.wire == StorePool::kNone) {  // DDP, in place: several in flight
    last_work_ = comm_.all_reduce(grad, ReduceOp::kSum, table_.units()[static_cast<size_t>(unit)].name);
    return;
  }
  if (r.wire == r.full) return start(unit, grad, owned);
  // A copy in the wire dtype: the conversion reads the gradient, queued before any later use
  // of its buffer.
  Tensor copy = buffers_.pooled(r.wire, pool_.size(r.wire), grad.numel(), dtype_);
  ops_.runtime().convert(copy, grad);
  start(unit, copy, owned);
}

void GradReducer::finish() {
  finish_pending();
  pool_.finish();
  if (!sharded_) comm_.wait(last_work_);
}

}  // namespace anvil
