// The device memory of a parameter store: persistent buffers and the pool's buffers.
//
// Persistent buffers (masters, moments, owned gradients, reduction outputs) live as long as
// the store and are counted in persistent_bytes (the memory plan, plan/memory_plan.cpp,
// counts the same). The pool's buffers are numbered by StorePool (parallel/store_pool.h),
// which decides which one a call takes and gives back; here each number gets its memory,
// allocated at its first use, kept until the store is destroyed.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/runtime.h"

namespace anvil {

class DeviceBuffers {
 public:
  explicit DeviceBuffers(Runtime& rt) : rt_(rt) {}
  ~DeviceBuffers();  // releases every buffer, pooled ones included
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;

  Tensor make(int64_t n, DType dtype);  // persistent
  // The pool's buffer number `buffer`, of `bytes` (StorePool::size), as n elements of dtype.
  Tensor pooled(int buffer, int64_t bytes, int64_t n, DType dtype);
  int64_t persistent_bytes() const { return persistent_bytes_; }

 private:
  Runtime& rt_;
  std::vector<void*> persistent_;
  int64_t persistent_bytes_ = 0;
  std::vector<void*> pooled_;  // by number; null: not allocated yet
};

}  // namespace anvil
