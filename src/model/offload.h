// Offloaded activations (--offload-activations, Recompute::kFull): the checkpoints x_1 ..
// x_{L-1} live in host memory and pass through a ring of device buffers (model/activations.h's
// x_ring): each is copied to the host on the copy queue (ops/runtime.h) right after the block that
// writes it, and a block waits for the copy out of its ring slot before overwriting it; in the
// backward each comes back one block ahead of its use (those the forward's last blocks left in
// the ring need no copy), and the block waits for it. The same ops on the same values: the
// same bits as without. Ring slot s's copies mark copy slots 2s (out) and 2s + 1 (back).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/ops.h"

namespace anvil {

class OffloadRing {
 public:
  // layers: L, the blocks (x_0 .. x_L); none offloaded until the table's buffers are added.
  OffloadRing(Ops& ops, int64_t layers) : ops_(ops), layers_(layers), host_(static_cast<size_t>(layers + 1)) {}
  ~OffloadRing() { finish(); }
  OffloadRing(const OffloadRing&) = delete;
  OffloadRing& operator=(const OffloadRing&) = delete;

  // The table's buffers: x_l's host buffer, and the device's ring slots in order.
  void add_host(int64_t l, size_t bytes) { host_[static_cast<size_t>(l)] = ops_.runtime().alloc_host(bytes); }
  void add_slot(Tensor slot) { ring_.push_back(slot); }
  bool offloaded(int64_t l) const { return !ring_.empty() && l > 0 && l < layers_; }
  Tensor slot(int64_t l) const { return ring_[static_cast<size_t>(ring_slot(l))]; }  // where x_l is on the device

  void before_write(int64_t l);    // forward: x_l's ring slot's last copy out is done
  void after_write(int64_t l);     // forward: x_l to the host
  void prefetch(int64_t l);        // backward: x_l back into its ring slot, where needed
  void before_read(int64_t l);     // backward: x_l is back
  // No copy in flight, and the host buffers freed (before the device's buffers are).
  void finish();

 private:
  int ring_slot(int64_t l) const { return static_cast<int>((l - 1) % static_cast<int64_t>(ring_.size())); }
  // x_l's ring slot is overwritten in the forward by x_{l+ring}, where that is offloaded too.
  bool comes_back(int64_t l) const { return offloaded(l) && offloaded(l + static_cast<int64_t>(ring_.size())); }

  Ops& ops_;
  int64_t layers_;
  std::vector<void*> host_;  // x_l's host buffer at l (else null)
  std::vector<Tensor> ring_;
};

}  // namespace anvil
