// A checkpoint shard's chunk checksums, checked as the shard is read, so that a resume reads
// each byte from the disk once: every 64 MiB chunk (kFileChunk, io/parallel_file.h) is
// hashed by the first reader that touches a byte of it, from the file's mapping, and the copy
// that follows finds its pages in the page cache; check_rest() hashes the chunks no reader
// touched (rank 0 verifies every chunk of every shard, while the state is read). A mismatch
// is recorded (the first found, in validate_checkpoint's words), not thrown: the caller
// decides once the state is read, falling back to an older checkpoint or refusing it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/json.h"

namespace anvil {

class ShardChecks {
 public:
  // Whether `shard` (its record in meta.json) holds chunk checksums of kFileChunk bytes; a
  // checkpoint saved before they were recorded has only the whole file's.
  static bool recorded(const Json& shard);

  // `data`, `bytes`: the file's bytes (its mapping), which outlive this.
  ShardChecks(std::string path, const void* data, uint64_t bytes, const Json& shard);

  // Hashes the chunks overlapping bytes [begin, end) that no one has claimed yet (on the
  // calling thread; others that a concurrent call claimed are left to it).
  void check(uint64_t begin, uint64_t end);
  // Hashes every chunk not yet claimed on `threads` threads, then waits until every chunk
  // claimed elsewhere is hashed too; returns error().
  std::string check_rest(int threads);
  // The first mismatch found so far; empty while every chunk hashed matches.
  std::string error() const;

 private:
  void check_chunk(size_t i);  // claims chunk i; hashes it if the claim is this call's

  std::string path_;
  const char* data_;
  uint64_t bytes_;
  std::vector<std::string> want_;
  std::unique_ptr<std::atomic<bool>[]> claimed_;
  mutable std::mutex mu_;
  std::condition_variable hashed_cv_;
  size_t hashed_ = 0;
  std::string error_;
};

}  // namespace anvil
