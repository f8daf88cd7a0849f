// Parquet's value and level encodings, for BYTE_ARRAY columns: the RLE/bit-packed hybrid
// (levels, dictionary indices), PLAIN strings, DELTA_BINARY_PACKED (the lengths inside the
// delta string encodings), DELTA_LENGTH_BYTE_ARRAY and DELTA_BYTE_ARRAY. Every read is bounds
// checked through a Cursor, whose fail() names the page being decoded.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace anvil::parquet {

// Decoding position in a page's bytes.
struct Cursor {
  const uint8_t* p;
  const uint8_t* end;
  const std::function<void(const std::string&)>& fail;
  size_t left() const { return static_cast<size_t>(end - p); }
  void need(size_t n, const char* what) const {
    if (n > left()) fail(cat("truncated ", what));
  }
  uint64_t uleb() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1, "varint");
      const uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint too long");
    return 0;
  }
  int64_t zigzag() {
    const uint64_t v = uleb();
    return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
  }
  uint32_t u32le() {
    need(4, "length");
    uint32_t v;
    std::memcpy(&v, p, 4);
    p += 4;
    return v;
  }
};

struct Strings {  // bytes + offsets, as ColumnData holds them
  std::string* bytes;
  std::vector<uint64_t>* offsets;
  void add(const char* p, size_t n) {
    bytes->append(p, n);
    offsets->push_back(bytes->size());
  }
};

// The RLE/bit-packed hybrid: n values of width w into out (each checked <= max_value).
void decode_hybrid(Cursor& c, int w, size_t n, uint64_t max_value, const char* what, std::vector<uint64_t>& out);
// n levels of at most max_level, appended to out.
void decode_levels(Cursor& c, int max_level, size_t n, const char* what, std::vector<uint8_t>& out);
// n values, each a 4-byte length and its bytes.
void decode_plain_strings(Cursor& c, size_t n, Strings out);
void decode_delta_length(Cursor& c, size_t n, Strings out);   // DELTA_LENGTH_BYTE_ARRAY
void decode_delta_strings(Cursor& c, size_t n, Strings out);  // DELTA_BYTE_ARRAY

}  // namespace anvil::parquet
