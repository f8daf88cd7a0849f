// Hasher: 8-byte words folded with a multiply-xorshift mixer (see hash.h).
#include "core/hash.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/fs.h"

namespace anvil {

namespace {
uint64_t fmix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}
uint64_t load_le(const unsigned char* p) {
  uint64_t w = 0;
  for (int k = 7; k >= 0; --k) w = (w << 8) | p[k];
  return w;
}
}  // namespace

void Hasher::mix(uint64_t word) { state_ = fmix(state_ ^ (word * 0x9DDFEA08EB382D69ull)) + 0x632BE59BD9B4E019ull; }

void Hasher::update(std::string_view bytes) {
  length_ += bytes.size();
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  if (tail_len_ > 0) {  // top up the partial word left by the previous update
    const size_t take = std::min(n, 8 - tail_len_);
    std::memcpy(tail_ + tail_len_, p, take);
    tail_len_ += take;
    p += take;
    n -= take;
    if (tail_len_ < 8) return;
    mix(load_le(tail_));
    tail_len_ = 0;
  }
  for (; n >= 8; n -= 8, p += 8) mix(load_le(p));
  if (n > 0) {  // here tail_len_ == 0 and n < 8
    std::memcpy(tail_, p, n);
    tail_len_ = n;
  }
}

uint64_t Hasher::digest() const {
  Hasher h = *this;
  unsigned char last[8] = {};
  std::memcpy(last, h.tail_, h.tail_len_);
  h.mix(load_le(last));
  h.mix(length_);
  return fmix(h.state_);
}

std::string Hasher::hex() const {
  static const char* digits = "0123456789abcdef";
  uint64_t d = digest();
  std::string out(16, '0');
  for (int k = 15; k >= 0; --k, d >>= 4) out[static_cast<size_t>(k)] = digits[d & 15];
  return out;
}

std::string hash_hex(std::string_view bytes) {
  Hasher h;
  h.update(bytes);
  return h.hex();
}

std::string hash_file(const std::string& path) {
  Hasher h;
  read_file_chunks(path, [&](std::string_view chunk) { h.update(chunk); });
  return h.hex();
}

}  // namespace anvil
