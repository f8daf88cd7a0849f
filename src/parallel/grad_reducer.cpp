// The gradient reduction across ranks (parallel/grad_reducer.h).
#include "parallel/grad_reducer.h"

#include <algorithm>

#include "core/error.h"

namespace anvil {

GradReducer::GradReducer(const ParamTable& table, Ops& ops, Comm& comm, DeviceBuffers& buffers, bool sharded)
    : table_(table), ops_(ops), comm_(comm), buffers_(buffers), sharded_(sharded) {
  if (!sharded) return;
  int64_t max_shard = 0;
  for (const UnitInfo& info : table.units()) max_shard = std::max(max_shard, info.shard());
  rs_tmp_ = buffers.make(max_shard, DType::kF32);
}

GradReducer::~GradReducer() {
  if (pending_) buffers_.unpool(pending_full_);
}

void GradReducer::set_dtype(DType dtype) {
  dtype_ = dtype;
  if (sharded_ && dtype == DType::kBF16 && !rs_tmp16_.data) rs_tmp16_ = buffers_.make(rs_tmp_.numel(), DType::kBF16);
}

void GradReducer::finish_pending() {
  if (!pending_) return;
  comm_.wait(pending_work_);
  if (!sharded_) {  // DDP: the reduced wire copy replaces the gradient (widened, or rounded once)
    ops_.runtime().convert(pending_owned_, pending_full_);
  } else {
    Tensor reduced = rs_tmp_.slice_rows(0, pending_owned_.numel());
    if (dtype_ == DType::kBF16) ops_.runtime().convert(reduced, rs_tmp16_.slice_rows(0, pending_owned_.numel()));
    ops_.add(pending_owned_, pending_owned_, reduced);
  }
  buffers_.unpool(pending_full_);
  pending_ = false;
}

// Reduces `wire` (the gradient itself, or a copy in the wire dtype) into owned; after
// finish_pending. A copy returns to the pool once the collective that reads it is done.
void GradReducer::start(int unit, Tensor wire, Tensor owned) {
  const UnitInfo& info = table_.units()[static_cast<size_t>(unit)];
  if (sharded_) {
    Tensor out = (dtype_ == DType::kBF16 ? rs_tmp16_ : rs_tmp_).slice_rows(0, info.shard());
    pending_work_ = comm_.reduce_scatter(out, wire, ReduceOp::kSum, info.name);
  } else {
    pending_work_ = comm_.all_reduce(wire, ReduceOp::kSum, info.name);
  }
  pending_ = true;
  pending_full_ = wire;
  pending_owned_ = owned;
}

// The gradient in the wire dtype: a pooled copy (the caller's buffer is read by the
// conversion, queued before any later use of it).
Tensor GradReducer::wire_copy(int unit, Tensor grad) {
  Tensor copy = buffers_.pooled(table_.units()[static_cast<size_t>(unit)].padded, dtype_);
  ops_.runtime().convert(copy, grad);
  return copy;
}

void GradReducer::all_reduce(int unit, Tensor grad) {
  if (grad.dtype == dtype_) {  // in place, several in flight
    last_work_ = comm_.all_reduce(grad, ReduceOp::kSum, table_.units()[static_cast<size_t>(unit)].name);
    return;
  }
  finish_pending();
  start(unit, wire_copy(unit, grad), grad);
}

void GradReducer::reduce_scatter(int unit, Tensor full, Tensor owned) {
  finish_pending();
  if (full.dtype == dtype_) return start(unit, full, owned);
  Tensor copy = wire_copy(unit, full);
  buffers_.unpool(full);
  start(unit, copy, owned);
}

void GradReducer::finish() {
  finish_pending();
  if (!sharded_) comm_.wait(last_work_);
}

}  // namespace anvil
