// Asynchronous saves (train/checkpoint_save.h) on CPU ranks, the tiny fixture model and 24
// blocks, each fault made an event through ANVIL_FAULT (core/fault.h):
//  - training goes on while a save is written (its writer held until the test releases it),
//    and the checkpoints are those of a synchronous save, byte for byte, as are the losses
//    and the final weights; a save due meanwhile waits, or is skipped with --save-skip-busy;
//  - a process that dies while staging the snapshot, while writing it in the background or
//    before the rename leaves the last good checkpoint, and the same command resumes from it
//    to the bits of an uninterrupted run;
//  - a full disk in the background write is reported at a later step, which stops the run
//    with the last good checkpoint intact;
//  - a checkpoint with a flipped byte is refused before the first step (its checksums are
//    verified while the state is read);
//  - kill -9 at 20 random steps of a run saving every step: the newest complete checkpoint
//    validates and resumes bit for bit;
//  - a run that resumes with more than --keep-last checkpoints (one killed before its
//    rotation) deletes the extra one before its first save, never holding keep-last + 2;
//  - the plan counts each rank's snapshot, which is refused before any weight is read when
//    the host cannot hold it;
//  - the parallel writer and readers of io/parallel_file.h (the whole file's checksum and
//    each chunk's) against a one-thread pass;
//  - anvil bench disk, and the host memory facts of sys/host_memory.h.
// ANVIL_TEST_DEVICE=cuda runs the training of these tests on the GPU (one rank per GPU: the
// tests of one rank, *Dying* and *KillNine*, on a machine with one).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "core/fs.h"
#include "core/hash.h"
#include "core/json.h"
#include "io/checkpoint_files.h"
#include "io/parallel_file.h"
#include "io/safetensors.h"
#include "sys/host_memory.h"
#include "testing.h"
#include "metrics_losses.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

struct TrainOutput {
  testing::RunResult result;
  std::map<int64_t, double> losses;  // by step, from the metrics file
  std::string params;                // the exported model.safetensors' bytes (exit 0 only)
};

class AsyncSave : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::temp_dir("async-save"));
    testing::write_random_blocks(*dir_ + "/blocks.safetensors", 24, 37, 7);
  }
  static std::string dir() { return *dir_; }

  // anvil train, `steps` steps of 4 sequences on `nproc` ranks, its metrics and fp32 export
  // under `tag`, saving into `ckpt` every `every` steps, then `extra`.
  static std::vector<std::string> args(const std::string& tag, int64_t steps, int nproc, const std::string& ckpt,
                                       int64_t every, const std::vector<std::string>& extra = {}) {
    const char* device = std::getenv("ANVIL_TEST_DEVICE");
    std::vector<std::string> a = {"train", "--device", device && *device ? device : "cpu", "--model",
                                  testing::shared_dir() + "/fixtures/tiny-qwen3",
                                  "--data", dir() + "/blocks.safetensors", "--steps", std::to_string(steps),
                                  "--micro-batch", std::to_string(4 / nproc), "--lr", "1e-3", "--log-every", "1",
                                  "--metrics", dir() + "/" + tag + ".jsonl", "--export", dir() + "/" + tag,
                                  "--export-dtype", "fp32", "--ckpt-dir", ckpt, "--save-every", std::to_string(every)};
    if (nproc > 1) a.insert(a.end(), {"--nproc-per-node", std::to_string(nproc)});
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  // `bound`: killed after that many seconds (a run held by a save it should not wait for then
  // fails the test on its output instead of hanging); its pid is then timeout's.
  static std::string command(const std::vector<std::string>& a, const std::string& env = "", int bound = 0) {
    // Appended piece by piece: GCC 12's -Wrestrict misreads "literal" + std::string here.
    std::string cmd = "exec ";
    if (bound > 0) cmd.append("timeout -s KILL ").append(std::to_string(bound)).append(" ");
    cmd.append("env ").append(env).append(" ").append(testing::shell_quote(testing::anvil_binary()));
    for (const auto& x : a) cmd.append(" ").append(testing::shell_quote(x));
    return cmd.append(" </dev/null");
  }
  // The losses (metrics file a[16]) and export (a[18]) of a finished run of `a`.
  static TrainOutput collect(const testing::RunResult& r, const std::vector<std::string>& a) {
    TrainOutput run;
    run.result = r;
    run.losses = testing::read_metrics_losses(a[16]).loss;
    if (r.exit_code == 0) run.params = read_file(a[18] + "/model.safetensors");
    return run;
  }
  static TrainOutput train(const std::vector<std::string>& a, const std::string& env = "") {
    return collect(testing::run_command(command(a, env)), a);
  }

  // The uninterrupted run with synchronous saves every 4 of 12 steps, on 1 or 2 ranks.
  static const TrainOutput& base(int nproc) {
    static std::map<int, TrainOutput> runs;
    if (!runs.count(nproc)) {
      const std::string tag = "base" + std::to_string(nproc);
      runs[nproc] = train(args(tag, 12, nproc, dir() + "/ckpt-" + tag, 4, {"--sync-save"}));
    }
    return runs.at(nproc);
  }

  // Same losses from step `from` on and the same final weights as `want`.
  static void expect_bits(const TrainOutput& got, const TrainOutput& want, int64_t from, int64_t to, const std::string& what) {
    ASSERT_EQ(got.result.exit_code, 0) << what << ": " << got.result.out;
    for (int64_t s = from; s <= to; ++s) {
      ASSERT_TRUE(got.losses.count(s) && want.losses.count(s)) << what << " step " << s;
      EXPECT_EQ(got.losses.at(s), want.losses.at(s)) << what << " step " << s;
    }
    EXPECT_TRUE(got.params == want.params) << what << ": the final weights differ";
  }

  // Every file of checkpoint `name` in folder a equals the one in folder b, byte for byte;
  // meta.json but for the run's id (each run has its own).
  static void expect_same_checkpoint(const std::string& a, const std::string& b, const std::string& name) {
    ASSERT_TRUE(validate_checkpoint(a + "/" + name).ok()) << a << "/" << name;
    for (const auto& e : fs::directory_iterator(b + "/" + name)) {
      const std::string file = e.path().filename().string();
      if (file == "anvil_config.toml") continue;  // the flags as given: --sync-save is one of them
      if (file == "meta.json") {
        Json got = read_checkpoint_meta(a + "/" + name), want = read_checkpoint_meta(b + "/" + name);
        ASSERT_TRUE(got["train"].contains("run_id") && want["train"].contains("run_id")) << name;
        got["train"].erase("run_id");
        want["train"].erase("run_id");
        EXPECT_EQ(got, want) << name << "/meta.json";
        continue;
      }
      EXPECT_TRUE(read_file(a + "/" + name + "/" + file) == read_file(e.path().string())) << name << "/" << file;
    }
  }

  static std::string* dir_;
};
std::string* AsyncSave::dir_ = nullptr;

TEST_F(AsyncSave, TrainingGoesOnWhileASaveIsWrittenAndItEqualsASynchronousSave) {
  const TrainOutput& want = base(2);
  ASSERT_EQ(want.result.exit_code, 0) << want.result.out;
  // Rank 1's writer of step 4 is held: steps 5 and 6 train while step-4 is incomplete; the
  // save due at step 8 then waits for it.
  const std::string ckpt = dir() + "/ckpt-held";
  const std::vector<std::string> a = args("held", 12, 2, ckpt, 4);
  testing::Background bg(command(a, "ANVIL_FAULT=hold_save:4", 120));
  ASSERT_TRUE(bg.wait_for_line("step 6/12")) << bg.out();
  EXPECT_FALSE(fs::exists(ckpt + "/step-4")) << "the held save completed before the release\n" << bg.out();
  EXPECT_TRUE(fs::exists(ckpt + "/.tmp-step-4")) << bg.out();
  EXPECT_TRUE(has(bg.out(), "saving " + ckpt + "/step-4 in the background")) << bg.out();
  std::ofstream(ckpt + "/.tmp-step-4.release") << "go";
  const TrainOutput got = collect(bg.finish(), a);
  expect_bits(got, want, 1, 12, "held save");
  for (const char* s : {"step-4", "step-8", "step-12"}) expect_same_checkpoint(ckpt, dir() + "/ckpt-base2", s);
  EXPECT_TRUE(has(got.result.out, "saved " + ckpt + "/step-4: ")) << got.result.out;
  EXPECT_TRUE(has(got.result.out, "written in the background")) << got.result.out;
  EXPECT_TRUE(has(got.result.out, "training stalled ")) << got.result.out;

  // --save-skip-busy: the save of step 4 is skipped while step 2's is held.
  const std::string skip = dir() + "/ckpt-skip";
  const std::vector<std::string> b = args("skip", 12, 1, skip, 2, {"--save-skip-busy"});
  testing::Background sk(command(b, "ANVIL_FAULT=hold_save:2", 120));
  ASSERT_TRUE(sk.wait_for_line("checkpoint step-4 skipped (--save-skip-busy): the save of step 2 is still being "
                               "written")) << sk.out();
  std::ofstream(skip + "/.tmp-step-2.release") << "go";
  const TrainOutput skipped = collect(sk.finish(), b);
  ASSERT_EQ(skipped.result.exit_code, 0) << skipped.result.out;
  // Later saves may be skipped too while step 2's completes; the last step's never is.
  const std::vector<std::string> kept = list_checkpoints(skip);
  ASSERT_FALSE(kept.empty());
  EXPECT_EQ(kept.front(), skip + "/step-12");
  EXPECT_EQ(kept.back(), skip + "/step-2");
  EXPECT_EQ(std::count(kept.begin(), kept.end(), skip + "/step-4"), 0);
  for (const std::string& c : kept) EXPECT_TRUE(validate_checkpoint(c).ok()) << c;
}

TEST_F(AsyncSave, DyingWhileStagingWritingOrRenamingLeavesTheLastGoodCheckpoint) {
  const TrainOutput& want = base(1);
  ASSERT_EQ(want.result.exit_code, 0) << want.result.out;
  for (const std::string fault : {"die_in_staging", "die_in_save", "die_before_rename"}) {
    const std::string ckpt = dir() + "/ckpt-" + fault;
    const std::vector<std::string> a = args(fault, 12, 1, ckpt, 4);
    const TrainOutput died = train(a, "ANVIL_FAULT=" + fault + ":8");
    EXPECT_EQ(died.result.exit_code, 86) << fault << ": " << died.result.out;
    EXPECT_TRUE(has(died.result.out, "fault " + fault + " (ANVIL_FAULT): exiting ")) << died.result.out;
    EXPECT_EQ(list_checkpoints(ckpt), std::vector<std::string>{ckpt + "/step-4"}) << fault;
    EXPECT_TRUE(validate_checkpoint(ckpt + "/step-4").ok()) << fault;
    if (fault == "die_before_rename") {
      EXPECT_TRUE(fs::exists(ckpt + "/.tmp-step-8/meta.json")) << died.result.out;
    }

    const TrainOutput again = train(a);
    EXPECT_TRUE(has(again.result.out, "resumed from " + ckpt + "/step-4 at step 4")) << again.result.out;
    expect_bits(again, want, 5, 12, fault + ", resumed");
    expect_same_checkpoint(ckpt, dir() + "/ckpt-base1", "step-8");
  }
}

TEST_F(AsyncSave, FullDiskInTheBackgroundStopsTheRunAtALaterStep) {
  // The write of step 8 fails halfway; the run learns it after a later step, at the latest
  // when the save of step 12 waits for it, and stops there.
  const std::string ckpt = dir() + "/ckpt-full";
  const TrainOutput r = train(args("full", 20, 2, ckpt, 4), "ANVIL_FAULT=no_space_in_save:8");
  EXPECT_NE(r.result.exit_code, 0) << r.result.out;
  const std::string& out = r.result.out;
  EXPECT_TRUE(has(out, "checkpoint step-8 not saved: " + ckpt + "/.tmp-step-8/rank-00001.safetensors: write failed "
                       "(No space left on device): ")) << out;
  EXPECT_TRUE(has(out, "the run stops; its last good checkpoint is " + ckpt + "/step-4 (step 4), untouched")) << out;
  EXPECT_TRUE(has(out, "step 9/20")) << out;
  EXPECT_FALSE(has(out, "step 13/20")) << out;
  EXPECT_EQ(list_checkpoints(ckpt), std::vector<std::string>{ckpt + "/step-4"});
  EXPECT_FALSE(fs::exists(ckpt + "/.tmp-step-8"));
  EXPECT_TRUE(validate_checkpoint(ckpt + "/step-4").ok());
}

TEST_F(AsyncSave, KillNineDuringBackgroundSavesKeepsAResumableCheckpoint) {
  const TrainOutput& want = base(1);
  ASSERT_EQ(want.result.exit_code, 0) << want.result.out;
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t at = 2 + static_cast<int64_t>(rng() % 10);  // killed once step `at` is logged
    const std::string what = "trial " + std::to_string(trial) + " (seed " + std::to_string(seed) + ", kill -9 after step " +
                             std::to_string(at) + ")";
    const std::string ckpt = dir() + "/ckpt-kill-" + std::to_string(trial);
    const std::vector<std::string> a = args("kill-" + std::to_string(trial), 12, 1, ckpt, 1, {"--keep-last", "2"});
    {
      testing::Background bg(command(a));
      ASSERT_TRUE(bg.wait_for_line("step " + std::to_string(at) + "/12")) << what << "\n" << bg.out();
      ::kill(bg.pid(), SIGKILL);
      EXPECT_EQ(bg.finish().exit_code, 128 + SIGKILL) << what;
    }
    const std::vector<std::string> left = list_checkpoints(ckpt);
    for (const std::string& c : left) EXPECT_TRUE(validate_checkpoint(c).ok()) << what << ": " << c;
    if (left.empty()) fs::remove(a[16]);  // a new run then, which --metrics would refuse to add
    const TrainOutput again = train(a);
    if (!left.empty()) {
      EXPECT_TRUE(has(again.result.out, "resumed from " + left.front())) << what << again.result.out;
    }
    expect_bits(again, want, left.empty() ? 1 : checkpoint_step(left.front()) + 1, 12, what);
  }
}

TEST_F(AsyncSave, ARunKilledBeforeItsRotationStillKeepsAtMostKeepLastPlusOne) {
  // A run killed between a commit and the deletion beyond --keep-last 2 leaves three
  // checkpoints (made here by a run that keeps them all). The run that resumes deletes the
  // oldest, and what a deletion killed halfway left, before its first save begins, so the
  // folder never holds a fourth, even while that save is written (held here until the test
  // has looked).
  const std::string ckpt = dir() + "/ckpt-rotation";
  ASSERT_EQ(train(args("rotation-a", 6, 1, ckpt, 2)).result.exit_code, 0);
  ASSERT_EQ(list_checkpoints(ckpt).size(), 3u);
  // And a deletion killed halfway (a checkpoint is renamed .deleting- before its files go).
  fs::create_directories(ckpt + "/.deleting-step-0");
  std::ofstream(ckpt + "/.deleting-step-0/meta.json") << "{}";
  const std::vector<std::string> a = args("rotation-b", 10, 1, ckpt, 2, {"--keep-last", "2"});
  testing::Background bg(command(a, "ANVIL_FAULT=hold_save:8", 120));
  ASSERT_TRUE(bg.wait_for_line("fault hold_save (ANVIL_FAULT): the background write waits for")) << bg.out();
  std::vector<std::string> held;
  for (const auto& e : fs::directory_iterator(ckpt))
    if (e.is_directory()) held.push_back(e.path().filename().string());
  std::sort(held.begin(), held.end());
  EXPECT_EQ(held, (std::vector<std::string>{".tmp-step-8", "step-4", "step-6"})) << bg.out();
  std::ofstream(ckpt + "/.tmp-step-8.release") << "go";
  const TrainOutput r = collect(bg.finish(), a);
  ASSERT_EQ(r.result.exit_code, 0) << r.result.out;
  EXPECT_EQ(list_checkpoints(ckpt), (std::vector<std::string>{ckpt + "/step-10", ckpt + "/step-8"}));
}

TEST_F(AsyncSave, SnapshotThatDoesNotFitIsRefusedBeforeAnyWeightIsRead) {
  // Qwen3-32B's state is 12 bytes a parameter on one rank: about 393 GB of snapshot.
  const int64_t need = int64_t{393} * 1000 * 1000 * 1000;
  if (host_memory().available > need) GTEST_SKIP() << "this machine holds a 393 GB snapshot";
  std::vector<std::string> a = args("huge", 2, 1, dir() + "/ckpt-huge", 1);
  a[3] = "--preset";
  a[4] = "qwen3-32b";
  const TrainOutput r = train(a);
  EXPECT_NE(r.result.exit_code, 0) << r.result.out;
  EXPECT_TRUE(has(r.result.out, "asynchronous saves hold a snapshot of each rank's state in host memory: ")) << r.result.out;
  EXPECT_TRUE(has(r.result.out, "save synchronously with --sync-save")) << r.result.out;
  EXPECT_FALSE(has(r.result.out, " parameters) on ")) << "refused before the weights\n" << r.result.out;
}

TEST_F(AsyncSave, ACorruptCheckpointIsRefusedBeforeTheFirstStep) {
  // Checksums are verified while the state is read: a flipped byte still never trains.
  const TrainOutput& want = base(1);
  ASSERT_EQ(want.result.exit_code, 0) << want.result.out;
  const std::string ckpt = dir() + "/ckpt-flipped";
  fs::create_directories(ckpt);
  fs::copy(dir() + "/ckpt-base1/step-4", ckpt + "/step-4");
  const std::string shard = ckpt + "/step-4/rank-00000.safetensors";
  std::string bytes = read_file(shard);
  bytes[bytes.size() / 2] ^= 0x10;
  write_file_atomic(shard, bytes);
  const TrainOutput r = train(args("flipped", 12, 1, ckpt, 4));
  EXPECT_NE(r.result.exit_code, 0) << r.result.out;
  EXPECT_TRUE(has(r.result.out, "checkpoint " + ckpt + "/step-4 refused: " + shard + ": checksum ")) << r.result.out;
  EXPECT_FALSE(has(r.result.out, "step 5/12")) << r.result.out;
  EXPECT_TRUE(r.losses.empty()) << r.result.out;
}

TEST_F(AsyncSave, PlanCountsEachRanksSnapshot) {
  // The plan's host_snapshot is what each rank's shard file of a 2-rank checkpoint holds.
  const TrainOutput& two = base(2);
  ASSERT_EQ(two.result.exit_code, 0) << two.result.out;
  const testing::RunResult plan = testing::run_anvil({"plan", "--model", testing::shared_dir() + "/fixtures/tiny-qwen3",
                                                      "--nproc", "2", "--seq-len", "37", "--json"});
  ASSERT_EQ(plan.exit_code, 0) << plan.out;
  const Json j = json_parse(plan.out, "anvil plan");
  for (const char* shard : {"rank-00000.safetensors", "rank-00001.safetensors"}) {
    SafetensorsFile f(dir() + "/ckpt-base2/step-4/" + shard);
    int64_t bytes = 0;
    for (const auto& t : f.tensors()) bytes += static_cast<int64_t>(t.bytes);
    EXPECT_EQ(j["ddp"]["host_snapshot"].get<int64_t>(), bytes) << shard;
    EXPECT_EQ(j["fsdp"]["host_snapshot"].get<int64_t>(), bytes) << shard;
  }
  const testing::RunResult table = testing::run_anvil({"plan", "--preset", "qwen3-8b", "--seq-len", "2048"});
  EXPECT_TRUE(has(table.out, "host memory per rank for the snapshot of asynchronous saves: 91.54 GiB (ddp), 91.54 GiB "
                             "(zero2), 91.54 GiB (fsdp)")) << table.out;
}

TEST(BenchDisk, MeasuresWriteAndReadAndLeavesNothing) {
  const std::string dir = testing::temp_dir("bench-disk");
  const testing::RunResult r = testing::run_anvil({"bench", "disk", dir, "--size", "100M", "--threads", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const Json j = json_parse(r.out, "bench disk");
  EXPECT_EQ(j["bytes"].get<uint64_t>(), uint64_t{128} << 20) << "rounded up to whole 64 MiB requests";
  EXPECT_EQ(j["threads"].get<int>(), 2);
  EXPECT_GT(j["write_gbps"].get<double>(), 0);
  EXPECT_GT(j["read_gbps"].get<double>(), 0);
  EXPECT_TRUE(fs::is_empty(dir)) << "the benchmark's file is removed";
  const testing::RunResult text = testing::run_anvil({"bench", "disk", dir, "--size", "1M"});
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_TRUE(has(text.out, "disk " + dir + ": write ")) << text.out;
  EXPECT_TRUE(has(text.out, "fsync included), read ")) << text.out;
  const testing::RunResult missing = testing::run_anvil({"bench", "disk", dir + "/none"});
  EXPECT_EQ(missing.exit_code, 2) << missing.out;
  EXPECT_TRUE(has(missing.out, "anvil bench disk: " + dir + "/none is not a folder")) << missing.out;
}

TEST(HostMemory, ReadsMeminfoWithinTheCgroupLimit) {
  const std::string meminfo = "MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:   8000000 kB\n";
  const HostMemory plain = host_memory_from(meminfo, "", "");
  EXPECT_EQ(plain.total, int64_t{16000000} * 1024);
  EXPECT_EQ(plain.available, int64_t{8000000} * 1024);
  EXPECT_EQ(host_memory_from(meminfo, "max\n", "123\n").available, plain.available);
  const HostMemory capped = host_memory_from(meminfo, "4000000000\n", "1000000000\n");
  EXPECT_EQ(capped.total, 4000000000);
  EXPECT_EQ(capped.available, 3000000000);
  EXPECT_EQ(capped.source, "the cgroup's memory limit");
}

TEST(ParallelFile, ShardWritersRecordTheSameChunkChecksums) {
  // Two tensors whose file spans two chunks and a bit: written from the state (one stream)
  // and from a snapshot (several threads), the same bytes and checksums.
  const std::string dir = testing::temp_dir("shard-chunks");
  const int64_t n = static_cast<int64_t>(kFileChunk / 4) + 1000;
  const std::vector<ShardTensor> tensors = {{"a", n}, {"b", 1000}};
  const ShardFill fill = [](size_t i, int64_t begin, int64_t count, float* out) {
    for (int64_t k = 0; k < count; ++k) out[k] = static_cast<float>(i * 7 + static_cast<size_t>(begin + k) % 1013);
  };
  const ShardRecord one = write_shard(dir + "/one.safetensors", tensors, fill);
  const ShardRecord many = write_shard_parallel(dir + "/many.safetensors", tensors, fill, Fault::kNone, 3);
  const std::string bytes = read_file(dir + "/one.safetensors");
  EXPECT_TRUE(bytes == read_file(dir + "/many.safetensors"));
  ASSERT_EQ(one.chunks.size(), 2u);
  EXPECT_EQ(one.chunks[0], hash_hex(std::string_view(bytes).substr(0, kFileChunk)));
  EXPECT_EQ(one.chunks[1], hash_hex(std::string_view(bytes).substr(kFileChunk)));
  EXPECT_EQ(many.chunks, one.chunks);
  EXPECT_EQ(many.xxh64, one.xxh64);
  EXPECT_EQ(one.xxh64, hash_hex(bytes));
}

TEST(ParallelFile, WritesAndHashesAsOneThreadDoes) {
  const std::string dir = testing::temp_dir("parallel-file");
  // Two and a half chunks of a pattern no two chunks share.
  const uint64_t total = kFileChunk * 2 + kFileChunk / 2 + 12;
  std::string want(total, '\0');
  for (uint64_t i = 0; i < total; ++i) want[i] = static_cast<char>((i * 2654435761u) >> 13);
  const std::string path = dir + "/file";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const FileSums sums = write_hashed(
      fd, path, total, [&](uint64_t at, uint64_t n, char* out) { std::memcpy(out, want.data() + at, n); }, 3);
  ::close(fd);
  EXPECT_EQ(sums.xxh64, hash_hex(want));
  EXPECT_TRUE(read_file(path) == want);
  EXPECT_EQ(hash_file_parallel(path, 3), hash_hex(want));
  EXPECT_EQ(hash_file(path), hash_hex(want));
  // Each chunk's checksum, as written and as read back in any order.
  const std::vector<std::string> chunks = {hash_hex(std::string_view(want).substr(0, kFileChunk)),
                                           hash_hex(std::string_view(want).substr(kFileChunk, kFileChunk)),
                                           hash_hex(std::string_view(want).substr(2 * kFileChunk))};
  EXPECT_EQ(sums.chunks, chunks);
  EXPECT_EQ(hash_file_chunks(path, 3), chunks);
}

}  // namespace
}  // namespace anvil
