// The checks the op front (ops.cpp) makes of one op's tensors, the same for every backend.
//
// Every failure is a kInternal error (a caller of the op set broke its contract, not the
// user) that names the op, the tensor and what was wrong with it: missing, on another
// device, of another dtype, or of another size or shape. Checks chain, one tensor each:
//   check.compute("x", x, R * C).f32("rstd", rstd, R).grad("dw", dw, accumulate, C);
// A count of elements below zero means any size.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace anvil {

class OpChecks {
 public:
  OpChecks(const char* op, Device device, DType compute) : op_(op), device_(device), compute_(compute) {}

  const char* op() const { return op_; }

  // t is given (or empty), on the backend's device, of dtype `dtype` and (n >= 0) of n elements.
  const OpChecks& tensor(const char* name, const Tensor& t, DType dtype, int64_t n = -1) const;
  const OpChecks& compute(const char* name, const Tensor& t, int64_t n = -1) const {
    return tensor(name, t, compute_, n);
  }
  const OpChecks& f32(const char* name, const Tensor& t, int64_t n = -1) const {
    return tensor(name, t, DType::kF32, n);
  }
  const OpChecks& i32(const char* name, const Tensor& t, int64_t n = -1) const {
    return tensor(name, t, DType::kI32, n);
  }
  // F32, or a backend's compute dtype other than F32 (an elementwise op, sum_squares' x).
  const OpChecks& f32_or_compute(const char* name, const Tensor& t, int64_t n = -1) const;
  // A parameter gradient (ops.h): F32, or the compute dtype where it is written, not
  // accumulated (accumulate false).
  const OpChecks& grad(const char* name, const Tensor& t, bool accumulate, int64_t n = -1) const;
  // t, when given (data set), as tensor(); an absent t passes.
  const OpChecks& optional(const char* name, const Tensor& t, DType dtype, int64_t n = -1) const;

  // Any other condition on the shapes: when false, an error "op: what...".
  template <class... Args>
  const OpChecks& ensure(bool ok, const Args&... what) const {
    if (!ok) raise(ErrorKind::kInternal, op_, ": ", what...);
    return *this;
  }

 private:
  const char* op_;
  Device device_;
  DType compute_;
};

}  // namespace anvil
