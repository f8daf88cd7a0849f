// The launcher (launch/launcher.h) with shell workers: environment, output relaying with rank
// prefixes, a killed worker named within seconds, exit codes, SIGTERM-deaf workers, and
// SIGINT forwarding.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "core/error.h"
#include "core/fs.h"
#include "launch/launcher.h"
#include "testing.h"

namespace anvil {
namespace {

struct Captured {
  std::string out, err, error;
  ErrorKind kind = ErrorKind::kInternal;
  double seconds = 0;
};

Captured launch_shell(int nproc, const std::string& script, double grace_s = 5.0) {
  const std::string dir = testing::temp_dir("launcher");
  const std::string out_path = dir + "/out", err_path = dir + "/err";
  FILE* out = std::fopen(out_path.c_str(), "w");
  FILE* err = std::fopen(err_path.c_str(), "w");
  LaunchOptions o;
  o.nproc = nproc;
  o.argv = {"/bin/sh", "-c", script};
  o.grace_s = grace_s;
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

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

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

TEST(Launcher, AKilledWorkerIsNamedAndTheOthersStopWithinSeconds) {
  Captured c = launch_shell(4,
                            "if [ $RANK = 2 ]; then echo \"about to die\"; sleep 0.2; kill -9 $$; fi; "
                            "echo waiting; sleep 60");
  EXPECT_EQ(c.kind, ErrorKind::kComm);
  EXPECT_TRUE(has(c.error, "rank 2 (pid ")) << c.error;
  EXPECT_TRUE(has(c.error, "killed by signal 9")) << c.error;
  EXPECT_TRUE(has(c.error, "its last line: 'about to die'")) << c.error;
  EXPECT_TRUE(has(c.error, "other 3 worker(s) were stopped")) << c.error;
  EXPECT_LT(c.seconds, 5.0);
}

TEST(Launcher, AFailedExitCodeIsReportedWithTheLastLine) {
  Captured c = launch_shell(2, "if [ $RANK = 1 ]; then echo 'error: no GPU' >&2; exit 3; fi; sleep 60");
  EXPECT_EQ(c.kind, ErrorKind::kNoDevice);
  EXPECT_TRUE(has(c.error, "rank 1 (pid ")) << c.error;
  EXPECT_TRUE(has(c.error, "exited with code 3; its last line: 'error: no GPU'")) << c.error;
  EXPECT_LT(c.seconds, 5.0);
}

TEST(Launcher, WorkersDeafToSigtermAreKilledAfterTheGrace) {
  Captured c = launch_shell(2, "trap '' TERM; if [ $RANK = 0 ]; then sleep 0.3; exit 1; fi; sleep 60", 0.5);
  EXPECT_TRUE(has(c.error, "rank 0 (pid ")) << c.error;
  EXPECT_TRUE(has(c.error, "exited with code 1")) << c.error;
  EXPECT_GE(c.seconds, 0.8);  // 0.3 s, then the 0.5 s grace before SIGKILL
  EXPECT_LT(c.seconds, 4.0);
}

TEST(Launcher, ForwardsSigint) {
  std::thread interrupter([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ::kill(::getpid(), SIGINT);
  });
  Captured c = launch_shell(2, "echo started; sleep 60");
  interrupter.join();
  EXPECT_TRUE(has(c.error, "interrupted by Interrupt")) << c.error;
  EXPECT_LT(c.seconds, 5.0);
}

TEST(Launcher, AllWorkersSucceeding) {
  Captured c = launch_shell(2, "exit 0");
  EXPECT_EQ(c.error, "");
  EXPECT_LT(c.seconds, 3.0);
}

}  // namespace
}  // namespace anvil
