// The disk benchmark: parallel sequential writes with fsync, then reads (see disk_bench.h).
#include "sys/disk_bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/fs.h"

namespace anvil {
namespace {

using Clock = std::chrono::steady_clock;

// io(fd, buf, n, at) on every request of the file, from `threads` threads, each with its own
// buffer (filled with a non-repeating pattern, so that no layer can compress it); returns
// the seconds from the first request to the end of `last` (the fsync of a write).
double run_requests(uint64_t bytes, int threads, const std::function<void(char*, uint64_t, uint64_t)>& io,
                    const std::function<void()>& last) {
  const uint64_t requests = bytes / kDiskRequest;
  std::atomic<uint64_t> next{0};
  std::exception_ptr first;
  std::mutex mu;
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::vector<char> buf(kDiskRequest);
      for (size_t i = 0; i < buf.size(); i += 8)
        buf[i] = static_cast<char>((i * 2654435761u >> 24) + static_cast<size_t>(t));
      for (uint64_t r = next++; r < requests; r = next++) {
        try {
          io(buf.data(), kDiskRequest, r * kDiskRequest);
        } catch (...) {
          std::lock_guard<std::mutex> l(mu);
          if (!first) first = std::current_exception();
          next = requests;
        }
      }
    });
  for (std::thread& t : pool) t.join();
  if (first) std::rethrow_exception(first);
  last();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void write_all(int fd, const std::string& path, const char* p, uint64_t n, uint64_t at) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(at));
    if (w < 0 && errno == EINTR) continue;
    ANVIL_ENSURE(w > 0, kIo, path, ": write failed at byte ", at, " (", errno_text(), ")");
    p += w, at += static_cast<uint64_t>(w), n -= static_cast<uint64_t>(w);
  }
}

void read_all(int fd, const std::string& path, char* p, uint64_t n, uint64_t at) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(at));
    if (r < 0 && errno == EINTR) continue;
    ANVIL_ENSURE(r > 0, kIo, path, ": read failed at byte ", at, " (", r == 0 ? "the file ended" : errno_text(), ")");
    p += r, at += static_cast<uint64_t>(r), n -= static_cast<uint64_t>(r);
  }
}

}  // namespace

DiskBench bench_disk(const std::string& dir, uint64_t bytes, int threads) {
  ANVIL_ENSURE(threads >= 1, kUsage, "anvil bench disk: --threads ", threads, " must be at least 1");
  DiskBench b;
  b.file = path_join(dir, ".anvil-bench-disk." + std::to_string(::getpid()));
  b.bytes = std::max<uint64_t>(1, (bytes + kDiskRequest - 1) / kDiskRequest) * kDiskRequest;
  b.threads = threads;
  const int fd = ::open(b.file.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ANVIL_ENSURE(fd >= 0, kIo, b.file, ": cannot create (", errno_text(), ")");
  try {
    b.write_seconds = run_requests(
        b.bytes, threads, [&](char* p, uint64_t n, uint64_t at) { write_all(fd, b.file, p, n, at); },
        [&] { ANVIL_ENSURE(::fsync(fd) == 0, kIo, b.file, ": sync failed (", errno_text(), ")"); });
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // the pages are clean after the fsync: dropped
    b.read_seconds = run_requests(
        b.bytes, threads, [&](char* p, uint64_t n, uint64_t at) { read_all(fd, b.file, p, n, at); }, [] {});
  } catch (...) {
    ::close(fd);
    ::unlink(b.file.c_str());
    throw;
  }
  ::close(fd);
  ::unlink(b.file.c_str());
  return b;
}

}  // namespace anvil
