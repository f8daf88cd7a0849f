// Persistent and pooled device buffers of a parameter store (parallel/device_buffers.h).
#include "parallel/device_buffers.h"

namespace anvil {

DeviceBuffers::~DeviceBuffers() {
  for (void* p : persistent_) rt_.release(p);
  for (auto& [size, p] : pool_) rt_.release(p);
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
  auto it = pool_.lower_bound(t.bytes());
  if (it != pool_.end()) {
    t.data = it->second;
    pool_.erase(it);
  } else {
    t.data = rt_.alloc(t.bytes());
  }
  return t;
}

void DeviceBuffers::unpool(const Tensor& t) { pool_.emplace(t.bytes(), t.data); }

}  // namespace anvil
