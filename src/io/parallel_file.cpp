// Chunked, multi-threaded writes and reads of a file hashed in order (see parallel_file.h).
#include "io/parallel_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "core/hash.h"

namespace anvil {
namespace {

// The chunks of one file handed out in order to several threads, each hashed in its turn.
class ChunkRun {
 public:
  explicit ChunkRun(uint64_t total) : total_(total), chunks_((total + kFileChunk - 1) / kFileChunk) {}

  using Work = std::function<void(uint64_t at, uint64_t n, char* buf)>;
  // work(at, n, buf) for every chunk, on `threads` threads with a buffer each; work calls
  // hash_turn once per chunk, or none at all. Rethrows the first error once every thread has
  // ended; returns the hash of the chunks hash_turn was given.
  std::string run(int threads, const Work& work) {
    std::vector<std::thread> pool;
    const uint64_t used = std::max<uint64_t>(1, std::min<uint64_t>(static_cast<uint64_t>(threads), chunks_));
    for (uint64_t t = 0; t < used; ++t) pool.emplace_back([&] { loop(work); });
    for (std::thread& t : pool) t.join();
    if (first_) std::rethrow_exception(first_);
    return hash_.hex();
  }

  uint64_t chunks() const { return chunks_; }

  // Hashes the chunk starting at `at` once every chunk before it is hashed.
  void hash_turn(uint64_t at, const char* p, uint64_t n) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return hashed_ * kFileChunk == at || first_; });
    if (first_) throw Stopped();
    hash_.update(p, n);
    ++hashed_;
    cv_.notify_all();
  }

 private:
  struct Stopped {};  // another thread failed: this one ends quietly

  void loop(const Work& work) {
    std::vector<char> buf(std::min(kFileChunk, total_));  // a small file needs no more
    for (;;) {
      uint64_t i = 0;
      {
        std::lock_guard<std::mutex> l(mu_);
        if (first_ || next_ >= chunks_) return;
        i = next_++;
      }
      const uint64_t at = i * kFileChunk;
      try {
        work(at, std::min(kFileChunk, total_ - at), buf.data());
      } catch (const Stopped&) {
        return;
      } catch (...) {
        std::lock_guard<std::mutex> l(mu_);
        if (!first_) first_ = std::current_exception();
        cv_.notify_all();
        return;
      }
    }
  }

  uint64_t total_, chunks_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_ = 0, hashed_ = 0;
  std::exception_ptr first_;
  Xxh64 hash_;
};

// Reads [at, at + n) of the open file fd into buf; an error names path and the byte.
void read_at(int fd, const std::string& path, uint64_t total, uint64_t at, uint64_t n, char* buf) {
  for (uint64_t done = 0; done < n;) {
    const ssize_t r = ::pread(fd, buf + done, n - done, static_cast<off_t>(at + done));
    if (r < 0 && errno == EINTR) continue;
    ANVIL_ENSURE(r > 0, kIo, path, ": read failed at byte ", at + done, " of ", total, " (",
                 r == 0 ? std::string("the file ended") : errno_text(), ")");
    done += static_cast<uint64_t>(r);
  }
}

}  // namespace

FileSums write_hashed(int fd, const std::string& path, uint64_t total, const FileBytes& fill, int threads,
                      const WriteStop& stop) {
  ChunkRun run(total);
  std::atomic<uint64_t> written{0};
  FileSums sums;
  sums.chunks.resize(run.chunks());
  sums.xxh64 = run.run(threads, [&](uint64_t at, uint64_t n, char* buf) {
    fill(at, n, buf);
    sums.chunks[at / kFileChunk] = hash_hex(std::string_view(buf, n));
    run.hash_turn(at, buf, n);
    const uint64_t end = stop.at >= at && stop.at < at + n ? stop.at : at + n;
    for (uint64_t done = at; done < at + n;) {
      ssize_t w = -1;
      if (done == end) stop.hit();  // sets errno (a full disk), or exits
      else
        w = ::pwrite(fd, buf + (done - at), std::min<uint64_t>(end - done, uint64_t{1} << 30), static_cast<off_t>(done));
      if (w < 0 && errno == EINTR && done < end) continue;
      ANVIL_ENSURE(w > 0, kIo, path, ": write failed (", errno_text(), "): ", total - written.load(), " of its ",
                   total, " bytes missing");
      done += static_cast<uint64_t>(w);
      written += static_cast<uint64_t>(w);
    }
  });
  return sums;
}

void read_ahead(const void* data, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = reinterpret_cast<uintptr_t>(data) / page * page;
  if (bytes > 0) ::madvise(reinterpret_cast<void*>(b), reinterpret_cast<uintptr_t>(data) + bytes - b, MADV_WILLNEED);
}

namespace {

// work(run, fd, total) on path opened for reading sequentially; the file closed after it.
template <class Work>
auto read_chunks(const std::string& path, const Work& work) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ANVIL_ENSURE(fd >= 0, kIo, path, ": cannot open (", errno_text(), ")");
  struct stat st;
  const uint64_t total = ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  ChunkRun run(total);
  try {
    auto out = work(run, fd, total);
    ::close(fd);
    return out;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

}  // namespace

std::string hash_file_parallel(const std::string& path, int threads) {
  return read_chunks(path, [&](ChunkRun& run, int fd, uint64_t total) {
    return run.run(threads, [&](uint64_t at, uint64_t n, char* buf) {
      read_at(fd, path, total, at, n, buf);
      run.hash_turn(at, buf, n);
    });
  });
}

std::vector<std::string> hash_file_chunks(const std::string& path, int threads) {
  return read_chunks(path, [&](ChunkRun& run, int fd, uint64_t total) {
    std::vector<std::string> sums(run.chunks());
    run.run(threads, [&](uint64_t at, uint64_t n, char* buf) {
      read_at(fd, path, total, at, n, buf);
      sums[at / kFileChunk] = hash_hex(std::string_view(buf, n));
    });
    return sums;
  });
}

}  // namespace anvil
