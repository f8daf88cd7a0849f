// Test helpers: fixture paths, tensor comparison with useful failure messages, running the
// anvil binary (to its end, or in the background while the test waits for lines of its
// output), temporary folders, and skips that say why and fail where the thing is expected.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace anvil::testing {

std::string shared_dir();    // ../shared beside the project (the golden fixtures)
std::string testdata_dir();  // tests/data of the project
std::string anvil_binary();
std::string temp_dir(const std::string& tag);  // a fresh empty folder, removed at exit
// A golden model fixture by name: tiny-qwen3 and tiny-qwen3-untied from the shared
// fixtures, tiny-qwen2 and tiny-llama3 from the project's test data.
std::string fixture_dir(const std::string& name);
// The four golden model fixtures, and their names as test-name suffixes (dashes become _).
std::vector<std::string> golden_models();
std::string test_suffix(const std::string& name);

// A prepared-blocks file for training tests: `rows` x `cols` token ids below 1000 (the tiny
// fixture's vocabulary), input_ids I64, drawn from mt19937(seed).
void write_random_blocks(const std::string& path, int64_t rows, int64_t cols, uint32_t seed);
// The arguments of anvil train on the CPU, the tiny fixture model and `blocks`: `steps` steps of
// micro-batch 2 at lr 1e-3, the loss every step; then `extra`.
std::vector<std::string> tiny_train_args(const std::string& blocks, int64_t steps,
                                         const std::vector<std::string>& extra);

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};
RunResult run_anvil(const std::vector<std::string>& args);
RunResult run_command(const std::string& shell_command);
std::string shell_quote(const std::string& text);  // single-quoted for sh

// A shell command (sh -c) running in the background, its stdout and stderr read through one
// pipe: the test waits for a line of its output (an event), not for a number of seconds.
// Start the command with `exec` to make pid() the program's own. The destructor kills
// (SIGKILL) and reaps a process still running.
class Background {
 public:
  explicit Background(const std::string& shell_command);
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  ~Background();

  pid_t pid() const { return pid_; }
  // Reads output until a line holding `marker` has arrived after the last line found so far:
  // true then; false when the output ends without one.
  bool wait_for_line(const std::string& marker);
  // Reads the output to its end and reaps the process: its exit code (128 + the signal when
  // killed) and all its output.
  RunResult finish();
  const std::string& out() const { return out_; }

 private:
  bool read_more();  // false at the end of the output
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string out_;
  size_t seen_ = 0;  // output before this offset is searched already
};
// The child of `parent` whose environment holds the entry `entry` (e.g. "RANK=1"); -1 if none.
pid_t child_with_env(pid_t parent, const std::string& entry);

// The Python test oracles: the virtualenv tools/setup.sh makes (transformers and PyTorch on
// the CPU, tokenizers, jinja2, safetensors, pyarrow at the versions pinned in
// tools/requirements-test.txt) and the scripts in tests/oracle.
// oracle_python(): its interpreter; env ANVIL_TEST_PYTHON, else the path CMake compiled in
// (cache variable ANVIL_TEST_PYTHON, default <build>/pyenv/bin/python).
const std::string& oracle_python();
// Empty when that interpreter runs and has every pinned package at its version; otherwise
// why not, in one line. Checked once per process.
const std::string& oracle_missing();
// tests/oracle/<name>, and running it: oracle_python() tests/oracle/<name> args... (each
// argument quoted for the shell; append redirections yourself through run_command if needed).
std::string oracle_script(const std::string& name);
RunResult run_oracle(const std::string& name, const std::vector<std::string>& args);
bool in_ci();  // env CI is "true" (or "1"): a missing oracle is then a failure, not a skip
bool env_flag(const char* name);  // env `name` is set to something other than "" or "0"

// Where a test cannot run: fails when `required` (the thing is expected here: CI=true for the
// oracles and chromium, ANVIL_REQUIRE_CUDNN on the device machine), else skips; both say why.
#define ANVIL_SKIP_UNLESS_REQUIRED(required, why)                                     \
  do {                                                                                \
    if (required) FAIL() << "required here but missing: " << (why);                   \
    GTEST_SKIP() << (why) << " (skipped: not required here)";                         \
  } while (0)

// The first statement of every test that needs the Python oracles: when they are missing the
// test fails under CI=true and is skipped elsewhere, saying why in both cases.
#define ANVIL_REQUIRE_ORACLE()                                                        \
  do {                                                                                \
    const std::string& anvil_oracle_why_ = ::anvil::testing::oracle_missing();        \
    if (!anvil_oracle_why_.empty())                                                   \
      ANVIL_SKIP_UNLESS_REQUIRED(::anvil::testing::in_ci(),                           \
                                 "oracle missing (CI=true needs it): " + anvil_oracle_why_); \
  } while (0)

// Relative L2 error ||a - b|| / ||b||; b is the reference.
double rel_l2(const double* a, const double* b, size_t n);
double rel_l2(const float* a, const double* b, size_t n);
// Fails the test with max abs error, max rel error and the first index past `tol` when the
// relative L2 error exceeds tol.
::testing::AssertionResult close_rel_l2(const std::vector<double>& got, const std::vector<double>& want,
                                        double tol);

}  // namespace anvil::testing
