// The device memory of a parameter store: persistent buffers and a pool of transient ones.
//
// Persistent buffers (masters, moments, owned gradients, reduction outputs) live as long as
// the store and are counted in persistent_bytes (the memory plan, plan/memory_plan.cpp,
// counts the same). Pooled buffers (FSDP's gathered units and full-unit gradients, the bf16
// copies being reduced, downloads) return to the pool when done with and are reused by the
// next request of at most their size; the pool keeps them until the store is destroyed.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "ops/runtime.h"

namespace anvil {

class DeviceBuffers {
 public:
  explicit DeviceBuffers(Runtime& rt) : rt_(rt) {}
  ~DeviceBuffers();  // releases every buffer, pooled ones included
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;

  Tensor make(int64_t n, DType dtype);    // persistent
  Tensor pooled(int64_t n, DType dtype);  // the smallest free buffer that holds it, or a new one
  void unpool(const Tensor& t);           // back to the pool
  int64_t persistent_bytes() const { return persistent_bytes_; }

 private:
  Runtime& rt_;
  std::vector<void*> persistent_;
  int64_t persistent_bytes_ = 0;
  std::multimap<size_t, void*> pool_;  // free pooled buffers by size
};

}  // namespace anvil
