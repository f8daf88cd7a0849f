// The offload ring's copies (model/offload.h).
#include "model/offload.h"

#include "core/error.h"

namespace anvil {

void OffloadRing::before_write(int64_t l) {
  if (offloaded(l)) ops_.runtime().wait_copy(2 * ring_slot(l));
}

void OffloadRing::after_write(int64_t l) {
  if (offloaded(l)) ops_.runtime().copy_to_host(host_[static_cast<size_t>(l)], slot(l), 2 * ring_slot(l));
}

// Its last reader, that block's backward, is enqueued by now.
void OffloadRing::prefetch(int64_t l) {
  if (comes_back(l)) ops_.runtime().copy_to_device(slot(l), host_[static_cast<size_t>(l)], 2 * ring_slot(l) + 1);
}

void OffloadRing::before_read(int64_t l) {
  if (comes_back(l)) ops_.runtime().wait_copy(2 * ring_slot(l) + 1);
}

void OffloadRing::finish() {
  if (ring_.empty()) return;
  try {
    ops_.runtime().synchronize();  // no copy in flight to or from the buffers
  } catch (const Error&) {  // a failed device: the op that met it has thrown already
  }
  for (void*& p : host_) {
    if (p) ops_.runtime().release_host(p);
    p = nullptr;
  }
  ring_.clear();
}

}  // namespace anvil
