// Chunk checksums checked as a shard is read (see io/shard_checks.h).
#include "io/shard_checks.h"

#include <algorithm>
#include <string_view>
#include <thread>

#include "core/error.h"
#include "core/hash.h"
#include "io/parallel_file.h"
#include "io/safetensors.h"

namespace anvil {

bool ShardChecks::recorded(const Json& shard) {
  return shard.contains("chunk_xxh64") && shard.value("chunk_bytes", uint64_t{0}) == kFileChunk;
}

ShardChecks::ShardChecks(std::string path, const void* data, uint64_t bytes, const Json& shard)
    : path_(std::move(path)), data_(static_cast<const char*>(data)), bytes_(bytes) {
  for (const Json& s : shard["chunk_xxh64"]) want_.push_back(s.get<std::string>());
  const uint64_t chunks = (bytes_ + kFileChunk - 1) / kFileChunk;
  if (want_.size() != chunks) {  // validate_checkpoint's words; nothing is hashed
    error_ = cat(path_, ": ", chunks, " chunks of ", kFileChunk, " bytes, meta.json records ", want_.size());
    want_.clear();
  }
  claimed_ = std::make_unique<std::atomic<bool>[]>(want_.size());
  for (size_t i = 0; i < want_.size(); ++i) claimed_[i].store(false, std::memory_order_relaxed);
}

void ShardChecks::check(uint64_t begin, uint64_t end) {
  if (want_.empty() || begin >= end) return;
  const size_t last = std::min<size_t>(want_.size() - 1, static_cast<size_t>((end - 1) / kFileChunk));
  for (size_t i = static_cast<size_t>(begin / kFileChunk); i <= last; ++i) check_chunk(i);
}

void ShardChecks::check_chunk(size_t i) {
  if (claimed_[i].exchange(true, std::memory_order_acq_rel)) return;
  const uint64_t at = i * kFileChunk, n = std::min<uint64_t>(kFileChunk, bytes_ - at);
  read_ahead(data_ + at, n);
  const std::string sum = hash_hex(std::string_view(data_ + at, n));
  release_mapped_pages(data_ + at, n);  // out of this process; the page cache keeps them for the copy
  std::lock_guard<std::mutex> lock(mu_);
  if (sum != want_[i] && error_.empty())
    error_ = cat(path_, ": checksum ", sum, " of bytes [", at, ", ", at + n, ") differs from ", want_[i],
                 " recorded in meta.json (the file is corrupt)");
  ++hashed_;
  hashed_cv_.notify_all();
}

std::string ShardChecks::check_rest(int threads) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, threads); ++t)
    pool.emplace_back([&] {
      for (size_t i = next++; i < want_.size(); i = next++) check_chunk(i);
    });
  for (std::thread& th : pool) th.join();
  std::unique_lock<std::mutex> lock(mu_);
  hashed_cv_.wait(lock, [&] { return hashed_ == want_.size(); });
  return error_;
}

std::string ShardChecks::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

}  // namespace anvil
