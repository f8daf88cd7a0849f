#include "core/tensor.h"

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

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF64: return "F64";
    case DType::kI64: return "I64";
    case DType::kI32: return "I32";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
    case DType::kI16: return "I16";
  }
  return "?";
}

bool dtype_from_name(const std::string& name, DType* out) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64, DType::kI64, DType::kI32,
                  DType::kU8, DType::kBool, DType::kI16}) {
    if (name == dtype_name(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

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
