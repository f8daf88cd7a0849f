// What both stores share (parallel/param_store.h): the owned buffers' layout and
// allocation, loading and reading them, the step's gradients completed for the optimizer; the
// store factory.
#include "parallel/param_store.h"

#include <algorithm>

#include "core/bf16.h"
#include "core/error.h"
#include "parallel/replicated_store.h"
#include "parallel/sharded_store.h"

namespace anvil {

ParamStore::ParamStore(const ParamTable& table, Ops& ops, Comm* comm, ParallelMode mode, DType grad_dtype,
                       bool sharded, Comm* replicas)
    : table_(table),
      ops_(ops),
      comm_(comm),
      grad_dtype_(grad_dtype),
      buffers_(ops.runtime()),
      pool_(table, mode, ops.compute_dtype(), grad_dtype),
      owned_(allocate(grad_dtype, sharded, sharded && mode == ParallelMode::kZero2)),
      reducer_(comm && comm->world() > 1
                   ? std::make_unique<GradReducer>(table, ops, *comm, buffers_, pool_, sharded)
                   : nullptr),
      replicas_(replicas),
      mode_(mode),
      sharded_(sharded) {
  stale_.assign(table.units().size(), 0);
}

ParamStore::~ParamStore() = default;

// Per unit: the masters (split on a bf16 device: core/bf16.h; whole_weights: the owned
// part is this rank's slice of the whole compute weights), the gradient, m, v, then the
// compute weights (not sharded: the high half, or on the CPU the master itself).
OwnedUnits ParamStore::allocate(DType grad_dtype, bool sharded, bool whole_weights) {
  const int world = comm_ ? comm_->world() : 1;
  ANVIL_ENSURE(table_.world() == world, kInternal, "parameter table for world ", table_.world(), ", comm of ", world);
  ANVIL_ENSURE(grad_dtype == DType::kF32 || (grad_dtype == DType::kBF16 && ops_.compute_dtype() == DType::kBF16),
               kInternal, "gradients in ", dtype_name(grad_dtype), " with ", dtype_name(ops_.compute_dtype()),
               " compute");
  const bool split = ops_.compute_dtype() != DType::kF32;
  OwnedUnits o;
  for (size_t u = 0; u < table_.units().size(); ++u) {
    const UnitInfo& info = table_.units()[u];
    const bool shard = sharded && !info.experts;  // an experts unit is held whole (above)
    const int64_t n = shard ? info.shard() : info.padded;
    Tensor compute_part;  // of the whole weights (below), else its own buffer
    if (whole_weights)
      whole_weights_.push_back(info.experts ? Tensor() : buffers_.make(info.padded, ops_.compute_dtype()));
    if (whole_weights && !info.experts) {
      const int64_t at = comm_->rank() * n;
      compute_part = whole_weights_.back().slice_rows(at, at + n);
    } else {
      compute_part = buffers_.make(n, split ? ops_.compute_dtype() : DType::kF32);
    }
    if (split) {
      o.hi.push_back(compute_part);
      o.lo.push_back(buffers_.make(n, DType::kI16));
    } else {
      o.master.push_back(compute_part);
    }
    o.grads.push_back(buffers_.make(n, shard ? DType::kF32 : unit_grad_dtype(static_cast<int>(u))));
    o.m.push_back(buffers_.make(n, DType::kF32));
    o.v.push_back(buffers_.make(n, DType::kF32));
    if (!sharded) o.compute.push_back(split ? o.hi.back() : o.master.back());
  }
  return o;
}

void ParamStore::set_reduce_dtype(DType dtype) {
  ANVIL_ENSURE(dtype == DType::kF32 || dtype == DType::kBF16, kInternal, "gradient reduction in ", dtype_name(dtype));
  pool_.set_wire(dtype);
  if (reducer_) reducer_->set_dtype(dtype);
}

int64_t ParamStore::owned_offset(int unit) const {
  return sharded_ && !experts(unit) ? comm_->rank() * table_.units()[static_cast<size_t>(unit)].shard() : 0;
}

void ParamStore::grads_ready_experts(int unit) {
  stale_[static_cast<size_t>(unit)] = 0;
  if (replicas_ && sync_)
    expert_works_.push_back(replicas_->all_reduce(owned_.grads[static_cast<size_t>(unit)], ReduceOp::kSum,
                                                  table_.units()[static_cast<size_t>(unit)].name));
}

// The owned elements of every unit, unit by unit: written in place on the CPU, through one
// host buffer of the largest owned part on a GPU.
void ParamStore::fill(const std::vector<Tensor>& owned, const UnitReader& reader) {
  finish_updates();
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
    ops_.runtime().upload(owned[u], host.data());
    ops_.runtime().synchronize();  // the host buffer is reused by the next unit
  }
}

void ParamStore::load_optimizer_state(const UnitReader& exp_avg, const UnitReader& exp_avg_sq) {
  fill(owned_.m, exp_avg);
  fill(owned_.v, exp_avg_sq);
}

// Split masters (core/bf16.h): the owned fp32 values read unit by unit, split on the host.
void ParamStore::fill_split(const UnitReader& reader) {
  finish_updates();
  std::vector<float> host;
  std::vector<uint16_t> hi;
  std::vector<int16_t> lo;
  for (size_t u = 0; u < owned_.hi.size(); ++u) {
    const int unit = static_cast<int>(u);
    const size_t n = static_cast<size_t>(owned_.hi[u].numel());
    host.resize(n);
    hi.resize(n);
    lo.resize(n);
    reader(unit, owned_offset(unit), owned_offset(unit) + owned_.hi[u].numel(), host.data());
    for (size_t i = 0; i < n; ++i) split_master(host[i], &hi[i], &lo[i]);
    ops_.runtime().upload(owned_.hi[u], hi.data());
    ops_.runtime().upload(owned_.lo[u], lo.data());
  }
}

void ParamStore::load(const UnitReader& weights) {
  if (owned_.split())
    fill_split(weights);
  else
    fill(owned_.master, weights);
  for (size_t u = 0; u < owned_.m.size(); ++u) {
    ops_.runtime().zero(owned_.m[u]);
    ops_.runtime().zero(owned_.v[u]);
  }
  zero_grads();
  masters_changed();
}

void ParamStore::read_owned(State s, int unit, int64_t begin, int64_t n, float* out) {
  finish_updates();
  const size_t u = static_cast<size_t>(unit);
  if (s == State::kMaster && owned_.split()) {
    std::vector<uint16_t> hi(static_cast<size_t>(n));
    std::vector<int16_t> lo(static_cast<size_t>(n));
    ops_.runtime().download(hi.data(), owned_.hi[u].slice_rows(begin, begin + n));
    ops_.runtime().download(lo.data(), owned_.lo[u].slice_rows(begin, begin + n));
    for (size_t i = 0; i < hi.size(); ++i) out[i] = join_master(hi[i], lo[i]);
    return;
  }
  const Tensor& t = s == State::kMaster ? owned_.master[u] : s == State::kExpAvg ? owned_.m[u] : owned_.v[u];
  ops_.runtime().download(out, t.slice_rows(begin, begin + n));
}

std::vector<Tensor> ParamStore::owned_tensors(State s, int unit) {
  finish_updates();
  const size_t u = static_cast<size_t>(unit);
  if (s == State::kMaster && owned_.split()) return {owned_.hi[u], owned_.lo[u]};
  return {s == State::kMaster ? owned_.master[u] : s == State::kExpAvg ? owned_.m[u] : owned_.v[u]};
}

HostUnits ParamStore::download_masters() {
  finish_updates();
  HostUnits out;
  for (size_t u = 0; u < table_.units().size(); ++u) {
    out.emplace_back(static_cast<size_t>(table_.units()[u].padded));
    download_master(static_cast<int>(u), out.back().data());
  }
  return out;
}

bool ParamStore::overwrite_grads(int unit) {
  return stale_[static_cast<size_t>(unit)] != 0 || unit_grad_dtype(unit) == DType::kBF16;  // bf16: never summed
}

void ParamStore::zero_grads() {
  finish_updates();
  for (const Tensor& g : owned_.grads) ops_.runtime().zero(g);
  stale_.assign(stale_.size(), 0);
}

void ParamStore::finish_collectives() {
  if (reducer_) reducer_->finish();
  for (CommWork w : expert_works_) replicas_->wait(w);
  expert_works_.clear();
}

void ParamStore::complete_grads() {
  drop_kept_unit();  // gathered from the weights the update replaces
  finish_updates();
  finish_collectives();
  // The norm's download would wait for the gradients' collectives without a bound; the
  // comm's host wait names one that does not finish within the comm timeout (comm/comm.h).
  if (comm_) comm_->synchronize();
  if (replicas_) replicas_->synchronize();
}

std::unique_ptr<ParamStore> make_param_store(const ParamTable& table, Ops& ops, Comm* comm, ParallelMode mode,
                                             DType grad_dtype, Comm* replicas) {
  if (shards_state(mode) && comm && comm->world() > 1)
    return std::make_unique<ShardedStore>(table, ops, *comm, mode, grad_dtype, replicas);
  return std::make_unique<ReplicatedStore>(table, ops, comm, mode, grad_dtype, replicas);
}

}  // namespace anvil
