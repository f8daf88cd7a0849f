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
// It runs on the CPU runtime (cpu_runtime.h).
#pragma once

#include <memory>

#include "ops/cpu/cpu_runtime.h"
#include "ops/ops.h"

namespace anvil {

class CpuOps final : public Ops {
 public:
  CpuOps() : Ops(std::make_unique<CpuRuntime>()) {}
  DType compute_dtype() const override { return DType::kF32; }

 protected:
  ANVIL_OP_IMPLS(, override)
};

}  // namespace anvil
