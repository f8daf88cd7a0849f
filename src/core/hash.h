// A fast 64-bit content hash for cache keys (tokenizer files, data files, settings).
//
// Not cryptographic: it names a cache entry, it does not defend against tampering. Stable
// across runs and machines (fixed seed, little-endian reads), so a cache written on one
// machine is recognised on another. hash_file streams, so large data files never sit in memory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace anvil {

class Hasher {
 public:
  void update(std::string_view bytes);
  uint64_t digest() const;
  std::string hex() const;  // 16 lowercase hex digits

 private:
  uint64_t state_ = 0x9E3779B97F4A7C15ull;
  uint64_t length_ = 0;
  unsigned char tail_[8] = {};
  size_t tail_len_ = 0;
  void mix(uint64_t word);
};

std::string hash_hex(std::string_view bytes);
std::string hash_file(const std::string& path);

}  // namespace anvil
