// The launcher (see launcher.h). One poll() loop watches a self-pipe fed by the SIGCHLD,
// SIGINT and SIGTERM handlers and every worker's stdout and stderr pipes, so a death, a
// signal or a line of output is handled the moment it happens, without threads.
#include "launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bitset>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>

#include "comm/bootstrap.h"
#include "comm/socket.h"
#include "core/error.h"
#include "launch/blame.h"

extern char** environ;

namespace anvil {

namespace {

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  if (::write(g_signal_pipe[1], &b, 1) < 0) {
  }
  errno = saved;
}

// Installs the handlers for the launch and restores the previous ones after it.
class SignalScope {
 public:
  SignalScope() {
    ANVIL_ENSURE(::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, kIo, "launcher: pipe failed: ",
                 std::strerror(errno));
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~SignalScope() {
    for (size_t i = 0; i < 3; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
    ::close(g_signal_pipe[0]);
    ::close(g_signal_pipe[1]);
    g_signal_pipe[0] = g_signal_pipe[1] = -1;
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
  static constexpr int kSignals[3] = {SIGCHLD, SIGINT, SIGTERM};

 private:
  struct sigaction old_[3];
};

void write_all(int fd, const std::string& s) {
  const char* p = s.data();
  size_t left = s.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  int fds[2] = {-1, -1};  // read ends of the worker's stdout and stderr
  std::string pending[2];
  std::string last_line;
  bool running = true;
  int status = 0;
};

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return cat("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return cat("was killed by signal ", WTERMSIG(status), " (", ::strsignal(WTERMSIG(status)), ")");
  return "ended";
}

class Launch {
  using Clock = std::chrono::steady_clock;

 public:
  explicit Launch(const LaunchOptions& o) : o_(o) {}

  void run() {
    ANVIL_ENSURE(o_.nproc >= 1, kUsage, "the launcher needs at least one worker, got ", o_.nproc);
    ANVIL_ENSURE(!o_.argv.empty(), kInternal, "launcher: empty worker command");
    ANVIL_ENSURE(o_.nnodes >= 1 && o_.node_rank >= 0 && o_.node_rank < o_.nnodes, kUsage, "the launcher's node rank ",
                 o_.node_rank, " is not in [0, ", o_.nnodes, ")");
    ANVIL_ENSURE(o_.nnodes == 1 || o_.master_port > 0, kUsage,
                 "several nodes need the master port that node 0 listens on (--master-port)");
    const int port = o_.master_port > 0 ? o_.master_port : net::free_tcp_port();
    // Alone, the launcher starts every rank: a fresh secret keeps out anything else. With
    // several launchers they must agree, so the user's, which the workers inherit anyway.
    secret_ = o_.nnodes == 1 ? new_job_secret() : job_secret_from_env();
    check_job_secret(secret_, o_.master_addr);
    SignalScope signals;
    for (int r = 0; r < o_.nproc; ++r) start(o_.node_rank * o_.nproc + r, port);
    loop();
    finish();
  }

 private:
  std::vector<std::string> environment(int rank, int port) const {
    std::vector<std::pair<std::string, std::string>> ours = {
        {"RANK", std::to_string(rank)},          {"WORLD_SIZE", std::to_string(o_.nnodes * o_.nproc)},
        {"LOCAL_RANK", std::to_string(rank - o_.node_rank * o_.nproc)},
        {"LOCAL_WORLD_SIZE", std::to_string(o_.nproc)},
        {"MASTER_ADDR", o_.master_addr},         {"MASTER_PORT", std::to_string(port)}};
    if (!secret_.empty()) ours.push_back({kJobSecretVar, secret_});
    ours.insert(ours.end(), o_.env.begin(), o_.env.end());
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      const std::string key = kv.substr(0, kv.find('='));
      bool overridden = false;
      for (auto& [k, v] : ours) overridden |= (k == key);
      if (!overridden) env.push_back(kv);
    }
    for (auto& [k, v] : ours) env.push_back(k + "=" + v);
    return env;
  }

  void start(int rank, int port) {
    // Everything the child needs is built before fork(): after it, only async-signal-safe calls.
    std::vector<std::string> env = environment(rank, port);
    std::vector<char*> envp, argv;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = o_.argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    int out[2], err[2];
    ANVIL_ENSURE(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0, kIo, "launcher: pipe failed: ",
                 std::strerror(errno));
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    ANVIL_ENSURE(pid >= 0, kIo, "launcher: fork failed for rank ", rank, ": ", std::strerror(errno));
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int sig : SignalScope::kSignals) ::sigaction(sig, &dfl, nullptr);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::execve(argv[0], argv.data(), envp.data());
      const char msg[] = "launcher: cannot execute the worker command\n";
      if (::write(2, msg, sizeof msg - 1) < 0) {
      }
      ::_exit(127);
    }
    ::setpgid(pid, pid);
    ::close(out[1]);
    ::close(err[1]);
    Worker w;
    w.rank = rank;
    w.pid = pid;
    w.fds[0] = out[0];
    w.fds[1] = err[0];
    for (int fd : w.fds) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    workers_.push_back(std::move(w));
  }

  void emit(Worker& w, int stream, std::string line) {
    const std::string prefix = cat("[r", w.rank, "] ");
    const bool prefixed = line.compare(0, prefix.size(), prefix) == 0;
    const std::string bare = prefixed ? line.substr(prefix.size()) : line;
    if (!bare.empty()) w.last_line = bare;
    if (w.rank == 0 && stream == 0) write_all(o_.out_fd, line + "\n");
    else write_all(stream == 0 ? o_.out_fd : o_.err_fd, (prefixed ? line : prefix + line) + "\n");
  }

  // Reads what is available; returns false at end of file.
  bool drain(Worker& w, int stream) {
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(w.fds[stream], buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return true;  // EAGAIN: nothing more now
      if (n == 0) {
        if (!w.pending[stream].empty()) emit(w, stream, std::move(w.pending[stream]));
        w.pending[stream].clear();
        ::close(w.fds[stream]);
        w.fds[stream] = -1;
        return false;
      }
      std::string& p = w.pending[stream];
      p.append(buf, static_cast<size_t>(n));
      size_t start = 0, nl;
      while ((nl = p.find('\n', start)) != std::string::npos) {
        emit(w, stream, p.substr(start, nl - start));
        start = nl + 1;
      }
      p.erase(0, start);
    }
  }

  void signal_all(int sig) {
    sent_.set(static_cast<size_t>(sig));
    for (Worker& w : workers_)
      if (w.running) ::kill(-w.pid, sig);
  }

  void stop_others(Clock::time_point now) {
    if (stopping_) return;
    stopping_ = true;
    kill_at_ = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.grace_s));
    signal_all(SIGTERM);
  }

  // Every exit is kept, in the order reaped: whom to blame is chosen once all are in (see
  // launch/blame.h), since a worker failing on a dead peer's connection can be reaped first.
  // The first failure, unless the workers were already being stopped, stops the others.
  void reap(Clock::time_point now) {
    bool failed = false;
    for (Worker& w : workers_) {
      if (!w.running) continue;
      int status = 0;
      pid_t r = ::waitpid(w.pid, &status, WNOHANG);
      if (r != w.pid) continue;
      w.running = false;
      w.status = status;
      // Whatever the worker's own children still hold goes with it.
      ::kill(-w.pid, SIGKILL);
      const bool ours = WIFSIGNALED(status) && sent_.test(static_cast<size_t>(WTERMSIG(status)));
      const int index = static_cast<int>(&w - workers_.data());  // ranks start at node_rank * nproc
      exits_.push_back({index, status, ours});
      failed |= !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    if (failed && !stopping_) {
      failing_ = true;
      stop_others(now);
    }
  }

  void loop() {
    Clock::time_point output_deadline = Clock::time_point::max();
    for (;;) {
      const auto now = Clock::now();
      reap(now);
      bool any_running = false, any_open = false;
      for (Worker& w : workers_) {
        any_running |= w.running;
        any_open |= w.fds[0] >= 0 || w.fds[1] >= 0;
      }
      if (!any_running && output_deadline == Clock::time_point::max())
        output_deadline = now + std::chrono::seconds(1);  // output left in the pipes, at most 1 s more
      if (!any_running && (!any_open || now >= output_deadline)) return;
      if (stopping_ && now >= kill_at_ && !killed_) {
        killed_ = true;
        signal_all(SIGKILL);
      }
      std::vector<pollfd> fds{{g_signal_pipe[0], POLLIN, 0}};
      std::vector<std::pair<Worker*, int>> owners{{nullptr, 0}};
      for (Worker& w : workers_)
        for (int s = 0; s < 2; ++s)
          if (w.fds[s] >= 0) {
            fds.push_back({w.fds[s], POLLIN, 0});
            owners.push_back({&w, s});
          }
      int r = ::poll(fds.data(), fds.size(), 100);
      if (r < 0 && errno != EINTR) raise(ErrorKind::kIo, "launcher: poll failed: ", std::strerror(errno));
      if (r <= 0) continue;
      if (fds[0].revents & POLLIN) {
        unsigned char sig;
        while (::read(g_signal_pipe[0], &sig, 1) == 1) {
          if (sig == SIGCHLD) continue;  // reaped at the top of the loop
          if (interrupted_ == 0) interrupted_ = sig;
          // Forward: the workers finish their step, save and stop (however long the save
          // takes: no SIGKILL deadline); a second signal, forwarded too, stops them at once.
          signal_all(sig);
          if (!stopping_) {
            stopping_ = true;
            kill_at_ = Clock::time_point::max();
          }
        }
      }
      for (size_t k = 1; k < fds.size(); ++k)
        if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) drain(*owners[k].first, owners[k].second);
    }
  }

  void finish() {
    for (Worker& w : workers_)
      for (int s = 0; s < 2; ++s) {
        if (w.fds[s] < 0) continue;
        if (!w.pending[s].empty()) emit(w, s, w.pending[s]);
        ::close(w.fds[s]);
        w.fds[s] = -1;
      }
    const int blamed = failing_ ? worker_to_blame(exits_) : -1;
    if (blamed >= 0) {
      const Worker& w = workers_[static_cast<size_t>(blamed)];
      const int code = WIFEXITED(w.status) ? WEXITSTATUS(w.status) : -1;
      // The worker's exit code carries on: 3 no device, 2 bad input, else a failure.
      const ErrorKind kind = code == 3 ? ErrorKind::kNoDevice : code == 2 ? ErrorKind::kUsage : ErrorKind::kComm;
      raise(kind, "rank ", w.rank, " (pid ", w.pid, ") ",
            describe_exit(w.status), "; its last line: ", w.last_line.empty() ? "(no output)" : "'" + w.last_line + "'",
            ". The other ", o_.nproc - 1, " worker(s) were stopped");
    }
    if (interrupted_ != 0) {
      bool clean = true;  // every worker stopped on its own with 128 + the signal (anvil train)
      for (const Worker& w : workers_) clean &= WIFEXITED(w.status) && WEXITSTATUS(w.status) == 128 + interrupted_;
      const ErrorKind kind = interrupted_ == SIGINT ? ErrorKind::kInterrupted : ErrorKind::kTerminated;
      if (clean)
        raise(kind, "stopped by ", interrupted_ == SIGINT ? "SIGINT" : "SIGTERM", ": all ", o_.nproc,
              " workers stopped after the same step");
      raise(kind, "interrupted by ", ::strsignal(interrupted_), ": the signal was forwarded to all ", o_.nproc,
            " workers and they were stopped");
    }
  }

  const LaunchOptions& o_;
  std::string secret_;  // the job's (comm/bootstrap.h), for every worker
  std::vector<Worker> workers_;
  bool stopping_ = false, killed_ = false;
  Clock::time_point kill_at_{};
  std::bitset<NSIG> sent_;         // the signals sent to the workers so far
  std::vector<WorkerExit> exits_;  // in the order reaped
  bool failing_ = false;           // a worker failed before any stop: one is blamed
  int interrupted_ = 0;
};

}  // namespace

void launch_workers(const LaunchOptions& options) {
  Launch launch(options);
  launch.run();
}

std::string self_executable() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  ANVIL_ENSURE(n > 0, kIo, "cannot read /proc/self/exe: ", std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace anvil
