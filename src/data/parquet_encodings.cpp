// Parquet's value and level encodings (see parquet_encodings.h).
#include "data/parquet_encodings.h"

#include <algorithm>

namespace anvil::parquet {
namespace {

int bit_width(int max_level) {
  int w = 0;
  while ((1 << w) <= max_level) ++w;
  return w;
}

// Unpacks n values of w bits (LSB first) from p.
void unpack(const uint8_t* p, int w, size_t n, uint64_t* out) {
  if (w == 0) {
    std::fill(out, out + n, 0);
    return;
  }
  if (w <= 56) {
    const uint64_t mask = (uint64_t{1} << w) - 1;
    uint64_t buf = 0;
    int bits = 0;
    for (size_t i = 0; i < n; ++i) {
      while (bits < w) {
        buf |= static_cast<uint64_t>(*p++) << bits;
        bits += 8;
      }
      out[i] = buf & mask;
      buf >>= w;
      bits -= w;
    }
    return;
  }
  size_t bit = 0;
  for (size_t i = 0; i < n; ++i) {
    uint64_t v = 0;
    for (int got = 0; got < w;) {
      const int off = static_cast<int>(bit & 7), take = std::min(8 - off, w - got);
      v |= static_cast<uint64_t>((p[bit >> 3] >> off) & ((1u << take) - 1)) << got;
      got += take;
      bit += static_cast<size_t>(take);
    }
    out[i] = v;
  }
}

// DELTA_BINARY_PACKED: exactly n values into out; returns with c past the last miniblock used.
void decode_delta_binary(Cursor& c, size_t n, std::vector<int64_t>& out) {
  const uint64_t block = c.uleb(), miniblocks = c.uleb(), total = c.uleb();
  int64_t value = c.zigzag();
  // The block size is a 32-bit count (as Arrow reads it), so that a miniblock's bytes cannot overflow.
  if (block == 0 || block % 128 != 0 || block > UINT32_MAX || miniblocks == 0 || block % miniblocks != 0 ||
      (block / miniblocks) % 32 != 0)
    c.fail(cat("bad DELTA_BINARY_PACKED header (block ", block, ", miniblocks ", miniblocks, ")"));
  if (total != n) c.fail(cat("DELTA_BINARY_PACKED holds ", total, " values, the page needs ", n));
  out.clear();
  out.reserve(n);
  if (n == 0) return;
  out.push_back(value);
  const size_t per = block / miniblocks;
  // Only the values the page still needs are unpacked: a miniblock past them is padding, and
  // its size (the header's) sizes nothing here.
  std::vector<uint64_t> deltas(std::min(per, n));
  while (out.size() < n) {
    const int64_t min_delta = c.zigzag();
    c.need(miniblocks, "DELTA_BINARY_PACKED bit widths");
    const uint8_t* widths = c.p;
    c.p += miniblocks;
    for (size_t m = 0; m < miniblocks && out.size() < n; ++m) {
      const int w = widths[m];
      if (w > 64) c.fail(cat("DELTA_BINARY_PACKED bit width ", w));
      const size_t bytes = per * static_cast<size_t>(w) / 8;
      c.need(bytes, "DELTA_BINARY_PACKED miniblock");
      const size_t take = std::min(per, n - out.size());
      unpack(c.p, w, take, deltas.data());
      c.p += bytes;
      for (size_t i = 0; i < take; ++i) {
        value = static_cast<int64_t>(static_cast<uint64_t>(value) + static_cast<uint64_t>(min_delta) + deltas[i]);
        out.push_back(value);
      }
    }
  }
}

void check_lengths(Cursor& c, const std::vector<int64_t>& lengths, const char* what) {
  for (int64_t l : lengths)
    if (l < 0) c.fail(cat("negative ", what, " ", l));
}

}  // namespace

void decode_hybrid(Cursor& c, int w, size_t n, uint64_t max_value, const char* what, std::vector<uint64_t>& out) {
  out.resize(n);
  size_t k = 0;
  while (k < n) {
    const uint64_t header = c.uleb();
    if (header & 1) {
      // A bit-packed run holds groups of 8 values, the last padded: one reaching more than a
      // group past the values left is corrupt (and its count could wrap around).
      const uint64_t groups = header >> 1;
      if (groups > (n - k + 7) / 8)
        c.fail(cat("bit-packed run of ", groups, " groups of 8 past the ", n, " values of the page (", what, ")"));
      const size_t count = static_cast<size_t>(groups) * 8;
      const size_t bytes = static_cast<size_t>(groups) * static_cast<size_t>(w);
      c.need(bytes, what);
      std::vector<uint64_t> tmp;
      uint64_t* dst;
      if (k + count <= n) {
        dst = out.data() + k;
      } else {  // the last group is padded past n
        tmp.resize(count);
        dst = tmp.data();
      }
      unpack(c.p, w, count, dst);
      if (!tmp.empty())
        std::copy(tmp.begin(), tmp.begin() + static_cast<std::ptrdiff_t>(n - k),
                  out.begin() + static_cast<std::ptrdiff_t>(k));
      c.p += bytes;
      k = std::min(n, k + count);
    } else {
      const size_t count = static_cast<size_t>(header >> 1);
      const size_t bytes = static_cast<size_t>((w + 7) / 8);
      c.need(bytes, what);
      uint64_t v = 0;
      for (size_t b = 0; b < bytes; ++b) v |= static_cast<uint64_t>(c.p[b]) << (8 * b);
      c.p += bytes;
      if (count == 0) c.fail(cat("empty RLE run in ", what));
      const size_t end = count >= n - k ? n : k + count;  // k + count could wrap
      std::fill(out.begin() + static_cast<std::ptrdiff_t>(k), out.begin() + static_cast<std::ptrdiff_t>(end), v);
      k = end;
    }
  }
  for (uint64_t v : out)
    if (v > max_value) c.fail(cat(what, " value ", v, " out of range (max ", max_value, ")"));
}

void decode_levels(Cursor& c, int max_level, size_t n, const char* what, std::vector<uint8_t>& out) {
  std::vector<uint64_t> v;
  decode_hybrid(c, bit_width(max_level), n, static_cast<uint64_t>(max_level), what, v);
  out.insert(out.end(), v.begin(), v.end());
}

void decode_plain_strings(Cursor& c, size_t n, Strings out) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t len = c.u32le();
    c.need(len, "PLAIN value");
    out.add(reinterpret_cast<const char*>(c.p), len);
    c.p += len;
  }
}

void decode_delta_length(Cursor& c, size_t n, Strings out) {
  std::vector<int64_t> lengths;
  decode_delta_binary(c, n, lengths);
  check_lengths(c, lengths, "length");
  for (int64_t l : lengths) {
    c.need(static_cast<size_t>(l), "DELTA_LENGTH_BYTE_ARRAY value");
    out.add(reinterpret_cast<const char*>(c.p), static_cast<size_t>(l));
    c.p += l;
  }
}

void decode_delta_strings(Cursor& c, size_t n, Strings out) {
  std::vector<int64_t> prefix, suffix;
  decode_delta_binary(c, n, prefix);
  decode_delta_binary(c, n, suffix);
  check_lengths(c, prefix, "prefix length");
  check_lengths(c, suffix, "suffix length");
  std::string prev, value;
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<size_t>(prefix[i]) > prev.size())
      c.fail(cat("DELTA_BYTE_ARRAY prefix ", prefix[i], " longer than the previous value"));
    c.need(static_cast<size_t>(suffix[i]), "DELTA_BYTE_ARRAY suffix");
    value.assign(prev, 0, static_cast<size_t>(prefix[i]));
    value.append(reinterpret_cast<const char*>(c.p), static_cast<size_t>(suffix[i]));
    c.p += suffix[i];
    out.add(value.data(), value.size());
    prev.swap(value);
  }
}

}  // namespace anvil::parquet
