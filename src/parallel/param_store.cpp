#include "parallel/param_store.h"

#include <cmath>

#include "core/error.h"

namespace anvil {

ParamStore::ParamStore(const ParamTable& table, Ops& ops) : table_(table), ops_(ops) {
  ANVIL_ENSURE(table.world() == 1, kInternal, "ParamStore: one process holds the whole model");
  const bool separate_compute = ops.compute_dtype() != DType::kF32;
  for (auto& u : table.units()) {
    master_.push_back(make(u.padded, DType::kF32));
    grads_.push_back(make(u.padded, DType::kF32));
    m_.push_back(make(u.padded, DType::kF32));
    v_.push_back(make(u.padded, DType::kF32));
    compute_.push_back(separate_compute ? make(u.padded, ops.compute_dtype()) : master_.back());
  }
  scratch_ = make(1, DType::kF32);
}

ParamStore::~ParamStore() {
  for (void* p : buffers_) ops_.release(p);
}

Tensor ParamStore::make(int64_t n, DType dtype) {
  Tensor t(nullptr, dtype, {n}, ops_.device());
  t.data = ops_.alloc(t.bytes());
  buffers_.push_back(t.data);
  bytes_ += static_cast<int64_t>(t.bytes());
  return t;
}

void ParamStore::load(const HostUnits& units) {
  ANVIL_ASSERT(units.size() == master_.size());
  for (size_t u = 0; u < units.size(); ++u) {
    ANVIL_ASSERT(static_cast<int64_t>(units[u].size()) == master_[u].numel());
    ops_.upload(master_[u], units[u].data());
    ops_.zero(m_[u]);
    ops_.zero(v_[u]);
  }
  zero_grads();
  refresh_compute_copies();
}

HostUnits ParamStore::download_masters() const {
  HostUnits out;
  for (const Tensor& t : master_) {
    out.emplace_back(static_cast<size_t>(t.numel()));
    ops_.download(out.back().data(), t);
  }
  return out;
}

Tensor ParamStore::weights(int unit) { return compute_[static_cast<size_t>(unit)]; }

void ParamStore::zero_grads() {
  for (const Tensor& g : grads_) ops_.zero(g);
}

void ParamStore::refresh_compute_copies() {
  for (size_t u = 0; u < master_.size(); ++u)
    if (compute_[u].data != master_[u].data) ops_.convert(compute_[u], master_[u]);
}

double ParamStore::optimizer_step(const OptimizerConfig& c, int64_t step, double lr) {
  const double norm = std::sqrt(grad_sum_squares(ops_, grads_, scratch_));
  ANVIL_ENSURE(std::isfinite(norm), kNumerics, "gradient norm is ", norm, " at step ", step,
               ": the step was not applied");
  adamw_update(ops_, master_, grads_, m_, v_, c, step, lr, clip_coefficient(norm, c.max_grad_norm));
  refresh_compute_copies();
  return norm;
}

}  // namespace anvil
