#include "parallel/param_store.h"

#include <cmath>
#include <optional>

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

ParallelMode parse_parallel_mode(const std::string& name) {
  if (name == "ddp") return ParallelMode::kDdp;
  if (name == "fsdp") return ParallelMode::kFsdp;
  raise(ErrorKind::kUsage, "unknown mode '", name, "' (ddp or fsdp)");
}

ParamStore::ParamStore(const ParamTable& table, Ops& ops, Comm* comm, ParallelMode mode)
    : table_(table), ops_(ops), comm_(comm), mode_(mode) {
  world_ = comm ? comm->world() : 1;
  rank_ = comm ? comm->rank() : 0;
  ANVIL_ENSURE(table.world() == world_, kInternal, "parameter table for world ", table.world(), ", comm of ", world_);
  const bool separate_compute = ops.compute_dtype() != DType::kF32;
  int64_t max_shard = 0;
  for (auto& u : table.units()) {
    const int64_t n = sharded() ? u.shard() : u.padded;
    max_shard = std::max(max_shard, u.shard());
    master_.push_back(make(n, DType::kF32));
    grads_.push_back(make(n, DType::kF32));
    m_.push_back(make(n, DType::kF32));
    v_.push_back(make(n, DType::kF32));
    if (mode_ == ParallelMode::kDdp) compute_.push_back(separate_compute ? make(n, ops.compute_dtype()) : master_.back());
  }
  updating_.assign(table.units().size(), 0);
  if (sharded()) rs_tmp_ = make(max_shard, DType::kF32);
  scratch_ = make(1, DType::kF32);
}

ParamStore::~ParamStore() {
  for (void* p : buffers_) ops_.release(p);
  for (auto& [size, p] : pool_) ops_.release(p);
  for (auto& [u, t] : gathered_) ops_.release(t.data);
  for (auto& [u, t] : full_grads_) ops_.release(t.data);
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

void ParamStore::load(const HostUnits& units) {
  ANVIL_ASSERT(units.size() == master_.size());
  finish_optimizer();
  for (size_t u = 0; u < units.size(); ++u) {
    ANVIL_ASSERT(static_cast<int64_t>(units[u].size()) == table_.units()[u].padded);
    ops_.upload(master_[u], units[u].data() + owned_offset(static_cast<int>(u)));
    ops_.zero(m_[u]);
    ops_.zero(v_[u]);
  }
  refresh_compute_copies();
  zero_grads();
}

void ParamStore::load_optimizer_state(int unit, const float* exp_avg, const float* exp_avg_sq) {
  const size_t u = static_cast<size_t>(unit);
  ANVIL_ASSERT(u < m_.size());
  finish_optimizer();
  ops_.upload(m_[u], exp_avg);
  ops_.upload(v_[u], exp_avg_sq);
}

HostUnits ParamStore::download_masters() {
  finish_optimizer();
  HostUnits out;
  for (size_t u = 0; u < master_.size(); ++u) {
    const int64_t padded = table_.units()[u].padded;
    out.emplace_back(static_cast<size_t>(padded));
    if (!sharded()) {
      ops_.download(out.back().data(), master_[u]);
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

void ParamStore::refresh_compute_copies() {
  for (size_t u = 0; u < compute_.size(); ++u)
    if (compute_[u].data != master_[u].data) ops_.convert(compute_[u], master_[u]);
}

void ParamStore::prefetch(int unit) {
  if (mode_ == ParallelMode::kDdp || gathered_.count(unit)) return;
  if (!sharded()) return copy_ahead(unit);
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

void ParamStore::copy_ahead(int unit) {
  if (ops_.compute_dtype() == DType::kF32) return;  // the masters are the compute weights
  const size_t u = static_cast<size_t>(unit);
  // A buffer of this unit's size: at most two of the block size live (the one in use and
  // the next) and one of each other size (sys/plan.cpp counts them so).
  Tensor full = pooled(table_.units()[u].padded, ops_.compute_dtype(), true);
  const int main_point = copy_slot(-1);
  ops_.record(main_point);  // the pooled buffer's last readers are queued before this point
  OnQueue on_copy(ops_, Ops::Queue::kCopy);
  ops_.wait(main_point);
  if (updating_[u]) ops_.wait(unit);  // this unit's update, on the side queue
  ops_.convert(full, master_[u]);
  ops_.record(copy_slot(unit));
  gathered_[unit] = full;
  copying_.insert(unit);
}

Tensor ParamStore::weights(int unit) {
  await_update(unit);
  if (mode_ == ParallelMode::kDdp) return compute_[static_cast<size_t>(unit)];
  if (!sharded() && ops_.compute_dtype() == DType::kF32) return master_[static_cast<size_t>(unit)];
  if (!sharded()) {  // one GPU: the compute copy made ahead, or made now
    if (copying_.erase(unit)) {
      ops_.wait(copy_slot(unit));
      return gathered_.at(unit);
    }
    ANVIL_ENSURE(!gathered_.count(unit), kInternal, "unit ", unit, " acquired twice");
    Tensor full = pooled(table_.units()[static_cast<size_t>(unit)].padded, ops_.compute_dtype(), true);
    ops_.convert(full, master_[static_cast<size_t>(unit)]);
    gathered_[unit] = full;
    return full;
  }
  prefetch(unit);
  auto it = in_flight_.find(unit);
  ANVIL_ENSURE(it != in_flight_.end(), kInternal, "unit ", unit, " acquired twice");
  comm_->wait(it->second);
  in_flight_.erase(it);
  return gathered_.at(unit);
}

void ParamStore::release(int unit) {
  if (mode_ == ParallelMode::kDdp || (!sharded() && ops_.compute_dtype() == DType::kF32)) return;
  auto it = gathered_.find(unit);
  ANVIL_ENSURE(it != gathered_.end() && !in_flight_.count(unit) && !copying_.count(unit), kInternal, "unit ", unit,
               " released but not acquired");
  unpool(it->second);
  gathered_.erase(it);
}

Tensor ParamStore::grads(int unit) {
  await_update(unit);  // the owned gradient is zeroed by the update
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
  ops_.add(owned, owned, rs_tmp_.slice_rows(0, owned.numel()));
  unpool(pending_full_);
  pending_unit_ = -1;
}

void ParamStore::grads_ready(int unit) {
  if (!comm_ || world_ == 1) return;
  const UnitInfo& info = table_.units()[static_cast<size_t>(unit)];
  if (!sharded()) {
    if (sync_) last_work_ = comm_->all_reduce(grads_[static_cast<size_t>(unit)], ReduceOp::kSum, info.name);
    return;
  }
  if (defer_sync_ && !sync_) return;  // the full buffer accumulates the next micro-batch too
  // One reduce-scatter in flight: the previous one is accumulated before this one reuses
  // the output buffer, so communication overlaps the next unit's backward.
  finish_pending();
  auto it = full_grads_.find(unit);
  ANVIL_ENSURE(it != full_grads_.end(), kInternal, "unit ", unit, " has no gradient buffer");
  pending_work_ = comm_->reduce_scatter(rs_tmp_.slice_rows(0, info.shard()), it->second, ReduceOp::kSum, info.name);
  pending_unit_ = unit;
  // The full buffer returns to the pool only once the collective that reads it is done.
  pending_full_ = it->second;
  full_grads_.erase(it);
}

void ParamStore::zero_grads() {
  finish_optimizer();
  for (const Tensor& g : grads_) ops_.zero(g);
}

void ParamStore::finish_collectives() {
  if (!comm_ || world_ == 1) return;
  finish_pending();
  if (!sharded()) comm_->wait(last_work_);
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
  const int grads_done = static_cast<int>(master_.size());
  std::optional<OnQueue> on_side;
  if (overlap_) {
    ops_.record(grads_done);
    on_side.emplace(ops_, Ops::Queue::kSide);
    ops_.wait(grads_done);
  }
  // Units are numbered in forward order (embedding, blocks, final norm, output layer).
  for (size_t u = 0; u < master_.size(); ++u) {
    // AdamW, the DDP compute copy and the gradient's zeroing, in one pass.
    ops_.adamw_step(master_[u], grads_[u], m_[u], v_[u], h, scale, u < compute_.size() ? compute_[u] : Tensor(), true);
    if (!overlap_) continue;
    ops_.record(static_cast<int>(u));
    updating_[u] = 1;
  }
  return norm;
}

}  // namespace anvil
