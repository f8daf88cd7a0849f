// LineReader over plain, gzip (zlib) and zstd streams (see jsonl.h).
#include "data/jsonl.h"

#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/fs.h"

namespace anvil {

struct LineReader::Source {
  enum class Kind { kPlain, kGzip, kZstd } kind = Kind::kPlain;
  std::string path;
  std::FILE* file = nullptr;
  std::vector<unsigned char> in;
  size_t in_pos = 0, in_len = 0;
  bool file_eof = false;
  z_stream z{};
  bool z_init = false;
  ZSTD_DStream* zstd = nullptr;

  ~Source() {
    if (z_init) inflateEnd(&z);
    if (zstd) ZSTD_freeDStream(zstd);
    if (file) std::fclose(file);
  }

  bool fill_input() {  // false when the file is exhausted
    if (in_pos < in_len) return true;
    if (file_eof) return false;
    in_len = std::fread(in.data(), 1, in.size(), file);
    in_pos = 0;
    if (in_len < in.size()) {
      ANVIL_ENSURE(!std::ferror(file), kIo, path, ": read failed (", errno_text(), ")");
      file_eof = true;
    }
    return in_len > 0;
  }

  // Appends up to about one chunk of decompressed bytes to out; false at the end of data.
  bool read(std::string& out) {
    constexpr size_t kChunk = 1 << 20;
    if (kind == Kind::kPlain) {
      if (!fill_input()) return false;
      out.append(reinterpret_cast<const char*>(in.data() + in_pos), in_len - in_pos);
      in_pos = in_len;
      return true;
    }
    const size_t start = out.size();
    out.resize(start + kChunk);
    size_t produced = 0;
    while (produced == 0) {
      if (!fill_input()) break;
      if (kind == Kind::kGzip) {
        z.next_in = in.data() + in_pos;
        z.avail_in = static_cast<uInt>(in_len - in_pos);
        z.next_out = reinterpret_cast<Bytef*>(&out[start]);
        z.avail_out = static_cast<uInt>(kChunk);
        const int rc = inflate(&z, Z_NO_FLUSH);
        ANVIL_ENSURE(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR, kInvalidInput, path,
                     ": corrupt gzip data (", z.msg ? z.msg : "zlib error", ")");
        in_pos = in_len - z.avail_in;
        produced = kChunk - z.avail_out;
        if (rc == Z_STREAM_END) inflateReset(&z);  // another gzip member may follow
      } else {
        ZSTD_inBuffer ib{in.data(), in_len, in_pos};
        ZSTD_outBuffer ob{&out[start], kChunk, 0};
        const size_t rc = ZSTD_decompressStream(zstd, &ob, &ib);
        ANVIL_ENSURE(!ZSTD_isError(rc), kInvalidInput, path, ": corrupt zstd data (", ZSTD_getErrorName(rc), ")");
        in_pos = ib.pos;
        produced = ob.pos;
      }
    }
    out.resize(start + produced);
    return produced > 0;
  }
};

LineReader::LineReader(const std::string& path) : path_(path), source_(std::make_unique<Source>()) {
  Source& s = *source_;
  s.path = path;
  s.file = std::fopen(path.c_str(), "rb");
  ANVIL_ENSURE(s.file != nullptr, kNotFound, path, ": cannot open (", errno_text(), ")");
  s.in.resize(1 << 20);
  s.fill_input();
  const unsigned char* b = s.in.data();
  if (s.in_len >= 2 && b[0] == 0x1f && b[1] == 0x8b) {
    s.kind = Source::Kind::kGzip;
    ANVIL_ENSURE(inflateInit2(&s.z, 15 + 16) == Z_OK, kInternal, "zlib inflateInit2 failed");
    s.z_init = true;
  } else if (s.in_len >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd) {
    s.kind = Source::Kind::kZstd;
    s.zstd = ZSTD_createDStream();
    ANVIL_ENSURE(s.zstd != nullptr, kInternal, "ZSTD_createDStream failed");
    ZSTD_initDStream(s.zstd);
  }
}

LineReader::LineReader(LineReader&&) noexcept = default;
LineReader::~LineReader() = default;

bool LineReader::refill() {
  if (eof_) return false;
  buffer_.erase(0, pos_);
  pos_ = 0;
  if (!source_->read(buffer_)) eof_ = true;
  return !eof_;
}

bool LineReader::next(std::string& line) {
  for (;;) {
    const size_t nl = buffer_.find('\n', pos_);
    if (nl != std::string::npos) {
      size_t end = nl;
      if (end > pos_ && buffer_[end - 1] == '\r') --end;
      line.assign(buffer_, pos_, end - pos_);
      pos_ = nl + 1;
      ++line_number_;
      return true;
    }
    if (!refill()) {
      if (pos_ >= buffer_.size()) return false;
      line.assign(buffer_, pos_, std::string::npos);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      pos_ = buffer_.size();
      ++line_number_;
      return true;
    }
  }
}

}  // namespace anvil
