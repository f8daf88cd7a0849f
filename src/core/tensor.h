// Tensor views: a pointer, an element type, a shape of up to 4 dimensions and a device.
//
// A view never owns memory. Buffers are owned elsewhere (the arena, a mapped file, a
// std::vector) and outlive their views. Views are always dense and row-major, so a view
// of rows [a, b) of a matrix is another view; strides are never needed by the op set.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace anvil {

enum class DType : uint8_t { kF32, kBF16, kF16, kF64, kI64, kI32, kU8, kBool, kI16 };
enum class Device : uint8_t { kCPU, kCUDA };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // safetensors spelling: F32, BF16, F16, F64, I64, I32, U8, BOOL, I16
bool dtype_from_name(const std::string& name, DType* out);

struct Shape {
  static constexpr int kMaxDims = 4;
  std::array<int64_t, kMaxDims> dims{};
  int ndim = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  int64_t operator[](int i) const { return dims[static_cast<size_t>(i)]; }
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  // "[2, 37, 1000]"
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;
  Device device = Device::kCPU;

  Tensor() = default;
  Tensor(void* d, DType t, Shape s, Device dev = Device::kCPU) : data(d), dtype(t), shape(s), device(dev) {}

  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape[i]; }
  int64_t rows() const;  // product of all but the last dimension
  int64_t cols() const { return shape.ndim ? shape[shape.ndim - 1] : 1; }

  template <class T>
  T* ptr() const { return static_cast<T*>(data); }

  Tensor reshape(Shape s) const;                // same elements, new shape
  Tensor slice_rows(int64_t begin, int64_t end) const;  // rows of dimension 0
  Tensor flat() const { return reshape({numel()}); }
};

}  // namespace anvil
