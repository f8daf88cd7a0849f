// The parameter state of every unit on one rank: fp32 master weights, fp32 gradients,
// AdamW m and v, and the compute-dtype weight copies the model reads.
//
// One layout serves every mode: a unit is a flat buffer padded to world * align elements;
// this rank owns [rank * shard, (rank + 1) * shard) of it. In a single process the shard is
// the whole unit. Gradients are kept whole-unit (the model accumulates into them); the
// optimizer runs on the owned shard. On the CPU the compute weights are the masters
// themselves (F32); elsewhere they are converted copies refreshed after each step.
#pragma once

#include <cstdint>
#include <vector>

#include "model/params.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "optim/adamw.h"

namespace anvil {

class ParamStore final : public UnitSource {
 public:
  ParamStore(const ParamTable& table, Ops& ops);
  ~ParamStore() override;
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  void load(const HostUnits& units);  // masters from host, m = v = 0, grads = 0
  HostUnits download_masters() const;

  // UnitSource
  Tensor weights(int unit) override;
  void release(int) override {}
  Tensor grads(int unit) override { return grads_[static_cast<size_t>(unit)]; }
  void grads_ready(int) override {}

  void zero_grads();
  // Clips by the global norm and takes one AdamW step; returns the pre-clip norm.
  double optimizer_step(const OptimizerConfig& c, int64_t step, double lr);

  const std::vector<Tensor>& masters() const { return master_; }
  const std::vector<Tensor>& exp_avg() const { return m_; }
  const std::vector<Tensor>& exp_avg_sq() const { return v_; }
  int64_t bytes() const { return bytes_; }

 private:
  Tensor make(int64_t n, DType dtype);
  void refresh_compute_copies();

  const ParamTable& table_;
  Ops& ops_;
  std::vector<void*> buffers_;
  int64_t bytes_ = 0;
  std::vector<Tensor> master_, grads_, m_, v_, compute_;
  Tensor scratch_;
};

}  // namespace anvil
