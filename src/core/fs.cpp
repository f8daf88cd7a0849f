// File helpers: reads, atomic writes, paths, and write checks (see fs.h).
#include "core/fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace anvil {

std::string errno_text() { return std::strerror(errno); }

void read_file_chunks(const std::string& path, const std::function<void(std::string_view)>& fn) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ANVIL_ENSURE(fd >= 0, kNotFound, path, ": cannot open (", errno_text(), ")");
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::string why = errno_text();
      ::close(fd);
      raise(ErrorKind::kIo, path, ": read failed (", why, ")");
    }
    if (n == 0) break;
    try {
      fn(std::string_view(buf.data(), static_cast<size_t>(n)));
    } catch (...) {
      ::close(fd);
      throw;
    }
  }
  ::close(fd);
}

std::string read_file(const std::string& path) {
  std::string out;
  read_file_chunks(path, [&](std::string_view chunk) { out.append(chunk); });
  return out;
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  AtomicFileWriter file(path);
  file.write(contents.data(), contents.size());
  file.commit();
}

AtomicFileWriter::AtomicFileWriter(const std::string& path)
    : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ANVIL_ENSURE(fd_ >= 0, kIo, tmp_, ": cannot create (", errno_text(), ")");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicFileWriter::fail(const char* what) {
  const std::string why = errno_text();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  raise(ErrorKind::kIo, path_, ": ", what, " failed (", why, ")");
}

void AtomicFileWriter::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("write");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFileWriter::commit() {
  const int fd = fd_;
  fd_ = -1;  // closed below, whatever happens
  if (::fsync(fd) != 0 || ::close(fd) != 0) fail("sync");
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("rename");
}

int open_read_only(const std::string& path, size_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ANVIL_ENSURE(fd >= 0, kNotFound, path, ": cannot open (", errno_text(), ")");
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    raise(ErrorKind::kIo, path, ": stat failed (", errno_text(), ")");
  }
  *size = static_cast<size_t>(st.st_size);
  return fd;
}

bool path_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void make_directories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  ANVIL_ENSURE(!ec, kIo, path, ": cannot create directory (", ec.message(), ")");
}

std::string path_join(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (!b.empty() && b[0] == '/') return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

namespace {

// Creates and removes a probe file in `dir`; the system's reason when that fails.
std::string probe(const std::string& dir) {
  const std::string p = path_join(dir, ".anvil-probe." + std::to_string(::getpid()));
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return errno_text();
  ::close(fd);
  ::unlink(p.c_str());
  return "";
}

}  // namespace

void check_writable_dir(const std::string& path, const std::string& what) {
  std::filesystem::path p = std::filesystem::absolute(path).lexically_normal();
  std::filesystem::path at = p;
  while (!path_exists(at.string()) && at.has_parent_path() && at.parent_path() != at) at = at.parent_path();
  ANVIL_ENSURE(is_directory(at.string()), kUsage, what, " ", path, ": cannot be created, ", at.string(),
               " is not a folder");
  const std::string why = probe(at.string());
  ANVIL_ENSURE(why.empty(), kUsage, what, " ", path, ": ",
               at == p ? cat("cannot write in it (", why, ")") : cat("cannot be created in ", at.string(), " (", why, ")"));
}

void check_writable_file(const std::string& path, const std::string& what) {
  ANVIL_ENSURE(!is_directory(path), kUsage, what, " ", path, ": is a folder, not a file");
  if (path_exists(path)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    ANVIL_ENSURE(fd >= 0, kUsage, what, " ", path, ": cannot write to it (", errno_text(), ")");
    ::close(fd);
    return;
  }
  const std::string parent = std::filesystem::absolute(path).lexically_normal().parent_path().string();
  ANVIL_ENSURE(is_directory(parent), kUsage, what, " ", path, ": the folder ", parent, " does not exist");
  const std::string why = probe(parent);
  ANVIL_ENSURE(why.empty(), kUsage, what, " ", path, ": cannot be created in ", parent, " (", why, ")");
}

}  // namespace anvil
