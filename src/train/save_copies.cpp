#include "train/save_copies.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/duration.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "io/checkpoint_files.h"

extern char** environ;

namespace anvil {

SaveCopies::SaveCopies(std::string command) : command_(std::move(command)) {}

SaveCopies::~SaveCopies() {
  try {
    wait_all();
  } catch (...) {
  }
}

namespace {

// `sh -c 'COMMAND "$1"' anvil-on-save CHECKPOINT` in its own process group (a Ctrl-C for the
// run does not reach it), default signal handling, stdin from /dev/null, stdout and stderr
// into a pipe whose read end goes to *out.
pid_t spawn_on_save(const std::string& command, const std::string& checkpoint, int* out) {
  int fds[2];
  ANVIL_ENSURE(::pipe2(fds, O_CLOEXEC) == 0, kIo, "--on-save: pipe failed (", errno_text(), ")");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  const std::string script = command + " \"$1\"";
  const char* argv[] = {"sh", "-c", script.c_str(), "anvil-on-save", checkpoint.c_str(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/bin/sh", &actions, &attr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    raise(ErrorKind::kIo, "--on-save: cannot start /bin/sh (", std::strerror(rc), ")");
  }
  *out = fds[0];
  return pid;
}

}  // namespace

void SaveCopies::start(const std::string& checkpoint) {
  auto copy = std::make_unique<Copy>();
  copy->checkpoint = checkpoint;
  copy->pid = spawn_on_save(command_, checkpoint, &copy->out);
  Copy* c = copy.get();
  c->reader = std::thread([this, c] { watch(*c); });
  std::lock_guard<std::mutex> lock(mu_);
  copies_.push_back(std::move(copy));
  log_info("--on-save: started on ", checkpoint, " (pid ", c->pid, ")");
}

// The reader drains the output (so the command never blocks on a full pipe), keeps its last
// line, and reaps the process.
void SaveCopies::watch(Copy& c) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string tail;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(c.out, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    tail.append(buf, static_cast<size_t>(n));
    if (tail.size() > 8192) tail.erase(0, tail.size() - 4096);
  }
  ::close(c.out);
  int status = 0;
  while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
  const size_t nl = tail.find_last_of('\n');
  std::lock_guard<std::mutex> lock(mu_);
  c.last_line = nl == std::string::npos ? tail : tail.substr(nl + 1);
  c.status = status;
  c.seconds = seconds_since(t0);
  c.done = true;
}

void SaveCopies::report(Copy& c) {
  c.reported = true;
  const bool ok = WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0;
  if (ok) {
    if (newest_ok_.empty() || checkpoint_step(c.checkpoint) > checkpoint_step(newest_ok_)) newest_ok_ = c.checkpoint;
    char took[32];
    std::snprintf(took, sizeof took, "%.1f s", c.seconds);
    log_info("--on-save: ", c.checkpoint, " done in ", took);
    return;
  }
  ++failed_;
  const std::string how = WIFEXITED(c.status) ? cat("exit code ", WEXITSTATUS(c.status))
                                              : cat("killed by signal ", WTERMSIG(c.status));
  log_warn("--on-save: '", command_, "' failed on ", c.checkpoint, " with ", how, "; its last line: ",
           c.last_line.empty() ? std::string("(no output)") : "'" + c.last_line + "'");
}

void SaveCopies::report_finished() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : copies_)
    if (c->done && !c->reported) report(*c);
}

std::vector<std::string> SaveCopies::pinned() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& c : copies_)
    if (!c->done || !c->reported) out.push_back(c->checkpoint);
  if (!newest_ok_.empty()) out.push_back(newest_ok_);
  return out;
}

int SaveCopies::wait_all() {
  size_t running = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : copies_) running += !c->done;
  }
  if (running > 0) log_info("--on-save: waiting for ", running, " cop", running == 1 ? "y" : "ies", " still running");
  for (auto& c : copies_)
    if (c->reader.joinable()) c->reader.join();
  report_finished();
  return failed_;
}

}  // namespace anvil
