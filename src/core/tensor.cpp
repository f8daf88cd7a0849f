// Element types (sizes, names) and tensor views (see tensor.h).
#include "core/tensor.h"

#include "core/enum_names.h"

namespace anvil {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kBF16: case DType::kF16: case DType::kI16: return 2;
    case DType::kF64: case DType::kI64: return 8;
    case DType::kU8: case DType::kBool: return 1;
  }
  return 0;
}

namespace {
constexpr EnumName<DType> kDTypeNames[] = {{DType::kF32, "F32"}, {DType::kBF16, "BF16"}, {DType::kF16, "F16"},
                                           {DType::kF64, "F64"}, {DType::kI64, "I64"},   {DType::kI32, "I32"},
                                           {DType::kU8, "U8"},   {DType::kBool, "BOOL"}, {DType::kI16, "I16"}};
}  // namespace

const char* dtype_name(DType dtype) { return enum_name(kDTypeNames, dtype); }

bool dtype_from_name(const std::string& name, DType* out) { return enum_from_name(kDTypeNames, name, out); }

Shape::Shape(std::initializer_list<int64_t> d) {
  ANVIL_ENSURE(d.size() <= kMaxDims, kInternal, "tensor rank ", d.size(), " exceeds ", kMaxDims);
  for (int64_t v : d) dims[static_cast<size_t>(ndim++)] = v;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[static_cast<size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim != o.ndim) return false;
  for (int i = 0; i < ndim; ++i)
    if (dims[static_cast<size_t>(i)] != o.dims[static_cast<size_t>(i)]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(dims[static_cast<size_t>(i)]);
  return s + "]";
}

int64_t Tensor::rows() const {
  int64_t n = 1;
  for (int i = 0; i + 1 < shape.ndim; ++i) n *= shape[i];
  return n;
}

Tensor Tensor::reshape(Shape s) const {
  ANVIL_ENSURE(s.numel() == numel(), kInternal, "reshape ", shape.str(), " to ", s.str());
  return Tensor(data, dtype, s, device);
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  ANVIL_ENSURE(shape.ndim >= 1 && 0 <= begin && begin <= end && end <= shape[0], kInternal,
               "slice_rows [", begin, ", ", end, ") of ", shape.str());
  Shape s = shape;
  s.dims[0] = end - begin;
  const size_t row_bytes = shape[0] ? bytes() / static_cast<size_t>(shape[0]) : 0;
  return Tensor(static_cast<char*>(data) + static_cast<size_t>(begin) * row_bytes, dtype, s, device);
}

}  // namespace anvil
