// The kill battery (ctest label "battery", outside the default run: docs/building.md). A run
// on 2 CPU ranks under anvil's launcher (the tiny fixture model, an asynchronous save every
// 3 steps, --keep-last 2) is killed with SIGKILL, every process of it at once (the
// launcher's process group and each rank's, by their ids), again and again, and restarted
// each time with the same command, which resumes from --ckpt-dir. Each kill is aimed either
// at a moment drawn uniformly over an uninterrupted run's duration, or at an event of a phase:
// a "step N/" line (mid-step), and, seen through inotify on the checkpoint folder, a save's
// temporary folder made (the snapshot), a shard file created (its write), anvil_config.toml
// or meta.json created in it (the commit), and an old checkpoint renamed or deleted (the
// rotation of --keep-last). After every kill, with every process of the job gone:
//  - every folder that claims to be a complete checkpoint (step-N with a meta.json) passes
//    validation, every file's size and checksum against meta.json;
//  - the folder holds at most keep-last + 1 checkpoint folders, complete or not;
// and at the end of each run (a run that completes starts the next one afresh), every loss
// its metrics file holds, the steps run again after a resume included, equals the
// uninterrupted run's, bit for bit. Where each kill landed is read from what it left on
// disk, and the count per phase is printed.
// ANVIL_BATTERY_KILLS (default 50) and ANVIL_BATTERY_SEED (default 37) set the number of
// kills and the seed of the plan (what each kill aims at), which each failure names.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "core/fs.h"
#include "core/json.h"
#include "io/checkpoint_files.h"
#include "testing.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kSteps = 30, kSaveEvery = 3, kKeepLast = 2, kRanks = 2;

int64_t env_or(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::stoll(v) : fallback;
}

// What a kill waits for: a moment of the run, or the nth event of a phase in this job.
enum class Aim { kUniform, kStep, kSnapshot, kWrite, kCommit, kRotation };
const char* aim_name(Aim a) {
  static const char* names[] = {"a uniform moment", "a step", "a snapshot", "a shard write", "a commit", "a rotation"};
  return names[static_cast<int>(a)];
}

struct Plan {
  Aim aim = Aim::kUniform;
  int nth = 1;         // the nth event of the phase in the job
  double at_s = 0;     // kUniform: seconds after the job starts
};

// The job: anvil's launcher in a process group of its own, its output through one pipe.
class Job {
 public:
  explicit Job(const std::vector<std::string>& argv) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::setpgid(0, 0);
      const int null = ::open("/dev/null", O_RDONLY);
      ::dup2(null, 0);
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);  // as the child does: whichever runs first
    ::close(fds[1]);
    fd_ = fds[0];
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
    started_ = Clock::now();
  }
  ~Job() {
    if (pid_ > 0) kill_all();
    if (fd_ >= 0) ::close(fd_);
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  int fd() const { return fd_; }
  const std::string& out() const { return out_; }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - started_).count(); }

  // Appends what the pipe holds now; false at its end (every process of the job gone).
  bool read_output() {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n > 0) {
        out_.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return !(n == 0);
    }
  }

  // SIGKILL to the launcher's process group and each rank's (the launcher gives every rank a
  // group of its own), back to back; returns once every one of those processes has ended.
  void kill_all() {
    std::vector<int> ranks;  // pidfds: a rank is waited for by its own handle, not its pid
    for (pid_t r : children()) {
      const int fd = static_cast<int>(::syscall(SYS_pidfd_open, r, 0));
      if (fd < 0) continue;  // already gone
      ranks.push_back(fd);
      ::kill(-r, SIGKILL);
      ::syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0);  // one still in the launcher's group
    }
    ::kill(-pid_, SIGKILL);
    reap();
    for (int fd : ranks) {
      pollfd p{fd, POLLIN, 0};
      while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
      }
      ::close(fd);
    }
    while (read_output()) wait_readable(-1);
  }

  // Reads the output to its end and reaps the launcher: its exit code (128 + a signal).
  int finish() {
    while (read_output()) wait_readable(-1);
    return reap();
  }

  void wait_readable(int timeout_ms) const {
    pollfd p{fd_, POLLIN, 0};
    ::poll(&p, 1, timeout_ms);
  }

 private:
  std::vector<pid_t> children() const {
    std::vector<pid_t> out;
    std::ifstream in("/proc/" + std::to_string(pid_) + "/task/" + std::to_string(pid_) + "/children");
    for (pid_t c; in >> c;) out.push_back(c);
    return out;
  }
  int reap() {
    if (pid_ <= 0) return exit_code_;
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return exit_code_;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  int exit_code_ = -1;
  std::string out_;
  Clock::time_point started_;
};

// The save phases seen in a checkpoint folder through inotify: the folder itself and each
// save's temporary folder and each checkpoint as they appear. Each phase counts once per
// folder (both ranks' shard files are one write).
class SaveEvents {
 public:
  explicit SaveEvents(const std::string& dir) : dir_(dir) {
    fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error("inotify_init1 failed");
    watch(dir, IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM, "");
    for (const auto& e : fs::directory_iterator(dir))
      if (checkpoint_step(e.path().string()) >= 0)
        steps_[e.path().filename().string()] = watch(e.path().string(), IN_DELETE, "step");
  }
  ~SaveEvents() { ::close(fd_); }
  SaveEvents(const SaveEvents&) = delete;
  SaveEvents& operator=(const SaveEvents&) = delete;

  int fd() const { return fd_; }

  // The phases begun since the last call, in order.
  std::vector<Aim> read() {
    std::vector<Aim> seen;
    alignas(inotify_event) char buf[16384];
    for (;;) {
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) return seen;
      for (ssize_t at = 0; at < n;) {
        const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
        at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
        if (e->len > 0) handle(e->wd, e->mask, e->name, seen);
      }
    }
  }

 private:
  int watch(const std::string& path, uint32_t mask, const std::string& kind) {
    const int wd = ::inotify_add_watch(fd_, path.c_str(), mask);
    if (wd >= 0) kinds_[wd] = kind;
    return wd;
  }
  // Once per folder and phase.
  void note(int wd, Aim a, std::vector<Aim>& seen) {
    if (noted_.insert({wd, static_cast<int>(a)}).second) seen.push_back(a);
  }
  void handle(int wd, uint32_t mask, const std::string& name, std::vector<Aim>& seen) {
    const std::string kind = kinds_[wd];
    if (kind.empty() && (mask & IN_CREATE) && name.rfind(".tmp-step-", 0) == 0) {
      seen.push_back(Aim::kSnapshot);
      // What the save made in it before the watch was in place counts as made now.
      const int tmp = watch(dir_ + "/" + name, IN_CREATE, "tmp");
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(dir_ + "/" + name, ec))
        handle(tmp, IN_CREATE, e.path().filename().string(), seen);
    } else if (kind.empty() && (mask & IN_MOVED_TO) && checkpoint_step(name) >= 0) {
      steps_[name] = watch(dir_ + "/" + name, IN_DELETE, "step");
    } else if (kind.empty() && (mask & IN_MOVED_FROM) && steps_.count(name)) {
      note(steps_[name], Aim::kRotation, seen);  // an old checkpoint renamed to be deleted
    } else if (kind == "tmp" && (mask & IN_CREATE)) {
      note(wd, name.rfind("rank-", 0) == 0 ? Aim::kWrite : Aim::kCommit, seen);
    } else if (kind == "step" && (mask & IN_DELETE)) {
      note(wd, Aim::kRotation, seen);  // a checkpoint's files deleted in place
    }
  }

  std::string dir_;
  int fd_ = -1;
  std::map<int, std::string> kinds_;  // watch -> "" (the folder), "tmp" or "step"
  std::map<std::string, int> steps_;   // checkpoint -> its watch
  std::set<std::pair<int, int>> noted_;
};

// "step N/" lines in `out` from offset `from` (moved past them).
int count_step_lines(const std::string& out, size_t& from) {
  int n = 0;
  for (size_t nl; (nl = out.find('\n', from)) != std::string::npos; from = nl + 1) {
    const size_t at = out.find(" step ", from);
    if (at < nl && at + 6 < nl && std::isdigit(static_cast<unsigned char>(out[at + 6])) &&
        out.find('/', at) < out.find(' ', at + 6))
      ++n;
  }
  return n;
}

// The entries of the checkpoint folder that are folders, with their inodes.
std::map<std::string, ino_t> folders(const std::string& dir) {
  std::map<std::string, ino_t> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    struct stat st;
    if (e.is_directory() && ::stat(e.path().c_str(), &st) == 0) out[e.path().filename().string()] = st.st_ino;
  }
  return out;
}

// Where a kill landed, from what it left: the furthest phase of a save under way among the
// folders this job made or renamed (`before`: the folders when it started, with their inodes).
std::string landed(const std::string& dir, const std::map<std::string, ino_t>& before, bool stepped) {
  int complete = 0, complete_new = 0;
  std::string phase = stepped ? "mid-step (no save under way)" : "start (opening the run, resuming)";
  for (const auto& [name, ino] : folders(dir)) {
    const std::string path = dir + "/" + name;
    const bool mine = !before.count(name) || before.at(name) != ino;
    if (checkpoint_step(name) >= 0) {
      if (!path_exists(path + "/meta.json") || !validate_checkpoint(path).ok())
        return "mid-rotation (a checkpoint partly deleted in place)";
      ++complete;
      complete_new += mine;
      continue;
    }
    if (!mine) continue;  // a leftover of an earlier job
    if (name.rfind(".deleting-", 0) == 0) return "mid-rotation (an old checkpoint renamed .deleting-, not yet removed)";
    int shards = 0, writing = 0, committing = 0;
    for (const auto& f : fs::directory_iterator(path)) {
      const std::string n = f.path().filename().string();
      if (n.rfind("rank-", 0) != 0) ++committing;
      else if (n.find(".tmp.") != std::string::npos) ++writing;
      else ++shards;
    }
    phase = committing                                 ? "mid-commit (meta.json written, the folder not yet renamed)"
            : writing || (shards > 0 && shards < kRanks) ? "mid-write (a shard file being written)"
            : shards == kRanks                         ? "written, before the commit (the ranks not yet agreed)"
                                                       : "mid-snapshot (the save's folder made, no shard file yet)";
  }
  if (complete > kKeepLast && complete_new > 0) return "committed, before the rotation (keep-last + 1 complete)";
  return phase;
}

// Every complete-looking checkpoint validates, and the folder holds at most keep-last + 1
// checkpoint folders; the failures, in words.
std::string disk_failures(const std::string& dir) {
  std::string bad;
  for (const std::string& c : list_checkpoints(dir)) {
    const Status st = validate_checkpoint(c);
    if (!st.ok()) bad += c + " has a meta.json but is not complete: " + st.message() + "\n";
  }
  const std::map<std::string, ino_t> all = folders(dir);
  if (all.size() > static_cast<size_t>(kKeepLast + 1)) {
    bad += std::to_string(all.size()) + " checkpoint folders, more than keep-last + 1:";
    for (const auto& [name, ino] : all) bad += " " + name;
    bad += "\n";
  }
  return bad;
}

class KillBattery : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("kill-battery");
    testing::write_random_blocks(dir_ + "/blocks.safetensors", 64, 65, 5);
  }

  std::vector<std::string> command(const std::string& tag) const {
    return {testing::anvil_binary(), "train", "--device", "cpu", "--model", testing::fixture_dir("tiny-qwen3"),
            "--data", dir_ + "/blocks.safetensors", "--steps", std::to_string(kSteps), "--micro-batch", "2",
            "--nproc-per-node", std::to_string(kRanks), "--lr", "1e-3", "--log-every", "1",
            "--metrics", dir_ + "/" + tag + ".jsonl", "--ckpt-dir", dir_ + "/" + tag,
            "--save-every", std::to_string(kSaveEvery), "--keep-last", std::to_string(kKeepLast)};
  }

  // Runs the job until the plan's moment (true, the job then killed) or its end (false).
  static bool kill_at(Job& job, SaveEvents& events, const Plan& plan) {
    int count = 0;
    size_t scanned = 0;
    for (;;) {
      int timeout = -1;
      if (plan.aim == Aim::kUniform) {
        const double left = plan.at_s - job.seconds();
        if (left <= 0) break;
        timeout = static_cast<int>(left * 1000) + 1;
      }
      pollfd p[2] = {{job.fd(), POLLIN, 0}, {events.fd(), POLLIN, 0}};
      if (::poll(p, 2, timeout) < 0 && errno != EINTR) throw std::runtime_error("poll failed");
      const bool open = job.read_output();
      for (Aim a : events.read()) count += a == plan.aim;
      if (plan.aim == Aim::kStep) count += count_step_lines(job.out(), scanned);
      if (plan.aim != Aim::kUniform && count >= plan.nth) break;
      if (!open) return false;
    }
    job.kill_all();
    return true;
  }

  std::string dir_;
};

// The losses of a metrics file, every record of each step (a step run again after a resume
// has several).
std::multimap<int64_t, double> all_losses(const std::string& path) {
  std::multimap<int64_t, double> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const Json j = json_parse(line, path);
    if (j.contains("step") && j.contains("loss")) out.emplace(j["step"].get<int64_t>(), j["loss"].get<double>());
  }
  return out;
}

TEST_F(KillBattery, EveryRankKilledAtRandomMomentsResumesToTheSameBits) {
  const int kills = static_cast<int>(env_or("ANVIL_BATTERY_KILLS", 50));
  const auto seed = static_cast<uint32_t>(env_or("ANVIL_BATTERY_SEED", 37));
  std::mt19937 rng(seed);

  // The uninterrupted run: its losses and its duration (the span of the uniform moments).
  Job ref(command("ref"));
  ASSERT_EQ(ref.finish(), 0) << ref.out();
  const double span = ref.seconds();
  std::map<int64_t, double> want;
  for (const auto& [step, loss] : all_losses(dir_ + "/ref.jsonl")) want[step] = loss;
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps)) << ref.out();

  std::map<std::string, int> phases;
  int runs = 0, reruns = 0;
  std::string tag;
  std::unique_ptr<SaveEvents> events;
  // A new run: a fresh folder and metrics file.
  auto start_run = [&] {
    tag = "run" + std::to_string(++runs);
    fs::create_directories(dir_ + "/" + tag);
    events = std::make_unique<SaveEvents>(dir_ + "/" + tag);
  };
  // A run that ended: every loss it logged, each re-run included, is the uninterrupted run's.
  auto check_losses = [&](const std::string& what) {
    const std::multimap<int64_t, double> got = all_losses(dir_ + "/" + tag + ".jsonl");
    for (int64_t s = 1; s <= kSteps; ++s) EXPECT_TRUE(got.count(s)) << what << ": step " << s << " has no record";
    for (const auto& [step, loss] : got)
      EXPECT_EQ(std::memcmp(&loss, &want.at(step), sizeof loss), 0)
          << what << ": step " << step << " loss " << loss << ", uninterrupted " << want.at(step);
    reruns += static_cast<int>(got.size()) - kSteps;
  };
  start_run();
  for (int k = 0; k < kills;) {
    Plan plan;
    if (rng() % 2 == 0) {
      plan.at_s = std::uniform_real_distribution<double>(0, span)(rng);
    } else {
      plan.aim = static_cast<Aim>(1 + rng() % 5);
      plan.nth = 1 + static_cast<int>(rng() % 3);
    }
    const std::string what = "kill " + std::to_string(k + 1) + " of " + std::to_string(kills) + " (seed " +
                             std::to_string(seed) + ", " + tag + ", aimed at " + aim_name(plan.aim) + ")";
    const std::string ckpt = dir_ + "/" + tag;
    const std::map<std::string, ino_t> before = folders(ckpt);
    Job job(command(tag));
    if (!kill_at(job, *events, plan)) {  // the run ended first
      ASSERT_EQ(job.finish(), 0) << what << ": the run failed\n" << job.out();
      check_losses(tag + " (completed before " + what + ")");
      start_run();
      continue;
    }
    ++k;
    size_t from = 0;
    const std::string where = landed(ckpt, before, count_step_lines(job.out(), from) > 0);
    ++phases[where];
    const std::string bad = disk_failures(ckpt);
    EXPECT_TRUE(bad.empty()) << what << ", landed " << where << " after " << job.seconds() << " s:\n" << bad
                             << "its output:\n" << job.out();
    if (!bad.empty()) return;  // a broken folder makes every later kill's report about it
    // With no checkpoint the next job is a new run, which --metrics would refuse to add.
    if (list_checkpoints(ckpt).empty()) fs::remove(dir_ + "/" + tag + ".jsonl");
  }
  Job last(command(tag));
  ASSERT_EQ(last.finish(), 0) << "the run after the last kill\n" << last.out();
  check_losses(tag + " (after the last kill)");

  std::ostringstream report;
  report << kills << " kills (seed " << seed << ") over " << runs << " runs of " << kSteps << " steps; "
         << reruns << " step records logged again after a resume, each equal to the uninterrupted run's. "
         << "Where the kills landed:";
  for (const auto& [phase, n] : phases) report << "\n  " << n << " " << phase;
  std::printf("%s\n", report.str().c_str());
  RecordProperty("landed", report.str());
}

}  // namespace
}  // namespace anvil
