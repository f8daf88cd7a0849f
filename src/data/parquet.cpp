// The Parquet reader (see parquet.h): Thrift compact footer and page headers, levels,
// value encodings and page codecs for BYTE_ARRAY columns.
#include "data/parquet.h"

#include <fcntl.h>
#include <snappy.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "core/error.h"
#include "core/fs.h"

namespace anvil::parquet {

namespace {

constexpr int32_t kByteArray = 6;

const char* encoding_name(int32_t e) {
  static const char* names[] = {"PLAIN", "GROUP_VAR_INT", "PLAIN_DICTIONARY", "RLE", "BIT_PACKED",
                                "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
                                "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
  return e >= 0 && e < 10 ? names[e] : "an unknown encoding";
}

const char* codec_name(int32_t c) {
  static const char* names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
  return c >= 0 && c < 8 ? names[c] : "an unknown codec";
}

// ---------------------------------------------------------------------------------------
// Thrift compact protocol: just what FileMetaData and PageHeader need; unknown fields are
// skipped, so newer writers' additions are harmless.

class Thrift {
 public:
  Thrift(const uint8_t* p, const uint8_t* end, std::function<std::string()> where)
      : p_(p), end_(end), where_(std::move(where)) {}
  const uint8_t* pos() const { return p_; }

  uint8_t byte() {
    if (p_ >= end_) fail("truncated");
    return *p_++;
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const uint8_t b = byte();
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint too long");
  }
  int64_t zigzag() {
    const uint64_t v = varint();
    return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
  }
  int32_t i32() { return static_cast<int32_t>(zigzag()); }
  std::string_view binary() {
    const uint64_t n = varint();
    if (n > static_cast<uint64_t>(end_ - p_)) fail("truncated string");
    std::string_view s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  bool bool_field() const { return last_bool_; }  // the value of a bool field just announced

  // Calls f(id, type) for each field; f returns false to skip the field.
  template <class F>
  void read_struct(F&& f) {
    enter();
    int32_t last = 0;
    for (;;) {
      const uint8_t b = byte();
      const int type = b & 0x0f;
      if (type == 0) break;
      const int32_t id = (b >> 4) ? last + (b >> 4) : static_cast<int32_t>(zigzag());
      last = id;
      last_bool_ = type == 1;
      if (!f(id, type)) skip(type, false);
    }
    --depth_;
  }
  // Calls f(element_type) once per element.
  template <class F>
  void read_list(F&& f) {
    enter();
    const uint8_t b = byte();
    uint64_t n = b >> 4;
    if (n == 15) n = varint();
    if (n > static_cast<uint64_t>(end_ - p_)) fail("list longer than its data");
    for (uint64_t i = 0; i < n; ++i) f(b & 0x0f);
    --depth_;
  }
  void skip(int type, bool in_list) {
    switch (type) {
      case 1:
      case 2:
        if (in_list) byte();
        return;
      case 3: byte(); return;
      case 4:
      case 5:
      case 6: varint(); return;
      case 7:
        if (end_ - p_ < 8) fail("truncated");
        p_ += 8;
        return;
      case 8: binary(); return;
      case 9:
      case 10: read_list([&](int t) { skip(t, true); }); return;
      case 11: {
        enter();
        const uint64_t n = varint();
        if (n > 0) {
          const uint8_t kv = byte();
          for (uint64_t i = 0; i < n; ++i) {
            skip(kv >> 4, true);
            skip(kv & 0x0f, true);
          }
        }
        --depth_;
        return;
      }
      case 12: read_struct([](int32_t, int) { return false; }); return;
      default: fail(cat("unknown field type ", type));
    }
  }
  [[noreturn]] void fail(const std::string& what) const {
    raise(ErrorKind::kInvalidInput, where_(), ": corrupt metadata (", what, ")");
  }

 private:
  void enter() {
    if (++depth_ > 64) fail("nested too deeply");
  }
  const uint8_t* p_;
  const uint8_t* end_;
  std::function<std::string()> where_;
  bool last_bool_ = false;
  int depth_ = 0;
};

struct RawSchemaElement {
  std::string name;
  int32_t type = -1, repetition = 0, num_children = 0, converted_type = -1;
};

File::Chunk parse_column_chunk(Thrift& t, bool* external) {
  File::Chunk c;
  t.read_struct([&](int32_t id, int) {
    if (id == 1) {
      *external = !t.binary().empty();
      return true;
    }
    if (id != 3) return false;
    t.read_struct([&](int32_t m, int) {
      switch (m) {
        case 1: c.type = t.i32(); return true;
        case 4: c.codec = t.i32(); return true;
        case 5: c.num_values = t.zigzag(); return true;
        case 7: c.total_compressed_size = t.zigzag(); return true;
        case 9: c.data_page_offset = t.zigzag(); return true;
        case 11: c.dictionary_page_offset = t.zigzag(); return true;
        default: return false;
      }
    });
    return true;
  });
  return c;
}

RawSchemaElement parse_schema_element(Thrift& t) {
  RawSchemaElement e;
  t.read_struct([&](int32_t f, int) {
    switch (f) {
      case 1: e.type = t.i32(); return true;
      case 3: e.repetition = t.i32(); return true;
      case 4: e.name = std::string(t.binary()); return true;
      case 5: e.num_children = t.i32(); return true;
      case 6: e.converted_type = t.i32(); return true;
      default: return false;
    }
  });
  return e;
}

File::RowGroup parse_row_group(Thrift& t) {
  File::RowGroup g;
  t.read_struct([&](int32_t f, int) {
    if (f == 1) {
      t.read_list([&](int) {
        bool external = false;
        g.columns.push_back(parse_column_chunk(t, &external));
        if (external) t.fail("a column chunk in another file (file_path) is not supported");
      });
      return true;
    }
    if (f == 3) {
      g.num_rows = t.zigzag();
      return true;
    }
    return false;
  });
  return g;
}

// The schema tree from the footer's depth-first list, with each node's levels and path.
std::vector<SchemaNode> build_schema(const std::vector<RawSchemaElement>& raw, Thrift& t, int* leaves) {
  if (raw.empty()) t.fail("empty schema");
  std::vector<SchemaNode> schema;
  size_t next = 0;
  std::function<int(int, int)> build = [&](int parent, int depth) -> int {
    if (next >= raw.size()) t.fail("schema children past the end of the schema");
    if (depth > 64) t.fail("schema nested too deeply");
    const int id = static_cast<int>(schema.size());
    const RawSchemaElement& e = raw[next++];
    SchemaNode n;
    n.name = e.name;
    n.repetition = static_cast<Repetition>(e.repetition);
    n.converted_type = e.converted_type;
    n.parent = parent;
    if (parent >= 0) {
      const SchemaNode& p = schema[static_cast<size_t>(parent)];
      n.max_def = p.max_def + (n.repetition != Repetition::kRequired ? 1 : 0);
      n.max_rep = p.max_rep + (n.repetition == Repetition::kRepeated ? 1 : 0);
      n.path = p.parent >= 0 ? p.path + "." + e.name : e.name;
    }
    if (n.max_def > 255 || n.max_rep > 255) t.fail("schema nested too deeply");
    if (e.num_children <= 0) {
      n.type = e.type;
      n.column = (*leaves)++;
    }
    schema.push_back(std::move(n));
    for (int k = 0; k < e.num_children; ++k) {
      const int child = build(id, depth + 1);
      schema[static_cast<size_t>(id)].children.push_back(child);
    }
    return id;
  };
  build(-1, 0);
  if (next != raw.size()) t.fail(cat("schema has ", raw.size() - next, " stray elements"));
  return schema;
}

// ---------------------------------------------------------------------------------------
// Levels and values

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

// The RLE/bit-packed hybrid: n values of width w into out (each checked <= max_value).
void decode_hybrid(Cursor& c, int w, size_t n, uint64_t max_value, const char* what, std::vector<uint64_t>& out) {
  out.resize(n);
  size_t k = 0;
  while (k < n) {
    const uint64_t header = c.uleb();
    if (header & 1) {
      const size_t count = static_cast<size_t>(header >> 1) * 8;
      const size_t bytes = static_cast<size_t>(header >> 1) * static_cast<size_t>(w);
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
      if (!tmp.empty()) std::copy(tmp.begin(), tmp.begin() + static_cast<std::ptrdiff_t>(n - k), out.begin() + static_cast<std::ptrdiff_t>(k));
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
      std::fill(out.begin() + static_cast<std::ptrdiff_t>(k), out.begin() + static_cast<std::ptrdiff_t>(std::min(n, k + count)), v);
      k = std::min(n, k + count);
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

// DELTA_BINARY_PACKED: exactly n values into out; returns with c past the last miniblock used.
void decode_delta_binary(Cursor& c, size_t n, std::vector<int64_t>& out) {
  const uint64_t block = c.uleb(), miniblocks = c.uleb(), total = c.uleb();
  int64_t value = c.zigzag();
  if (block == 0 || block % 128 != 0 || miniblocks == 0 || block % miniblocks != 0 || (block / miniblocks) % 32 != 0)
    c.fail(cat("bad DELTA_BINARY_PACKED header (block ", block, ", miniblocks ", miniblocks, ")"));
  if (total != n) c.fail(cat("DELTA_BINARY_PACKED holds ", total, " values, the page needs ", n));
  out.clear();
  out.reserve(n);
  if (n == 0) return;
  out.push_back(value);
  const size_t per = block / miniblocks;
  std::vector<uint64_t> deltas(per);
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
      unpack(c.p, w, per, deltas.data());
      c.p += bytes;
      for (size_t i = 0; i < per && out.size() < n; ++i) {
        value = static_cast<int64_t>(static_cast<uint64_t>(value) + static_cast<uint64_t>(min_delta) + deltas[i]);
        out.push_back(value);
      }
    }
  }
}

struct Strings {  // bytes + offsets, as ColumnData holds them
  std::string* bytes;
  std::vector<uint64_t>* offsets;
  void add(const char* p, size_t n) {
    bytes->append(p, n);
    offsets->push_back(bytes->size());
  }
};

void decode_plain_strings(Cursor& c, size_t n, Strings out) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t len = c.u32le();
    c.need(len, "PLAIN value");
    out.add(reinterpret_cast<const char*>(c.p), len);
    c.p += len;
  }
}

void check_lengths(Cursor& c, const std::vector<int64_t>& lengths, const char* what) {
  for (int64_t l : lengths)
    if (l < 0) c.fail(cat("negative ", what, " ", l));
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

}  // namespace

const char* type_name(int32_t t) {
  static const char* names[] = {"BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE", "BYTE_ARRAY",
                                "FIXED_LEN_BYTE_ARRAY"};
  return t >= 0 && t < 8 ? names[t] : "GROUP";
}

namespace {

// ---------------------------------------------------------------------------------------
// Pages

struct PageHeader {
  int32_t type = -1, usize = -1, csize = -1;  // 0 data v1, 1 index, 2 dictionary, 3 data v2
  int32_t num_values = -1, encoding = -1, def_enc = 3, rep_enc = 3;
  int32_t def_len = 0, rep_len = 0;  // v2: level bytes before the values
  bool v2_compressed = true;
};

PageHeader parse_page_header(Thrift& t) {
  PageHeader h;
  t.read_struct([&](int32_t id, int) {
    switch (id) {
      case 1: h.type = t.i32(); return true;
      case 2: h.usize = t.i32(); return true;
      case 3: h.csize = t.i32(); return true;
      case 5:  // DataPageHeader
      case 7:  // DictionaryPageHeader
      case 8:  // DataPageHeaderV2
        t.read_struct([&](int32_t f, int) {
          const auto set = [&](int32_t& field) {
            field = t.i32();
            return true;
          };
          if (f == 1) return set(h.num_values);
          if ((f == 2 && id != 8) || (f == 4 && id == 8)) return set(h.encoding);
          if (id == 5 && f == 3) return set(h.def_enc);
          if (id == 5 && f == 4) return set(h.rep_enc);
          if (id == 8 && f == 5) return set(h.def_len);
          if (id == 8 && f == 6) return set(h.rep_len);
          if (id == 8 && f == 7) {
            h.v2_compressed = t.bool_field();
            return true;
          }
          return false;
        });
        return true;
      default: return false;
    }
  });
  return h;
}

// Decodes the pages of one column chunk of BYTE_ARRAY values into a ColumnData.
class ChunkDecoder {
 public:
  ChunkDecoder(const SchemaNode& node, const File::Chunk& chunk, std::string where)
      : node_(node), chunk_(chunk), where_(std::move(where)), fail_fn_([this](const std::string& w) { fail(w); }) {
    if (chunk.type != kByteArray) unsupported(cat("type ", type_name(chunk.type), " (strings only)"));
    if (chunk.codec != 0 && chunk.codec != 1 && chunk.codec != 2 && chunk.codec != 6)
      unsupported(cat("codec ", codec_name(chunk.codec)));
  }

  [[noreturn]] void fail(const std::string& what) const { raise(ErrorKind::kInvalidInput, where_, ": ", what); }
  [[noreturn]] void unsupported(const std::string& what) const {
    raise(ErrorKind::kUnsupported, where_, ": ", what, " is not supported by anvil's Parquet reader");
  }

  ColumnData run(const uint8_t* p, const uint8_t* end, const uint8_t* file) {
    while (out_.num_entries < chunk_.num_values) {
      if (p >= end) fail(cat("pages end after ", out_.num_entries, " of ", chunk_.num_values, " values"));
      Thrift t(p, end, [&] { return cat(where_, ": page header at byte ", p - file); });
      const PageHeader h = parse_page_header(t);
      const uint8_t* payload = t.pos();
      if (h.usize < 0 || h.csize < 0 || h.csize > end - payload)
        fail(cat("page at byte ", p - file, " has bad sizes (", h.csize, " compressed, ", h.usize, " uncompressed)"));
      p = payload + h.csize;
      if (h.type == 1) continue;  // index page
      if (h.num_values < 0) fail(cat("page at byte ", payload - file, " without a page header"));
      if (h.type == 2) {
        dictionary_page(h, payload);
      } else if (h.type == 0 || h.type == 3) {
        data_page(h, payload);
      } else {
        unsupported(cat("page type ", h.type));
      }
    }
    if (out_.num_entries != chunk_.num_values)
      fail(cat("pages hold ", out_.num_entries, " values, the chunk says ", chunk_.num_values));
    if (node_.max_rep > 0 && !out_.rep.empty() && out_.rep[0] != 0) fail("the first value does not start a row");
    return std::move(out_);
  }

 private:
  // n bytes at src decompressed into exactly `size` bytes (src itself when uncompressed).
  const uint8_t* decompress(const uint8_t* src, size_t n, size_t size) {
    if (chunk_.codec == 0) {
      if (n != size) fail(cat("uncompressed page of ", n, " bytes, header says ", size));
      return src;
    }
    if (size == 0) return src;  // nothing to decode (a page of nulls)
    page_buf_.resize(size);
    bool ok = false;
    const auto* s = reinterpret_cast<const char*>(src);
    if (chunk_.codec == 1) {
      size_t len = 0;
      ok = snappy::GetUncompressedLength(s, n, &len) && len == size && snappy::RawUncompress(s, n, page_buf_.data());
    } else if (chunk_.codec == 2) {
      z_stream z{};
      if (inflateInit2(&z, 15 + 32) == Z_OK) {
        z.next_in = const_cast<Bytef*>(src);
        z.avail_in = static_cast<uInt>(n);
        z.next_out = reinterpret_cast<Bytef*>(page_buf_.data());
        z.avail_out = static_cast<uInt>(size);
        ok = inflate(&z, Z_FINISH) == Z_STREAM_END && z.total_out == size;
        inflateEnd(&z);
      }
    } else {
      const size_t r = ZSTD_decompress(page_buf_.data(), size, src, n);
      ok = !ZSTD_isError(r) && r == size;
    }
    if (!ok) fail(cat("corrupt ", codec_name(chunk_.codec), " page (", n, " bytes, expected ", size, " out)"));
    return reinterpret_cast<const uint8_t*>(page_buf_.data());
  }

  void dictionary_page(const PageHeader& h, const uint8_t* payload) {
    if (have_dict_) fail("a second dictionary page");
    if (h.encoding != 0 && h.encoding != 2) unsupported(cat("dictionary encoding ", encoding_name(h.encoding)));
    const uint8_t* data = decompress(payload, static_cast<size_t>(h.csize), static_cast<size_t>(h.usize));
    Cursor c{data, data + h.usize, fail_fn_};
    decode_plain_strings(c, static_cast<size_t>(h.num_values), Strings{&dict_bytes_, &dict_offsets_});
    have_dict_ = true;
  }

  // v1: levels (length-prefixed) and values compressed together; v2: levels uncompressed
  // and without prefixes, then the values, compressed or not.
  void data_page(const PageHeader& h, const uint8_t* payload) {
    const auto n = static_cast<size_t>(h.num_values);
    if (h.num_values > chunk_.num_values - out_.num_entries) fail("pages hold more values than the column chunk");
    const size_t first = static_cast<size_t>(out_.num_entries);
    Cursor c{nullptr, nullptr, fail_fn_};
    if (h.type == 0) {
      c.p = decompress(payload, static_cast<size_t>(h.csize), static_cast<size_t>(h.usize));
      c.end = c.p + h.usize;
      if (node_.max_rep > 0) prefixed_levels(c, h.rep_enc, node_.max_rep, n, "repetition level", out_.rep);
      if (node_.max_def > 0) prefixed_levels(c, h.def_enc, node_.max_def, n, "definition level", out_.def);
    } else {
      if (h.rep_len < 0 || h.def_len < 0 || static_cast<int64_t>(h.rep_len) + h.def_len > std::min(h.csize, h.usize))
        fail("page v2 level lengths exceed the page");
      Cursor rc{payload, payload + h.rep_len, fail_fn_}, dc{payload + h.rep_len, payload + h.rep_len + h.def_len, fail_fn_};
      if (node_.max_rep > 0) decode_levels(rc, node_.max_rep, n, "repetition level", out_.rep);
      if (node_.max_def > 0) decode_levels(dc, node_.max_def, n, "definition level", out_.def);
      const uint8_t* values = dc.end;
      const auto vc = static_cast<size_t>(h.csize - h.rep_len - h.def_len);
      const auto vu = static_cast<size_t>(h.usize - h.rep_len - h.def_len);
      const bool compressed = h.v2_compressed && chunk_.codec != 0;
      c.p = compressed ? decompress(values, vc, vu) : values;
      c.end = c.p + (compressed ? vu : vc);
    }
    out_.num_entries += h.num_values;
    // Values exist where the definition level is the maximum.
    const size_t present = node_.max_def == 0 ? n
                                              : static_cast<size_t>(std::count(out_.def.begin() + static_cast<std::ptrdiff_t>(first),
                                                                               out_.def.end(), static_cast<uint8_t>(node_.max_def)));
    decode_values(c, h.encoding, present);
  }

  void prefixed_levels(Cursor& c, int32_t encoding, int max_level, size_t n, const char* what, std::vector<uint8_t>& out) {
    if (encoding != 3) unsupported(cat(what, " encoding ", encoding_name(encoding)));
    const uint32_t len = c.u32le();
    c.need(len, what);
    Cursor lc{c.p, c.p + len, fail_fn_};
    decode_levels(lc, max_level, n, what, out);
    c.p += len;
  }

  void decode_values(Cursor& c, int32_t encoding, size_t n) {
    Strings s{&out_.bytes, &out_.offsets};
    switch (encoding) {
      case 0: decode_plain_strings(c, n, s); return;
      case 2:
      case 8: {
        if (!have_dict_) fail(cat(encoding_name(encoding), " page without a dictionary page"));
        c.need(1, "dictionary index bit width");
        const int w = *c.p++;
        if (w > 32) fail(cat("dictionary index bit width ", w));
        const uint64_t dict_size = dict_offsets_.size() - 1;
        if (n > 0 && dict_size == 0) fail("dictionary indices into an empty dictionary");
        decode_hybrid(c, w, n, dict_size - 1, "dictionary index", indices_);
        for (uint64_t i : indices_) s.add(dict_bytes_.data() + dict_offsets_[i], dict_offsets_[i + 1] - dict_offsets_[i]);
        return;
      }
      case 6: decode_delta_length(c, n, s); return;
      case 7: decode_delta_strings(c, n, s); return;
      default: unsupported(cat("encoding ", encoding_name(encoding), " (", encoding, ")"));
    }
  }

  const SchemaNode& node_;
  const File::Chunk& chunk_;
  std::string where_;
  std::function<void(const std::string&)> fail_fn_;  // for Cursor
  ColumnData out_;
  std::string dict_bytes_;
  std::vector<uint64_t> dict_offsets_{0};
  bool have_dict_ = false;
  std::vector<char> page_buf_;
  std::vector<uint64_t> indices_;
};

}  // namespace

// ---------------------------------------------------------------------------------------
// File

File::File(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ANVIL_ENSURE(fd >= 0, kNotFound, path, ": cannot open (", errno_text(), ")");
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    raise(ErrorKind::kIo, path, ": stat failed (", errno_text(), ")");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* map = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    ANVIL_ENSURE(map != MAP_FAILED, kIo, path, ": mmap failed (", errno_text(), ")");
    data_ = static_cast<const uint8_t*>(map);
  } else {
    ::close(fd);
  }
  try {
    parse_footer();
  } catch (...) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    throw;
  }
}

void File::parse_footer() {
  const std::string& path = path_;
  ANVIL_ENSURE(size_ >= 12 && std::memcmp(data_, "PAR1", 4) == 0, kInvalidInput, path,
               ": not a Parquet file (no PAR1 magic at the start)");
  ANVIL_ENSURE(std::memcmp(data_ + size_ - 4, "PAR1", 4) == 0, kInvalidInput, path,
               ": truncated Parquet file (no PAR1 magic at the end)");
  uint32_t footer_len;
  std::memcpy(&footer_len, data_ + size_ - 8, 4);
  ANVIL_ENSURE(footer_len <= size_ - 12, kInvalidInput, path, ": footer length ", footer_len,
               " is past the start of the file (truncated?)");
  const uint8_t* footer = data_ + size_ - 8 - footer_len;
  Thrift t(footer, data_ + size_ - 8, [this] { return path_ + ": footer"; });

  std::vector<RawSchemaElement> raw;
  t.read_struct([&](int32_t id, int) {
    switch (id) {
      case 2: t.read_list([&](int) { raw.push_back(parse_schema_element(t)); }); return true;
      case 3: num_rows_ = t.zigzag(); return true;
      case 4: t.read_list([&](int) { groups_.push_back(parse_row_group(t)); }); return true;
      default: return false;
    }
  });
  int leaves = 0;
  schema_ = build_schema(raw, t, &leaves);
  for (size_t g = 0; g < groups_.size(); ++g)
    ANVIL_ENSURE(static_cast<int>(groups_[g].columns.size()) == leaves, kInvalidInput, path, ": row group ", g,
                 ": ", groups_[g].columns.size(), " column chunks for ", leaves, " leaf columns");
}

File::~File() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

int File::top_level(std::string_view name) const {
  for (int c : schema_[0].children)
    if (schema_[static_cast<size_t>(c)].name == name) return c;
  return -1;
}

ColumnData File::read_column(int g, int node_index) const {
  const SchemaNode& node = schema_[static_cast<size_t>(node_index)];
  const Chunk& chunk = groups_[static_cast<size_t>(g)].columns[static_cast<size_t>(node.column)];
  ChunkDecoder d(node, chunk, cat(path_, ": row group ", g, ", column ", node.path));
  if (chunk.num_values == 0) return ColumnData{};  // an empty row group (pyarrow writes a dictionary page only)
  int64_t start = chunk.data_page_offset;
  if (chunk.dictionary_page_offset > 0 && chunk.dictionary_page_offset < start) start = chunk.dictionary_page_offset;
  if (start < 4 || chunk.total_compressed_size < 0 ||
      static_cast<uint64_t>(start) + static_cast<uint64_t>(chunk.total_compressed_size) > size_ - 8)
    d.fail(cat("column chunk [", start, ", +", chunk.total_compressed_size, ") lies outside the file"));
  return d.run(data_ + start, data_ + start + chunk.total_compressed_size, data_);
}

}  // namespace anvil::parquet
