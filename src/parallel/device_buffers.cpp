// Persistent and pooled device buffers of a parameter store (parallel/device_buffers.h).
#include "parallel/device_buffers.h"

#include "core/error.h"

namespace anvil {

PoolSizes::Taken PoolSizes::take(int64_t bytes) {
  auto it = free_.lower_bound(bytes);
  if (it != free_.end()) {
    const int buffer = it->second;
    free_.erase(it);
    return {buffer, false};
  }
  sizes_.push_back(bytes);
  total_ += bytes;
  return {static_cast<int>(sizes_.size()) - 1, true};
}

void PoolSizes::give(int buffer) { free_.emplace(size(buffer), buffer); }

DeviceBuffers::~DeviceBuffers() {
  for (void* p : persistent_) rt_.release(p);
  for (void* p : pooled_) rt_.release(p);
}

Tensor DeviceBuffers::make(int64_t n, DType dtype) {
  Tensor t(nullptr, dtype, {n}, rt_.device());
  t.data = rt_.alloc(t.bytes());
  persistent_.push_back(t.data);
  persistent_bytes_ += static_cast<int64_t>(t.bytes());
  return t;
}

Tensor DeviceBuffers::pooled(int64_t n, DType dtype) {
  Tensor t(nullptr, dtype, {n}, rt_.device());
  const PoolSizes::Taken got = pool_.take(static_cast<int64_t>(t.bytes()));
  if (got.added) {
    pooled_.push_back(rt_.alloc(t.bytes()));
    pooled_at_[pooled_.back()] = got.buffer;
  }
  t.data = pooled_[static_cast<size_t>(got.buffer)];
  return t;
}

void DeviceBuffers::unpool(const Tensor& t) {
  auto it = pooled_at_.find(t.data);
  ANVIL_ENSURE(it != pooled_at_.end(), kInternal, "a buffer returned to the pool that it did not give");
  pool_.give(it->second);
}

}  // namespace anvil
