// The one content hash: streaming XXH64 (seed 0), digests written as 16 lowercase hex digits.
//
// Used for checkpoint checksums (io/checkpoint_files.h: recomputable with xxhsum -H1, so old
// checkpoints still validate) and for cache keys (tokenizer files, data files, settings).
// Not cryptographic: it names content, it does not defend against tampering. Stable across runs
// and machines (little-endian reads), so a cache written on one machine is recognised on another.
// Cache keys were once a different hash: a cache written before the switch simply misses and is
// prepared again. hash_file streams, so large files never sit in memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace anvil {

class Xxh64 {
 public:
  void update(const void* data, size_t n);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  uint64_t digest() const;
  std::string hex() const;  // 16 lowercase hex digits

 private:
  uint64_t acc_[4] = {};
  bool started_ = false;
  uint64_t total_ = 0;
  unsigned char buf_[32] = {};
  size_t buf_len_ = 0;
};

std::string hash_hex(std::string_view bytes);     // Xxh64 hex of bytes
std::string hash_file(const std::string& path);  // Xxh64 hex of a file's bytes

}  // namespace anvil
