// anvil bench disk: the sequential write and read bandwidth of the disk under a folder, as
// fio's sequential jobs measure it (rw=write with end_fsync=1, then rw=read): a new file
// written by several threads in large requests at aligned offsets, the final fsync inside
// the time; its cached pages then dropped (posix_fadvise DONTNEED, which needs no root), and
// the file read back the same way. Checkpoints are written (asynchronous saves) and read
// (validation) with the same requests (io/parallel_file.h), so the two compare directly.
#pragma once

#include <cstdint>
#include <string>

namespace anvil {

constexpr uint64_t kDiskRequest = uint64_t{64} << 20;  // bytes per request, a multiple of 4096
constexpr int kDiskThreads = 4;                         // requests in flight

struct DiskBench {
  std::string file;  // written, then removed
  uint64_t bytes = 0;
  int threads = 0;
  double write_seconds = 0, read_seconds = 0;
  double write_gbps() const { return static_cast<double>(bytes) / 1e9 / write_seconds; }
  double read_gbps() const { return static_cast<double>(bytes) / 1e9 / read_seconds; }
};

// `bytes` (rounded up to a whole request) through a temporary file in dir; errors name the
// file and the system's reason, and the file is removed either way.
DiskBench bench_disk(const std::string& dir, uint64_t bytes, int threads = kDiskThreads);

}  // namespace anvil
