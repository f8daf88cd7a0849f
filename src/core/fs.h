// Small file helpers that report errors with the path and the system's reason.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace anvil {

std::string read_file(const std::string& path);
// Reads the file in order, handing each chunk to fn (streaming: hashes, large files).
void read_file_chunks(const std::string& path, const std::function<void(std::string_view)>& fn);
// Writes to path.tmp.<pid>, fsyncs and renames: readers never see half a file.
void write_file_atomic(const std::string& path, const std::string& contents);
// The same in pieces: the temporary file is created at construction, written in order, and
// renamed over path by commit() once synced. Every error names path and the system's reason and
// removes the temporary file, as does destruction before commit().
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);  // creates the temporary file
  void write(const void* data, size_t n);
  void commit();
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

 private:
  [[noreturn]] void fail(const char* what);  // closes, removes the temporary file, throws kIo
  std::string path_, tmp_;
  int fd_ = -1;
};
// Opens path read-only for the caller to close, *size its size in bytes. Throws kNotFound
// "<path>: cannot open (...)" or kIo "<path>: stat failed (...)".
int open_read_only(const std::string& path, size_t* size);
bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
void make_directories(const std::string& path);
std::string path_join(const std::string& a, const std::string& b);
std::string errno_text();  // strerror(errno)

// Checks before a long run that its outputs can be written, without creating them: a
// folder that exists or can be created (its nearest existing ancestor is a folder where a
// probe file can be created and removed), a file that can be appended to or created in
// its existing folder.
// Throws kUsage "<what> <path>: ..." naming the folder at fault and the system's reason.
void check_writable_dir(const std::string& path, const std::string& what);
void check_writable_file(const std::string& path, const std::string& what);

}  // namespace anvil
