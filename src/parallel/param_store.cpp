#include "parallel/param_store.h"

#include <cmath>
#include <optional>

#include "core/bf16.h"
#include "core/error.h"

namespace anvil {
namespace {

// Ops are issued to queue q until the end of the scope, then to the main queue again.
class OnQueue {
 public:
  OnQueue(Ops& ops, Ops::Queue q) : ops_(ops) { ops_.set_queue(q); }
  ~OnQueue() { ops_.set_queue(Ops::Queue::kMain); }
  OnQueue(const OnQueue&) = delete;
  OnQueue& operator=(const OnQueue&) = delete;

 private:
  Ops& ops_;
};

}  // namespace

ParamStore::ParamStore(const ParamTable& table, Ops& ops, Comm* comm, ParallelMode mode, DType grad_dtype)
    : table_(table), ops_(ops), comm_(comm), mode_(mode) {
  world_ = comm ? comm->world() : 1;
  rank_ = comm ? comm->rank() : 0;
  ANVIL_ENSURE(table.world() == world_, kInternal, "parameter table for world ", table.world(), ", comm of ", world_);
  ANVIL_ENSURE(grad_dtype == DType::kF32 || (grad_dtype == DType::kBF16 && world_ == 1), kInternal,
               "gradients in ", dtype_name(grad_dtype), " on ", world_, " ranks");
  const bool separate_compute = ops.compute_dtype() != DType::kF32;
  split_ = separate_compute && world_ == 1;
  int64_t max_shard = 0;
  for (size_t u = 0; u < table.units().size(); ++u) {
    const UnitInfo& info = table.units()[u];
    const int64_t n = sharded() ? info.shard() : info.padded;
    max_shard = std::max(max_shard, info.shard());
    if (split_) {
      hi_.push_back(make(n, ops.compute_dtype()));
      lo_.push_back(make(n, DType::kI16));
    } else {
      master_.push_back(make(n, DType::kF32));
    }
    grads_.push_back(make(n, table.grads_written_once(static_cast<int>(u)) ? grad_dtype : DType::kF32));
    m_.push_back(make(n, DType::kF32));
    v_.push_back(make(n, DType::kF32));
    if (split_)
      compute_.push_back(hi_.back());
    else if (!sharded())
      compute_.push_back(separate_compute ? make(n, ops.compute_dtype()) : master_.back());
  }
  updating_.assign(table.units().size(), 0);
  stale_.assign(table.units().size(), 0);
  if (sharded()) rs_tmp_ = make(max_shard, DType::kF32);
  if (sharded() && table.norm_unit() > 1) keep_unit_ = table.norm_unit() - 1;  // the last block
  scratch_ = make(1, DType::kF32);
}

void ParamStore::set_reduce_dtype(DType dtype) {
  ANVIL_ENSURE(dtype == DType::kF32 || dtype == DType::kBF16, kInternal, "gradient reduction in ", dtype_name(dtype));
  reduce_dtype_ = dtype;
  if (sharded() && dtype == DType::kBF16 && !rs_tmp16_.data) rs_tmp16_ = make(rs_tmp_.numel(), DType::kBF16);
}

ParamStore::~ParamStore() {
  for (void* p : buffers_) ops_.release(p);
  for (auto& [size, p] : pool_) ops_.release(p);
  for (auto& [u, t] : gathered_) ops_.release(t.data);
  for (auto& [u, t] : full_grads_) ops_.release(t.data);
  if (pending_unit_ >= 0) ops_.release(pending_full_.data);
}

Tensor ParamStore::make(int64_t n, DType dtype) {
  Tensor t(nullptr, dtype, {n}, ops_.device());
  t.data = ops_.alloc(t.bytes());
  buffers_.push_back(t.data);
  persistent_bytes_ += static_cast<int64_t>(t.bytes());
  return t;
}

Tensor ParamStore::pooled(int64_t n, DType dtype, bool exact) {
  Tensor t(nullptr, dtype, {n}, ops_.device());
  auto it = exact ? pool_.find(t.bytes()) : pool_.lower_bound(t.bytes());
  if (it != pool_.end()) {
    t.data = it->second;
    pool_.erase(it);
  } else {
    t.data = ops_.alloc(t.bytes());
  }
  return t;
}

void ParamStore::unpool(const Tensor& t) { pool_.emplace(t.bytes(), t.data); }

int64_t ParamStore::owned_offset(int unit) const {
  return sharded() ? rank_ * table_.units()[static_cast<size_t>(unit)].shard() : 0;
}

// The owned elements of every unit, unit by unit: written in place on the CPU, through one
// host buffer of the largest owned part on a GPU.
void ParamStore::fill(const std::vector<Tensor>& owned, const UnitReader& reader) {
  finish_optimizer();
  std::vector<float> host;
  for (size_t u = 0; u < owned.size(); ++u) {
    const int unit = static_cast<int>(u);
    const int64_t begin = owned_offset(unit), n = owned[u].numel();
    if (owned[u].device == Device::kCPU) {
      reader(unit, begin, begin + n, owned[u].ptr<float>());
      continue;
    }
    host.resize(static_cast<size_t>(std::max<int64_t>(n, static_cast<int64_t>(host.size()))));
    reader(unit, begin, begin + n, host.data());
    ops_.upload(owned[u], host.data());
    ops_.synchronize();  // the host buffer is reused by the next unit
  }
}

void ParamStore::load_optimizer_state(const UnitReader& exp_avg, const UnitReader& exp_avg_sq) {
  fill(m_, exp_avg);
  fill(v_, exp_avg_sq);
}

// Split masters (param_store.h): the fp32 values read unit by unit, split on the host.
void ParamStore::fill_split(const UnitReader& reader) {
  finish_optimizer();
  std::vector<float> host;
  std::vector<uint16_t> hi;
  std::vector<int16_t> lo;
  for (size_t u = 0; u < hi_.size(); ++u) {
    const size_t n = static_cast<size_t>(hi_[u].numel());
    host.resize(n);
    hi.resize(n);
    lo.resize(n);
    reader(static_cast<int>(u), 0, hi_[u].numel(), host.data());
    for (size_t i = 0; i < n; ++i) split_master(host[i], &hi[i], &lo[i]);
    ops_.upload(hi_[u], hi.data());
    ops_.upload(lo_[u], lo.data());
  }
}

void ParamStore::load(const UnitReader& weights) {
  if (split_)
    fill_split(weights);
  else
    fill(master_, weights);
  for (size_t u = 0; u < m_.size(); ++u) {
    ops_.zero(m_[u]);
    ops_.zero(v_[u]);
  }
  refresh_compute_copies();
  zero_grads();
}

HostUnits ParamStore::download_masters() {
  finish_optimizer();
  HostUnits out;
  for (size_t u = 0; u < m_.size(); ++u) {
    const int64_t padded = table_.units()[u].padded;
    out.emplace_back(static_cast<size_t>(padded));
    if (!sharded()) {
      read_owned(State::kMaster, static_cast<int>(u), 0, padded, out.back().data());
      continue;
    }
    Tensor full = pooled(padded, DType::kF32);
    comm_->wait(comm_->all_gather(full, master_[u], "masters"));
    comm_->synchronize();
    ops_.download(out.back().data(), full);
    unpool(full);
  }
  return out;
}

void ParamStore::read_owned(State s, int unit, int64_t begin, int64_t n, float* out) {
  finish_optimizer();
  const size_t u = static_cast<size_t>(unit);
  if (s == State::kMaster && split_) {
    std::vector<uint16_t> hi(static_cast<size_t>(n));
    std::vector<int16_t> lo(static_cast<size_t>(n));
    ops_.download(hi.data(), hi_[u].slice_rows(begin, begin + n));
    ops_.download(lo.data(), lo_[u].slice_rows(begin, begin + n));
    for (size_t i = 0; i < hi.size(); ++i) out[i] = join_master(hi[i], lo[i]);
    return;
  }
  const Tensor& t = s == State::kMaster ? master_[u] : s == State::kExpAvg ? m_[u] : v_[u];
  ops_.download(out, t.slice_rows(begin, begin + n));
}

void ParamStore::refresh_compute_copies() {
  if (split_) return;  // the high halves are the compute weights
  for (size_t u = 0; u < compute_.size(); ++u)
    if (compute_[u].data != master_[u].data) ops_.convert(compute_[u], master_[u]);
}

void ParamStore::prefetch(int unit) {
  if (!sharded() || gathered_.count(unit)) return;
  await_update(unit);
  const UnitInfo& info = table_.units()[static_cast<size_t>(unit)];
  Tensor full = pooled(info.padded, ops_.compute_dtype());
  Tensor mine = full.slice_rows(owned_offset(unit), owned_offset(unit) + info.shard());
  ops_.convert(mine, master_[static_cast<size_t>(unit)]);
  // Ordered after the compute queued so far (an event), so a pooled buffer that earlier
  // kernels still read is not overwritten; the compute stream waits for it in weights().
  in_flight_[unit] = comm_->all_gather(full, mine, info.name);
  gathered_[unit] = full;
}

Tensor ParamStore::weights(int unit) {
  await_update(unit);
  if (!sharded()) return compute_[static_cast<size_t>(unit)];
  if (unit == keep_unit_ && keep_ == Keep::kHeld) {  // gathered since its forward
    keep_ = Keep::kInUse;
    return gathered_.at(unit);
  }
  prefetch(unit);
  auto it = in_flight_.find(unit);
  ANVIL_ENSURE(it != in_flight_.end(), kInternal, "unit ", unit, " acquired twice");
  comm_->wait(it->second);
  in_flight_.erase(it);
  return gathered_.at(unit);
}

void ParamStore::release(int unit) {
  if (!sharded()) return;
  auto it = gathered_.find(unit);
  ANVIL_ENSURE(it != gathered_.end() && !in_flight_.count(unit), kInternal, "unit ", unit,
               " released but not acquired");
  if (unit == keep_unit_) {
    keep_ = keep_ == Keep::kNone ? Keep::kHeld : Keep::kNone;
    if (keep_ == Keep::kHeld) return;  // after its forward: its backward comes next
  }
  unpool(it->second);
  gathered_.erase(it);
}

bool ParamStore::overwrite_grads(int unit) {
  const size_t u = static_cast<size_t>(unit);
  return stale_[u] != 0 || grads_[u].dtype == DType::kBF16;  // bf16: never summed (above)
}

Tensor ParamStore::grads(int unit) {
  await_update(unit);  // the update reads the owned gradient
  if (!sharded()) return grads_[static_cast<size_t>(unit)];
  auto it = full_grads_.find(unit);
  if (it != full_grads_.end()) return it->second;
  Tensor full = pooled(table_.units()[static_cast<size_t>(unit)].padded, DType::kF32);
  ops_.zero(full);
  full_grads_[unit] = full;
  return full;
}

void ParamStore::finish_pending() {
  if (pending_unit_ < 0) return;
  comm_->wait(pending_work_);
  Tensor owned = grads_[static_cast<size_t>(pending_unit_)];
  if (!sharded()) {  // DDP, bf16: the reduced copy replaces the gradient
    ops_.convert(owned, pending_full_);
  } else {
    Tensor reduced = rs_tmp_.slice_rows(0, owned.numel());
    if (reduce_dtype_ == DType::kBF16) ops_.convert(reduced, rs_tmp16_.slice_rows(0, owned.numel()));
    ops_.add(owned, owned, reduced);
  }
  unpool(pending_full_);
  pending_unit_ = -1;
}

// One reduction in flight: the previous one is finished (widened or accumulated) before
// this one starts, so it overlaps the next unit's backward and the bf16 copies stay two.
void ParamStore::reduce_bf16(int unit, Tensor grad) {
  const UnitInfo& info = table_.units()[static_cast<size_t>(unit)];
  Tensor copy = pooled(info.padded, DType::kBF16);
  ops_.convert(copy, grad);
  pending_work_ = sharded() ? comm_->reduce_scatter(rs_tmp16_.slice_rows(0, info.shard()), copy, ReduceOp::kSum, info.name)
                            : comm_->all_reduce(copy, ReduceOp::kSum, info.name);
  pending_unit_ = unit;
  pending_full_ = copy;
}

void ParamStore::grads_ready(int unit) {
  stale_[static_cast<size_t>(unit)] = 0;
  if (!comm_ || world_ == 1) return;
  const UnitInfo& info = table_.units()[static_cast<size_t>(unit)];
  if (!sharded()) {
    if (!sync_) return;
    if (reduce_dtype_ == DType::kF32) {
      last_work_ = comm_->all_reduce(grads_[static_cast<size_t>(unit)], ReduceOp::kSum, info.name);
    } else {
      finish_pending();
      reduce_bf16(unit, grads_[static_cast<size_t>(unit)]);
    }
    return;
  }
  if (defer_sync_ && !sync_) return;  // the full buffer accumulates the next micro-batch too
  // One reduce-scatter in flight: the previous one is accumulated before this one reuses
  // the output buffer, so communication overlaps the next unit's backward.
  finish_pending();
  auto it = full_grads_.find(unit);
  ANVIL_ENSURE(it != full_grads_.end(), kInternal, "unit ", unit, " has no gradient buffer");
  if (reduce_dtype_ == DType::kBF16) {
    reduce_bf16(unit, it->second);
    unpool(it->second);  // read by the conversion, queued before any later use of the buffer
    full_grads_.erase(it);
    return;
  }
  pending_work_ = comm_->reduce_scatter(rs_tmp_.slice_rows(0, info.shard()), it->second, ReduceOp::kSum, info.name);
  pending_unit_ = unit;
  // The full buffer returns to the pool only once the collective that reads it is done.
  pending_full_ = it->second;
  full_grads_.erase(it);
}

void ParamStore::zero_grads() {
  finish_optimizer();
  for (const Tensor& g : grads_) ops_.zero(g);
  stale_.assign(stale_.size(), 0);
}

void ParamStore::finish_collectives() {
  if (!comm_ || world_ == 1) return;
  finish_pending();
  if (!sharded()) comm_->wait(last_work_);
}

void ParamStore::drop_kept_unit() {
  if (keep_ == Keep::kNone) return;
  ANVIL_ENSURE(keep_ == Keep::kHeld, kInternal, "unit ", keep_unit_, " dropped while its backward uses it");
  auto it = gathered_.find(keep_unit_);
  unpool(it->second);
  gathered_.erase(it);
  keep_ = Keep::kNone;
}

void ParamStore::await_update(int unit) {
  char& in_flight = updating_[static_cast<size_t>(unit)];
  if (!in_flight) return;
  ops_.wait(unit);
  in_flight = 0;
}

void ParamStore::finish_optimizer() {
  for (size_t u = 0; u < updating_.size(); ++u) await_update(static_cast<int>(u));
}

double ParamStore::optimizer_step(const OptimizerConfig& c, int64_t step, double lr) {
  drop_kept_unit();  // gathered from the weights this update replaces
  finish_optimizer();
  finish_collectives();
  double sq = grad_sum_squares(ops_, grads_, scratch_);
  if (sharded()) sq = comm_->host_sum(sq, "grad norm");
  const double norm = std::sqrt(sq);
  ANVIL_ENSURE(std::isfinite(norm), kNumerics, "gradient norm is ", norm, " at step ", step,
               ": the step was not applied");
  const AdamWHyper h = adamw_hyper(c, step, lr);
  const float scale = clip_coefficient(norm, c.max_grad_norm);
  // Event slots: unit u's update is slot u; the end of the gradients is the slot after.
  const int grads_done = static_cast<int>(m_.size());
  std::optional<OnQueue> on_side;
  if (overlap_) {
    ops_.record(grads_done);
    on_side.emplace(ops_, Ops::Queue::kSide);
    ops_.wait(grads_done);
  }
  // Units are numbered in forward order (embedding, blocks, final norm, output layer).
  for (size_t u = 0; u < m_.size(); ++u) {
    // AdamW and the compute copy in one pass (split masters: the high half is it); the owned
    // shards of FSDP across ranks are zeroed in it too (the next reduce-scatters add into them).
    if (split_)
      ops_.adamw_step_split(hi_[u], lo_[u], grads_[u], m_[u], v_[u], h, scale);
    else
      ops_.adamw_step(master_[u], grads_[u], m_[u], v_[u], h, scale, u < compute_.size() ? compute_[u] : Tensor(),
                      sharded());
    stale_[u] = !sharded();
    if (!overlap_) continue;
    ops_.record(static_cast<int>(u));
    updating_[u] = 1;
  }
  return norm;
}

}  // namespace anvil
