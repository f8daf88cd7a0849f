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
  if (!sharded_) {  // DDP, bf16: the reduced copy replaces the gradient
    ops_.convert(pending_owned_, pending_full_);
  } else {
    Tensor reduced = rs_tmp_.slice_rows(0, pending_owned_.numel());
    if (dtype_ == DType::kBF16) ops_.convert(reduced, rs_tmp16_.slice_rows(0, pending_owned_.numel()));
    ops_.add(pending_owned_, pending_owned_, reduced);
  }
  buffers_.unpool(pending_full_);
  pending_ = false;
}

// After finish_pending: the bf16 copy of grad is reduced into owned.
void GradReducer::start_bf16(int unit, Tensor grad, Tensor owned) {
  const UnitInfo& info = table_.units()[static_cast<size_t>(unit)];
  Tensor copy = buffers_.pooled(info.padded, DType::kBF16);
  ops_.convert(copy, grad);
  pending_work_ = sharded_
                      ? comm_.reduce_scatter(rs_tmp16_.slice_rows(0, info.shard()), copy, ReduceOp::kSum, info.name)
                      : comm_.all_reduce(copy, ReduceOp::kSum, info.name);
  pending_ = true;
  pending_full_ = copy;
  pending_owned_ = owned;
}

void GradReducer::all_reduce(int unit, Tensor grad) {
  if (dtype_ == DType::kF32) {
    last_work_ = comm_.all_reduce(grad, ReduceOp::kSum, table_.units()[static_cast<size_t>(unit)].name);
    return;
  }
  finish_pending();
  start_bf16(unit, grad, grad);
}

void GradReducer::reduce_scatter(int unit, Tensor full, Tensor owned) {
  finish_pending();
  if (dtype_ == DType::kBF16) {
    start_bf16(unit, full, owned);
    buffers_.unpool(full);  // read by the conversion, queued before any later use of the buffer
    return;
  }
  const UnitInfo& info = table_.units()[static_cast<size_t>(unit)];
  pending_work_ = comm_.reduce_scatter(rs_tmp_.slice_rows(0, info.shard()), full, ReduceOp::kSum, info.name);
  pending_ = true;
  pending_full_ = full;  // back to the pool once the collective that reads it is done
  pending_owned_ = owned;
}

void GradReducer::finish() {
  finish_pending();
  if (!sharded_) comm_.wait(last_work_);
}

}  // namespace anvil
