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
#pragma once

#include <string>

#include "ops/ops.h"

namespace anvil {

class CpuOps final : public Ops {
 public:
  Device device() const override { return Device::kCPU; }
  DType compute_dtype() const override { return DType::kF32; }
  std::string name() const override { return "cpu"; }
  void synchronize() override {}

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
};

}  // namespace anvil
