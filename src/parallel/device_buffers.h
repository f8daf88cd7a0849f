// The device memory of a parameter store: persistent buffers and a pool of transient ones.
//
// Persistent buffers (masters, moments, owned gradients, reduction outputs) live as long as
// the store and are counted in persistent_bytes (the memory plan, plan/memory_plan.cpp,
// counts the same). Pooled buffers (FSDP's gathered units and full-unit gradients, the
// copies in the wire dtype being reduced, downloads) return to the pool when done with and
// are reused by the next request of at most their size; the pool keeps them until the store
// is destroyed. Which buffer a request gets is PoolSizes' rule, on sizes alone, so the memory
// plan replays a step's requests through the same rule (parallel/pool_replay.h).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "ops/runtime.h"

namespace anvil {

// The pool's rule: a request takes the smallest free buffer that holds it, else a new one of
// its size; a buffer keeps its size when it comes back. Buffers are numbered in the order
// they were added.
class PoolSizes {
 public:
  struct Taken {
    int buffer = 0;
    bool added = false;  // a new buffer of the request's size
  };
  Taken take(int64_t bytes);
  void give(int buffer);
  int64_t size(int buffer) const { return sizes_[static_cast<size_t>(buffer)]; }
  int64_t total() const { return total_; }  // every buffer, free or taken

 private:
  std::vector<int64_t> sizes_;
  std::multimap<int64_t, int> free_;  // free buffers by size
  int64_t total_ = 0;
};

class DeviceBuffers {
 public:
  explicit DeviceBuffers(Runtime& rt) : rt_(rt) {}
  ~DeviceBuffers();  // releases every buffer, pooled ones included
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;

  Tensor make(int64_t n, DType dtype);    // persistent
  Tensor pooled(int64_t n, DType dtype);  // PoolSizes' buffer for it
  void unpool(const Tensor& t);           // back to the pool
  int64_t persistent_bytes() const { return persistent_bytes_; }

 private:
  Runtime& rt_;
  std::vector<void*> persistent_;
  int64_t persistent_bytes_ = 0;
  PoolSizes pool_;
  std::vector<void*> pooled_;        // by PoolSizes' number
  std::map<void*, int> pooled_at_;  // a pooled buffer's number
};

}  // namespace anvil
