#include "testing.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace anvil::testing {

// The paths are compiled in; ANVIL_TEST_SHARED_DIR, ANVIL_TEST_DATA_DIR and
// ANVIL_TEST_BINARY override them for a build run elsewhere (the GPU machine).
namespace {
std::string path_or_env(const char* var, const char* compiled) {
  const char* v = std::getenv(var);
  return v && *v ? v : compiled;
}
}  // namespace

std::string shared_dir() { return path_or_env("ANVIL_TEST_SHARED_DIR", ANVIL_SHARED_DIR); }
std::string testdata_dir() { return path_or_env("ANVIL_TEST_DATA_DIR", ANVIL_TESTDATA_DIR); }
std::string anvil_binary() { return path_or_env("ANVIL_TEST_BINARY", ANVIL_BINARY); }

namespace {
std::vector<std::string>& temp_dirs() {
  static std::vector<std::string> dirs;
  static bool registered = [] {
    std::atexit([] {
      std::error_code ec;
      for (auto& d : temp_dirs()) std::filesystem::remove_all(d, ec);
    });
    return true;
  }();
  (void)registered;
  return dirs;
}
}  // namespace

std::string temp_dir(const std::string& tag) {
  std::string base = std::filesystem::temp_directory_path().string() + "/anvil-test-" + tag + "-XXXXXX";
  std::vector<char> buf(base.begin(), base.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  temp_dirs().push_back(buf.data());
  return buf.data();
}

std::string fixture_dir(const std::string& name) {
  if (name.rfind("tiny-qwen3", 0) == 0) return shared_dir() + "/fixtures/" + name;
  return testdata_dir() + "/" + name;
}

std::vector<std::string> golden_models() { return {"tiny-qwen3", "tiny-qwen3-untied", "tiny-qwen2", "tiny-llama3"}; }

std::string test_suffix(const std::string& name) {
  std::string n = name;
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}

namespace {
int exit_code_of(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }
}  // namespace

RunResult run_command(const std::string& shell_command) {
  RunResult r;
  FILE* p = ::popen((shell_command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  r.exit_code = exit_code_of(::pclose(p));
  return r;
}

// '\'' stands for a quote inside a single-quoted word.
std::string shell_quote(const std::string& text) {
  std::string q = "'";
  for (char c : text) {
    if (c == '\'') q.append("'\\''");
    else q.push_back(c);
  }
  q.push_back('\'');
  return q;
}

Background::Background(const std::string& shell_command) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    const int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::execl("/bin/sh", "sh", "-c", shell_command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  fd_ = fds[0];
}

Background::~Background() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  if (fd_ >= 0) ::close(fd_);
}

bool Background::read_more() {
  char buf[4096];
  for (;;) {
    const ssize_t n = fd_ < 0 ? 0 : ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out_.append(buf, static_cast<size_t>(n));
    return true;
  }
}

bool Background::wait_for_line(const std::string& marker) {
  for (;;) {
    const size_t at = out_.find(marker, seen_);
    const size_t end = at == std::string::npos ? std::string::npos : out_.find('\n', at);
    if (end != std::string::npos) {
      seen_ = end + 1;
      return true;
    }
    if (!read_more()) return false;
  }
}

RunResult Background::finish() {
  while (read_more()) {
  }
  RunResult r;
  r.out = out_;
  if (pid_ > 0) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    r.exit_code = exit_code_of(status);
    pid_ = -1;
  }
  return r;
}

pid_t child_with_env(pid_t parent, const std::string& entry) {
  const std::string task = "/proc/" + std::to_string(parent) + "/task";
  for (const auto& t : std::filesystem::directory_iterator(task)) {
    std::ifstream children(t.path() / "children");
    pid_t child;
    while (children >> child) {
      std::ifstream env("/proc/" + std::to_string(child) + "/environ");
      std::string e;
      while (std::getline(env, e, '\0'))
        if (e == entry) return child;
    }
  }
  return -1;
}

// The safetensors layout written out here (the helpers link no anvil code): an 8-byte
// little-endian header length, the JSON header padded with spaces to 8 bytes, the data.
void write_random_blocks(const std::string& path, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> ids(static_cast<size_t>(rows * cols));
  for (auto& x : ids) x = static_cast<int64_t>(rng() % 1000);
  const size_t bytes = ids.size() * sizeof(int64_t);
  std::string header = "{\"input_ids\":{\"dtype\":\"I64\",\"shape\":[" + std::to_string(rows) + "," +
                       std::to_string(cols) + "],\"data_offsets\":[0," + std::to_string(bytes) + "]}}";
  header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t n = header.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header;
  out.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(bytes));
}

std::vector<std::string> tiny_train_args(const std::string& blocks, int64_t steps,
                                         const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"train", "--device", "cpu", "--model", shared_dir() + "/fixtures/tiny-qwen3",
                                "--data", blocks, "--steps", std::to_string(steps), "--micro-batch", "2", "--lr",
                                "1e-3", "--log-every", "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

RunResult run_anvil(const std::vector<std::string>& args) {
  std::string cmd = shell_quote(anvil_binary());
  for (auto& a : args) {
    cmd.push_back(' ');
    cmd += shell_quote(a);
  }
  return run_command(cmd + " </dev/null");
}

const std::string& oracle_python() {
  static const std::string python = path_or_env("ANVIL_TEST_PYTHON", ANVIL_TEST_PYTHON);
  return python;
}

const std::string& oracle_missing() {
  static const std::string why = [] {
    const std::string source = path_or_env("ANVIL_TEST_SOURCE_DIR", ANVIL_SOURCE_DIR);
    if (!std::filesystem::exists(oracle_python()))
      return "no Python at " + oracle_python() + " (run tools/setup.sh, or set ANVIL_TEST_PYTHON)";
    const RunResult r = run_command(shell_quote(oracle_python()) + " " + shell_quote(source + "/tools/check_requirements.py") +
                                    " " + shell_quote(source + "/tools/requirements-test.txt"));
    if (r.exit_code == 0) return std::string();
    std::string out = r.out.substr(0, r.out.find('\n'));
    return oracle_python() + ": " + (out.empty() ? "exit code " + std::to_string(r.exit_code) : out) +
           " (run tools/setup.sh)";
  }();
  return why;
}

std::string oracle_script(const std::string& name) {
  return path_or_env("ANVIL_TEST_SOURCE_DIR", ANVIL_SOURCE_DIR) + "/tests/oracle/" + name;
}

RunResult run_oracle(const std::string& name, const std::vector<std::string>& args) {
  std::string cmd = shell_quote(oracle_python()) + " " + shell_quote(oracle_script(name));
  for (auto& a : args) {
    cmd.push_back(' ');
    cmd += shell_quote(a);
  }
  return run_command(cmd + " </dev/null");
}

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && (std::string(ci) == "true" || std::string(ci) == "1");
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

double rel_l2(const double* a, const double* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

double rel_l2(const float* a, const double* b, size_t n) {
  std::vector<double> ad(a, a + n);
  return rel_l2(ad.data(), b, n);
}

::testing::AssertionResult close_rel_l2(const std::vector<double>& got, const std::vector<double>& want,
                                        double tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  double err = rel_l2(got.data(), want.data(), got.size());
  bool any_nan = false;
  for (double g : got) any_nan |= !std::isfinite(g);
  if (err <= tol && !any_nan) return ::testing::AssertionSuccess() << "rel L2 " << err;
  double max_abs = 0, max_rel = 0, scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  long first_bad = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    double d = std::abs(got[i] - want[i]);
    max_abs = std::max(max_abs, d);
    max_rel = std::max(max_rel, d / std::max(std::abs(want[i]), 1e-12));
    if (first_bad < 0 && (!(d <= tol * scale))) first_bad = static_cast<long>(i);
  }
  std::ostringstream s;
  s << "rel L2 error " << err << " > " << tol << " (max abs " << max_abs << ", max rel " << max_rel;
  if (first_bad >= 0) s << ", first bad index " << first_bad << ": got " << got[first_bad] << " want " << want[first_bad];
  s << (any_nan ? ", non-finite values" : "") << ")";
  return ::testing::AssertionFailure() << s.str();
}

}  // namespace anvil::testing
