// The checks of one op's tensors (op_checks.h).
#include "ops/op_checks.h"

namespace anvil {
namespace {

const char* device_label(Device d) { return d == Device::kCUDA ? "the GPU" : "the CPU"; }

}  // namespace

const OpChecks& OpChecks::tensor(const char* name, const Tensor& t, DType dtype, int64_t n) const {
  ensure(t.data != nullptr || t.numel() == 0, "tensor ", name, " is missing");
  ensure(t.device == device_, "tensor ", name, " is on ", device_label(t.device), ", expected ",
         device_label(device_));
  ensure(t.dtype == dtype, "tensor ", name, " is ", dtype_name(t.dtype), ", expected ", dtype_name(dtype));
  return ensure(n < 0 || t.numel() == n, "tensor ", name, " has shape ", t.shape.str(), " (", t.numel(),
                " elements), expected ", n, " elements");
}

const OpChecks& OpChecks::f32_or_compute(const char* name, const Tensor& t, int64_t n) const {
  return tensor(name, t, t.dtype == compute_ ? compute_ : DType::kF32, n);
}

const OpChecks& OpChecks::grad(const char* name, const Tensor& t, bool accumulate, int64_t n) const {
  f32_or_compute(name, t, n);
  return ensure(t.dtype == DType::kF32 || !accumulate, "the ", dtype_name(t.dtype), " gradient ", name,
                " can be written, not accumulated");
}

const OpChecks& OpChecks::optional(const char* name, const Tensor& t, DType dtype, int64_t n) const {
  return t.data ? tensor(name, t, dtype, n) : *this;
}

}  // namespace anvil
