// FileLock: flock on a file held for the object's life (see file_lock.h).
#include "core/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <utility>

#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"

namespace anvil {
namespace {

std::string holder_of(int fd) {
  std::string text(512, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

std::string this_holder() {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return cat("pid ", ::getpid(), " on host ", host, ", since ", when);
}

}  // namespace

FileLock FileLock::take(const std::string& path, const std::string& what, bool block) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ANVIL_ENSURE(fd >= 0, kIo, path, ": cannot open the lock file (", errno_text(), ")");
  FileLock lock;
  lock.fd_ = fd;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const std::string holder = holder_of(fd);
    const std::string who = holder.empty() ? std::string("a process") : holder;
    ANVIL_ENSURE(errno == EWOULDBLOCK && block, kUsage, what, " is in use by another anvil run (", who,
                 "; lock file ", path, "): wait for it to end, or use another folder");
    log_info(what, " is in use by another anvil run (", who, "): waiting for it");
    while (::flock(fd, LOCK_EX) != 0)
      ANVIL_ENSURE(errno == EINTR, kIo, path, ": lock failed (", errno_text(), ")");
  }
  const std::string stale = holder_of(fd);
  if (!stale.empty())
    log_info("taking over the lock ", path, " left by a run that is no longer running (", stale, ")");
  const std::string me = this_holder() + "\n";
  ANVIL_ENSURE(::ftruncate(fd, 0) == 0 && ::pwrite(fd, me.data(), me.size(), 0) == static_cast<ssize_t>(me.size()),
               kIo, path, ": cannot write the lock holder (", errno_text(), ")");
  return lock;
}

FileLock FileLock::acquire(const std::string& path, const std::string& what) { return take(path, what, false); }
FileLock FileLock::wait(const std::string& path, const std::string& what) { return take(path, what, true); }

FileLock::FileLock(FileLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    FileLock gone(std::move(*this));
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

FileLock::~FileLock() {
  if (fd_ < 0) return;
  [[maybe_unused]] const int rc = ::ftruncate(fd_, 0);  // best effort: an empty file reads as no holder
  ::close(fd_);  // releases the lock
}

}  // namespace anvil
