// Line-by-line reading of JSONL files, plain, gzip or zstd compressed.
//
// The compression is recognised from the file's first bytes (gzip 1f 8b, zstd 28 b5 2f fd),
// not its name; concatenated gzip members and zstd frames are read through. Decompression
// streams in 1 MiB chunks, so a file never has to fit in memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace anvil {

class LineReader {
 public:
  explicit LineReader(const std::string& path);
  LineReader(LineReader&&) noexcept;
  ~LineReader();

  // Next line without its "\n" (and without a "\r" before it); false at the end.
  bool next(std::string& line);
  int64_t line_number() const { return line_number_; }  // 1-based number of the last line read
  const std::string& path() const { return path_; }

 private:
  struct Source;
  bool refill();
  std::string path_;
  std::unique_ptr<Source> source_;
  std::string buffer_;
  size_t pos_ = 0;
  bool eof_ = false;
  int64_t line_number_ = 0;
};

}  // namespace anvil
