// Large files written and read at the disk's speed, hashed on the way: the file is cut into
// chunks of kFileChunk bytes and several threads each take the next chunk, fill it (from
// memory) or read it (pread), hash it in its turn, in file order, and write it (pwrite) at its
// offset. So the disk sees several large sequential requests in flight, as fio's sequential
// jobs do, while the XXH64 of the whole file (core/hash.h, one stream, in order) is the same as
// a one-thread pass gives. A written file's chunks are also hashed each on its own (on the
// thread that filled it), so that a reader can verify them in any order on every thread,
// with no stream to wait for. Checkpoint shards are written (asynchronous saves) and
// checksummed (validation before a resume) through these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sys/disk_bench.h"

namespace anvil {

// The requests of anvil bench disk (sys/disk_bench.h), so that a save compares with it.
constexpr uint64_t kFileChunk = kDiskRequest;  // bytes per request, a multiple of 4096
constexpr int kFileThreads = kDiskThreads;     // requests in flight per file

// fill(at, n, out): the file's bytes [at, at + n) into out; called from several threads at once.
using FileBytes = std::function<void(uint64_t, uint64_t, char*)>;
// Stops a write at byte `at` of its file (tests' fault injection: io/checkpoint_files.h): the
// writer of the chunk holding `at` writes up to it and calls `hit`, which exits or throws.
struct WriteStop {
  uint64_t at = UINT64_MAX;
  std::function<void()> hit;
};

// A file's checksums (XXH64 hex): of all its bytes (xxhsum -H1), and of each kFileChunk-byte
// chunk (the last one shorter), in file order.
struct FileSums {
  std::string xxh64;
  std::vector<std::string> chunks;
};

// Writes `total` bytes to the open file fd (path for messages) with `threads` threads; returns
// their checksums. The first error (naming path, the system's reason and the bytes missing)
// stops every thread and is thrown once they have ended.
FileSums write_hashed(int fd, const std::string& path, uint64_t total, const FileBytes& fill, int threads,
                      const WriteStop& stop = {});
// Asks the kernel to read [data, data + bytes) of a mapped file now, in large requests, rather
// than page by page as a copy faults on it (madvise WILLNEED; a hint, never an error).
void read_ahead(const void* data, size_t bytes);
// The XXH64 hex of a file's bytes, read with `threads` threads and the kernel's readahead.
std::string hash_file_parallel(const std::string& path, int threads = kFileThreads);
// The XXH64 hex of each kFileChunk-byte chunk of a file (FileSums::chunks), read and hashed
// by `threads` threads, each chunk whole on one of them, in any order.
std::vector<std::string> hash_file_chunks(const std::string& path, int threads = kFileThreads);

}  // namespace anvil
