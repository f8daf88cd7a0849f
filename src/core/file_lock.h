// An advisory lock (flock) on a file, held for the life of the object: one training run
// per checkpoint folder, one writer per entry of the packed-data cache.
//
// The file names its holder: pid, host and start time. The kernel drops the lock when the
// holder's process ends, however it ends (kill -9 included), so a lock file left by a dead
// process is simply taken over, and the log says whose it was. The descriptor is
// close-on-exec: commands started by the run (--on-save) do not inherit the lock.
#pragma once

#include <string>

namespace anvil {

class FileLock {
 public:
  FileLock() = default;
  // Takes the lock on `path` (created if missing) or throws kUsage naming `what` and the
  // holder: "<what> is in use by another anvil run (pid 4242 on host h, since ...)".
  static FileLock acquire(const std::string& path, const std::string& what);
  // Waits until the lock is free (saying once who holds it), then takes it.
  static FileLock wait(const std::string& path, const std::string& what);

  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();  // clears the holder line and releases the lock

  bool held() const { return fd_ >= 0; }

 private:
  static FileLock take(const std::string& path, const std::string& what, bool block);
  int fd_ = -1;
};

}  // namespace anvil
