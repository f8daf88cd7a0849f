// Persistent and pooled device buffers of a parameter store (parallel/device_buffers.h).
#include "parallel/device_buffers.h"

#include "core/error.h"

namespace anvil {

DeviceBuffers::~DeviceBuffers() {
  for (void* p : persistent_) rt_.release(p);
  for (void* p : pooled_)
    if (p) rt_.release(p);
}

Tensor DeviceBuffers::make(int64_t n, DType dtype) {
  Tensor t(nullptr, dtype, {n}, rt_.device());
  t.data = rt_.alloc(t.bytes());
  persistent_.push_back(t.data);
  persistent_bytes_ += static_cast<int64_t>(t.bytes());
  return t;
}

Tensor DeviceBuffers::pooled(int buffer, int64_t bytes, int64_t n, DType dtype) {
  Tensor t(nullptr, dtype, {n}, rt_.device());
  ANVIL_ENSURE(buffer >= 0 && static_cast<int64_t>(t.bytes()) <= bytes, kInternal, "pooled buffer ", buffer, " of ",
               bytes, " bytes for ", t.bytes());
  const size_t b = static_cast<size_t>(buffer);
  if (b >= pooled_.size()) pooled_.resize(b + 1, nullptr);
  if (!pooled_[b]) pooled_[b] = rt_.alloc(static_cast<size_t>(bytes));
  t.data = pooled_[b];
  return t;
}

}  // namespace anvil
