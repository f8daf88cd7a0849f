// The launcher (launch/launcher.h) with shell workers: environment, the rendezvous secret
// given to the workers, output relaying with rank prefixes, a killed worker named and the
// others stopped (also when a peer's error exit is reaped first), the blame rule itself, exit
// codes, SIGTERM-deaf workers killed after the grace, and SIGINT forwarding. The tests wait
// for events (a worker's line through a FIFO, the launcher's return), never for a number of
// seconds; a worker left running would print "slept" after its minute, which the tests rule
// out.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <regex>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/fs.h"
#include "launch/blame.h"
#include "launch/launcher.h"
#include "testing.h"

namespace anvil {
namespace {

struct Captured {
  std::string out, err, error;
  ErrorKind kind = ErrorKind::kInternal;
  double seconds = 0;
};

// A FIFO for the workers and the test to meet at (`echo ready > $fifo` blocks until a
// reader opens it, `read x < $fifo` until a writer does).
std::string make_fifo() {
  const std::string path = testing::temp_dir("launcher-fifo") + "/fifo";
  EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
  return path;
}

LaunchOptions shell_workers(int nproc, const std::string& script) {
  LaunchOptions o;
  o.nproc = nproc;
  o.argv = {"/bin/sh", "-c", script};
  return o;
}

Captured launch(LaunchOptions o) {
  const std::string dir = testing::temp_dir("launcher");
  const std::string out_path = dir + "/out", err_path = dir + "/err";
  FILE* out = std::fopen(out_path.c_str(), "w");
  FILE* err = std::fopen(err_path.c_str(), "w");
  o.out_fd = ::fileno(out);
  o.err_fd = ::fileno(err);
  Captured c;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    launch_workers(o);
  } catch (const Error& e) {
    c.error = e.what();
    c.kind = e.kind();
  }
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fclose(out);
  std::fclose(err);
  c.out = read_file(out_path);
  c.err = read_file(err_path);
  return c;
}

Captured launch_shell(int nproc, const std::string& script, double grace_s = 5.0) {
  LaunchOptions o = shell_workers(nproc, script);
  o.grace_s = grace_s;
  return launch(o);
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Sets an environment variable (nullptr: unsets it) for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_, old_.c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// What the workers printed as "secret X", in the order of the output.
std::vector<std::string> secrets_in(const std::string& out) {
  std::vector<std::string> secrets;
  const std::regex line(R"((?:\[r[0-9]+\] )?secret (.*))");
  std::istringstream lines(out);
  std::smatch m;
  for (std::string l; std::getline(lines, l);)
    if (std::regex_match(l, m, line)) secrets.push_back(m[1]);
  return secrets;
}

TEST(Launcher, SetsTheEnvironmentAndPrefixesLines) {
  Captured c = launch_shell(3,
                            "echo \"env $RANK $WORLD_SIZE $LOCAL_RANK $MASTER_ADDR\"; echo \"log $RANK\" >&2; "
                            "[ $RANK = 1 ] && echo \"[r1] already prefixed\" >&2; "
                            "[ -n \"$MASTER_PORT\" ] && printf 'no newline'");
  EXPECT_EQ(c.error, "");
  EXPECT_TRUE(has(c.out, "\nenv 0 3 0 127.0.0.1\n") || c.out.rfind("env 0 3 0 127.0.0.1\n", 0) == 0) << c.out;
  EXPECT_TRUE(has(c.out, "[r1] env 1 3 1 127.0.0.1\n")) << c.out;
  EXPECT_TRUE(has(c.out, "[r2] env 2 3 2 127.0.0.1\n")) << c.out;
  EXPECT_TRUE(has(c.out, "[r2] no newline\n")) << c.out;
  EXPECT_TRUE(has(c.err, "[r0] log 0\n")) << c.err;
  EXPECT_TRUE(has(c.err, "[r1] already prefixed\n")) << c.err;
  EXPECT_FALSE(has(c.err, "[r1] [r1]")) << c.err;
}

// Every worker gets the same secret for the rendezvous (comm/bootstrap.h): a fresh random
// one each launch, not the ANVIL_JOB_SECRET the launcher was given.
TEST(Launcher, GivesItsWorkersAFreshSecret) {
  const ScopedEnv users("ANVIL_JOB_SECRET", "the-users-own-secret-0123");
  const std::string script = "echo \"secret $ANVIL_JOB_SECRET\"";
  const Captured first = launch_shell(2, script), second = launch_shell(2, script);
  const std::vector<std::string> a = secrets_in(first.out), b = secrets_in(second.out);
  ASSERT_EQ(a.size(), 2u) << first.out << first.error;
  ASSERT_EQ(b.size(), 2u) << second.out << second.error;
  EXPECT_EQ(a[0], a[1]);
  EXPECT_EQ(b[0], b[1]);
  EXPECT_TRUE(std::regex_match(a[0], std::regex("[0-9a-f]{64}"))) << a[0];
  EXPECT_NE(a[0], b[0]) << "two launches, one secret";
}

// Launchers on several machines must agree: their workers keep the user's ANVIL_JOB_SECRET,
// and without one (and a master other machines can reach) none of them starts.
TEST(Launcher, SeveralNodesShareTheUsersSecretOrStartNothing) {
  LaunchOptions o = shell_workers(2, "echo \"secret $ANVIL_JOB_SECRET\"");
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_addr = "192.0.2.1";
  o.master_port = 29500;
  {
    const ScopedEnv users("ANVIL_JOB_SECRET", "the-users-own-secret-0123");
    const Captured c = launch(o);
    EXPECT_EQ(c.error, "");
    EXPECT_EQ(secrets_in(c.out), std::vector<std::string>(2, "the-users-own-secret-0123")) << c.out;
  }
  const ScopedEnv none("ANVIL_JOB_SECRET", nullptr);
  const Captured c = launch(o);
  EXPECT_EQ(c.kind, ErrorKind::kInvalidInput) << c.error;
  EXPECT_TRUE(has(c.error, "a rendezvous at 192.0.2.1 (not a loopback address: other machines can reach it) needs "
                           "ANVIL_JOB_SECRET"))
      << c.error;
  EXPECT_EQ(c.out, "") << "a worker started";
}

TEST(Launcher, AKilledWorkerIsNamedAndTheOthersAreStopped) {
  Captured c = launch_shell(4,
                            "if [ $RANK = 2 ]; then echo \"about to die\"; kill -9 $$; fi; "
                            "echo waiting; sleep 60; echo slept");
  EXPECT_EQ(c.kind, ErrorKind::kComm);
  EXPECT_TRUE(has(c.error, "rank 2 (pid ")) << c.error;
  EXPECT_TRUE(has(c.error, "killed by signal 9")) << c.error;
  EXPECT_TRUE(has(c.error, "its last line: 'about to die'")) << c.error;
  EXPECT_TRUE(has(c.error, "other 3 worker(s) were stopped")) << c.error;
  EXPECT_FALSE(has(c.out, "slept")) << "a worker ran to its end instead of being stopped\n" << c.out;
}

// The order a killed worker's race produces under load, made certain: rank 0 exits with an
// error once rank 1 is up, and rank 1 is killed by SIGKILL only when the launcher, having
// reaped rank 0, sends it SIGTERM. The killed rank is still the one named.
TEST(Launcher, AKilledWorkerIsNamedWhenAPeerErrorIsReapedFirst) {
  const std::string fifo = testing::shell_quote(make_fifo());
  Captured c = launch_shell(2,
                            "if [ $RANK = 0 ]; then read up < " + fifo + "; echo 'peer closed' >&2; exit 1; fi; "
                            "trap 'kill -9 $$' TERM; echo up > " + fifo +
                                "; sleep 60 & wait $!; echo slept");
  EXPECT_EQ(c.kind, ErrorKind::kComm);
  // Its last line depends on whether the shell reports its sleep's SIGTERM ('Terminated').
  const std::regex named(R"(rank 1 \(pid [0-9]+\) was killed by signal 9 \(Killed\); its last line: .*\. )"
                         R"(The other 1 worker\(s\) were stopped)");
  EXPECT_TRUE(std::regex_match(c.error, named)) << c.error;
  EXPECT_FALSE(has(c.out, "slept")) << c.out;
}

TEST(Launcher, AFailedExitCodeIsReportedWithTheLastLine) {
  Captured c = launch_shell(2, "if [ $RANK = 1 ]; then echo 'error: no GPU' >&2; exit 3; fi; sleep 60; echo slept");
  EXPECT_EQ(c.kind, ErrorKind::kNoDevice);
  EXPECT_TRUE(has(c.error, "rank 1 (pid ")) << c.error;
  EXPECT_TRUE(has(c.error, "exited with code 3; its last line: 'error: no GPU'")) << c.error;
  EXPECT_FALSE(has(c.out, "slept")) << "rank 0 ran to its end instead of being stopped\n" << c.out;

  // Bad input (exit 2) on a worker: the launcher's error is bad input too (exit 2).
  Captured bad = launch_shell(2, "if [ $RANK = 1 ]; then echo 'anvil train: bad row' >&2; exit 2; fi; sleep 60");
  EXPECT_EQ(bad.kind, ErrorKind::kUsage);
  EXPECT_EQ(exit_code(bad.kind), 2);
}

// Rank 1 ignores SIGTERM (its sleep inherits the ignored signal) and says so through the
// FIFO before rank 0 fails: only the SIGKILL after the grace can end it, so the launcher
// returns no sooner than the grace after rank 0's exit.
TEST(Launcher, WorkersDeafToSigtermAreKilledAfterTheGrace) {
  const std::string fifo = testing::shell_quote(make_fifo());
  const double grace_s = 0.5;
  Captured c = launch_shell(2,
                            "trap '' TERM; if [ $RANK = 0 ]; then read deaf < " + fifo + "; exit 1; fi; "
                            "echo deaf > " + fifo + "; sleep 60; echo slept",
                            grace_s);
  EXPECT_TRUE(has(c.error, "rank 0 (pid ")) << c.error;
  EXPECT_TRUE(has(c.error, "exited with code 1")) << c.error;
  EXPECT_FALSE(has(c.out, "slept")) << c.out;
  EXPECT_GE(c.seconds, grace_s) << "rank 1 was gone before the grace ran out";
}

// The test raises SIGINT once a worker is up (its line through the FIFO), so the launcher is
// in its loop with the handlers installed; the workers would otherwise run a minute and end
// with exit 0.
TEST(Launcher, ForwardsSigint) {
  const std::string fifo = make_fifo();
  const int fd = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC);  // read-write: never blocks, never sees EOF
  ASSERT_GE(fd, 0) << fifo;
  std::thread interrupter([fd] {
    char line[16] = {};
    if (::read(fd, line, sizeof line - 1) > 0 && std::string(line).rfind("started", 0) == 0) ::kill(::getpid(), SIGINT);
  });
  Captured c = launch_shell(2, "echo started > " + testing::shell_quote(fifo) + "; sleep 60; echo slept");
  if (::write(fd, "returned\n", 9) < 0) ADD_FAILURE() << "cannot wake the interrupter";  // when no worker started
  interrupter.join();
  ::close(fd);
  EXPECT_EQ(c.kind, ErrorKind::kInterrupted) << c.error;
  EXPECT_TRUE(has(c.error, "interrupted by Interrupt: the signal was forwarded to all 2 workers")) << c.error;
  EXPECT_FALSE(has(c.out, "slept")) << c.out;
}

int exited(int code) { return W_EXITCODE(code, 0); }
int killed(int sig) { return W_EXITCODE(0, sig); }

TEST(LauncherBlame, NobodyWhenEveryWorkerSucceeded) {
  EXPECT_EQ(worker_to_blame({}), -1);
  EXPECT_EQ(worker_to_blame({{0, exited(0)}, {1, exited(0)}}), -1);
}

TEST(LauncherBlame, TheFirstErrorReapedWhenNoneWasKilled) {
  EXPECT_EQ(worker_to_blame({{0, exited(0)}, {2, exited(1)}}), 2);
  EXPECT_EQ(worker_to_blame({{3, exited(1)}, {0, exited(3)}, {1, exited(1)}}), 3);
}

TEST(LauncherBlame, AWorkerKilledFromOutsideBeatsAnEarlierError) {
  EXPECT_EQ(worker_to_blame({{0, exited(1)}, {1, killed(SIGKILL)}}), 1);
  EXPECT_EQ(worker_to_blame({{2, exited(1)}, {0, exited(0)}, {3, killed(SIGSEGV)}, {1, killed(SIGKILL)}}), 3);
}

TEST(LauncherBlame, NotAWorkerKilledByTheLaunchersOwnSignal) {
  EXPECT_EQ(worker_to_blame({{0, exited(1)}, {1, killed(SIGTERM), true}}), 0);
  EXPECT_EQ(worker_to_blame({{1, exited(2)}, {0, killed(SIGKILL), true}, {2, killed(SIGABRT)}}), 2);
}

TEST(Launcher, AllWorkersSucceeding) {
  Captured c = launch_shell(2, "echo \"done $RANK\"; exit 0");
  EXPECT_EQ(c.error, "");
  EXPECT_TRUE(has(c.out, "done 0\n")) << c.out;
  EXPECT_TRUE(has(c.out, "[r1] done 1\n")) << c.out;
}

}  // namespace
}  // namespace anvil
