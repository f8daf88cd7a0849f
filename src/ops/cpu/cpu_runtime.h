// The CPU backend's runtime (ops/runtime.h): host memory, 64-byte aligned; copies (strided rows
// too) and dtype conversion with memcpy and threaded loops; no queues (an op is done when it
// returns, so record, wait and the copy slots are no-ops); no recordings. Op timing is the
// host's clock around each call: `anvil bench step --op-times` on the CPU, and the list of
// ops a step issues, which tests/test_step_model.cpp holds against the step model's
// (plan/step_model.h).
#pragma once

#include <chrono>
#include <string>
#include <unordered_map>

#include "ops/runtime.h"

namespace anvil {

class CpuRuntime final : public Runtime {
 public:
  Device device() const override { return Device::kCPU; }
  std::string name() const override { return "cpu"; }
  void synchronize() override {}
  void set_op_timing(bool on) override { op_timing_ = on; }
  OpTimes take_op_times() override;

 protected:
  ANVIL_RUNTIME_IMPLS(, override)

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
