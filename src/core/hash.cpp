// Xxh64: the XXH64 algorithm (xxHash spec, seed 0), streamed in 32-byte stripes (see hash.h).
#include "core/hash.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/fs.h"

namespace anvil {

namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full, kP3 = 0x165667B19E3779F9ull,
                   kP4 = 0x85EBCA77C2B2AE63ull, kP5 = 0x27D4EB2F165667C5ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // little-endian hosts only (x86-64, aarch64)
  return v;
}
inline uint32_t read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t xround(uint64_t acc, uint64_t input) { return rotl(acc + input * kP2, 31) * kP1; }
inline uint64_t merge(uint64_t h, uint64_t v) { return (h ^ xround(0, v)) * kP1 + kP4; }

}  // namespace

void Xxh64::update(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  if (!started_) {
    acc_[0] = kP1 + kP2;
    acc_[1] = kP2;
    acc_[2] = 0;
    acc_[3] = 0 - kP1;
    started_ = true;
  }
  total_ += n;
  if (buf_len_ > 0) {
    const size_t take = std::min(n, 32 - buf_len_);
    std::memcpy(buf_ + buf_len_, p, take);
    buf_len_ += take;
    p += take;
    n -= take;
    if (buf_len_ < 32) return;
    for (int i = 0; i < 4; ++i) acc_[i] = xround(acc_[i], read64(buf_ + 8 * i));
    buf_len_ = 0;
  }
  uint64_t a0 = acc_[0], a1 = acc_[1], a2 = acc_[2], a3 = acc_[3];
  for (; n >= 32; p += 32, n -= 32) {
    a0 = xround(a0, read64(p));
    a1 = xround(a1, read64(p + 8));
    a2 = xround(a2, read64(p + 16));
    a3 = xround(a3, read64(p + 24));
  }
  acc_[0] = a0, acc_[1] = a1, acc_[2] = a2, acc_[3] = a3;
  std::memcpy(buf_, p, n);
  buf_len_ = n;
}

uint64_t Xxh64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(acc_[0], 1) + rotl(acc_[1], 7) + rotl(acc_[2], 12) + rotl(acc_[3], 18);
    for (uint64_t a : acc_) h = merge(h, a);
  } else {
    h = kP5;
  }
  h += total_;
  const unsigned char* p = buf_;
  size_t n = buf_len_;
  for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ xround(0, read64(p)), 27) * kP1 + kP4;
  if (n >= 4) {
    h = rotl(h ^ (static_cast<uint64_t>(read32(p)) * kP1), 23) * kP2 + kP3;
    p += 4;
    n -= 4;
  }
  for (; n > 0; ++p, --n) h = rotl(h ^ (*p * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

std::string Xxh64::hex() const {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(digest()));
  return s;
}

std::string hash_hex(std::string_view bytes) {
  Xxh64 h;
  h.update(bytes);
  return h.hex();
}

std::string hash_file(const std::string& path) {
  Xxh64 h;
  read_file_chunks(path, [&](std::string_view chunk) { h.update(chunk); });
  return h.hex();
}

}  // namespace anvil
