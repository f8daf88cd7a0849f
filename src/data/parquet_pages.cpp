// The pages of one column chunk: page headers, decompression (snappy, gzip, zstd), then levels
// and values assembled into a ColumnData by File::read_column (see parquet.h).
#include <snappy.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "data/parquet.h"
#include "data/parquet_encodings.h"
#include "data/parquet_thrift.h"

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

// Whether the zstd frame at src holds `size` bytes, as far as it says: its recorded content size,
// where the writer recorded one.
bool zstd_size_agrees(const uint8_t* src, size_t n, size_t size) {
  const unsigned long long recorded = ZSTD_getFrameContentSize(src, n);
  if (recorded == ZSTD_CONTENTSIZE_ERROR) return false;
  return recorded == ZSTD_CONTENTSIZE_UNKNOWN || recorded == size;
}

struct PageHeader {
  int32_t type = -1, usize = -1, csize = -1;  // 0 data v1, 1 index, 2 dictionary, 3 data v2
  int32_t num_values = -1, encoding = -1, def_enc = 3, rep_enc = 3;
  int32_t def_len = 0, rep_len = 0;  // v2: level bytes before the values
  bool v2_compressed = true;
};

// The fields of a DataPageHeader (id 5), DictionaryPageHeader (7) or DataPageHeaderV2 (8) into h.
void parse_page_kind_header(Thrift& t, int32_t id, PageHeader& h) {
  t.read_struct([&](int32_t f, int) {
    if (id == 5) return t.i32_field(f, {{1, &h.num_values}, {2, &h.encoding}, {3, &h.def_enc}, {4, &h.rep_enc}});
    if (id == 7) return t.i32_field(f, {{1, &h.num_values}, {2, &h.encoding}});
    if (f == 7) {
      h.v2_compressed = t.bool_field();
      return true;
    }
    return t.i32_field(f, {{1, &h.num_values}, {4, &h.encoding}, {5, &h.def_len}, {6, &h.rep_len}});
  });
}

PageHeader parse_page_header(Thrift& t) {
  PageHeader h;
  t.read_struct([&](int32_t id, int) {
    if (id == 5 || id == 7 || id == 8) {
      parse_page_kind_header(t, id, h);
      return true;
    }
    return t.i32_field(id, {{1, &h.type}, {2, &h.usize}, {3, &h.csize}});
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
    // The header's size is checked against what the compressed bytes can hold before a buffer
    // of it is made: snappy and zstd record the size, deflate expands at most 1032 times.
    const auto* s = reinterpret_cast<const char*>(src);
    size_t len = 0;
    const bool fits = chunk_.codec == 1   ? snappy::GetUncompressedLength(s, n, &len) && len == size
                      : chunk_.codec == 2 ? size / 1032 <= n
                                          : zstd_size_agrees(src, n, size);
    if (!fits) fail(cat("corrupt ", codec_name(chunk_.codec), " page (", n, " bytes, expected ", size, " out)"));
    page_buf_.resize(size);
    bool ok = false;
    if (chunk_.codec == 1) {
      ok = snappy::RawUncompress(s, n, page_buf_.data());
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
      Cursor rc{payload, payload + h.rep_len, fail_fn_};
      Cursor dc{payload + h.rep_len, payload + h.rep_len + h.def_len, fail_fn_};
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
    const size_t present =
        node_.max_def == 0 ? n
                           : static_cast<size_t>(std::count(out_.def.begin() + static_cast<std::ptrdiff_t>(first),
                                                            out_.def.end(), static_cast<uint8_t>(node_.max_def)));
    decode_values(c, h.encoding, present);
  }

  void prefixed_levels(Cursor& c, int32_t encoding, int max_level, size_t n, const char* what,
                       std::vector<uint8_t>& out) {
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
        for (uint64_t i : indices_)
          s.add(dict_bytes_.data() + dict_offsets_[i], dict_offsets_[i + 1] - dict_offsets_[i]);
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
