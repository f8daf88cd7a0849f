// The fp32 CPU reference backend of the op set (ops/ops.h): the class; each op's reference
// implementation lives in the file named for it (linear.cpp, rmsnorm.cpp, attention.cpp, ...),
// the loops they share in cpu_math.h.
//
// Written for clarity and exactness first: every op follows the reference formulas of
// PyTorch/transformers in fp32 (reductions in double where it costs nothing), so that the
// whole model matches the float64 golden fixtures to ~1e-6. It is also what CI trains
// with, several ranks included, so the hot loops are cache-friendly and threaded.
// Determinism: work is split into fixed-size chunks that do not depend on the number of
// threads, and every reduction adds its chunk partials in a fixed order, so results are
// bit-identical across runs and machines.
// Op timing (ops.h) is the host's clock around each call (an op is done when it returns):
// `anvil bench step --op-times` on the CPU, and the list of ops a step issues, which
// tests/test_step_model.cpp holds against the step model's (plan/step_model.h).
#pragma once

#include <chrono>
#include <string>
#include <unordered_map>

#include "ops/ops.h"

namespace anvil {

class CpuOps final : public Ops {
 public:
  Device device() const override { return Device::kCPU; }
  DType compute_dtype() const override { return DType::kF32; }
  std::string name() const override { return "cpu"; }
  void synchronize() override {}
  void set_op_timing(bool on) override { op_timing_ = on; }
  OpTimes take_op_times() override;

 protected:
  void* alloc_impl(size_t bytes) override;
  void release_impl(void* p) override;
  void upload_impl(Tensor dst, const void* host_src) override;
  void download_impl(void* host_dst, Tensor src) override;
  void zero_impl(Tensor t) override;
  void convert_impl(Tensor dst, Tensor src) override;
  void copy_rows_impl(Tensor out, int64_t out_pitch, Tensor in, int64_t in_pitch, int64_t rows,
                      int64_t width) override;

  ANVIL_OP_IMPLS(, override)

  bool op_timed() const override { return op_timing_ && !in_op_; }
  void begin_op(const std::string& name) override;
  void end_op() noexcept override;

 private:
  bool op_timing_ = false, in_op_ = false;
  size_t current_ = 0;  // the row of the op being timed
  std::chrono::steady_clock::time_point start_, first_start_;
  OpTimes times_;                                // since the last take_op_times()
  std::unordered_map<std::string, size_t> row_;  // op name -> its row of times_.ops
};

}  // namespace anvil
