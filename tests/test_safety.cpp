// Runs that never lose work (on CPU ranks, the tiny fixture model and the tiny preset with
// the demo's tokenizer), one test per way a run used to lose work:
//  - outputs that cannot be written, out-of-range hyperparameters, a tokenizer larger than
//    the model's vocabulary, JSONL without --seq-len, a model folder without a tokenizer,
//    chat rows with an unknown role or rendering to nothing: one line, exit 2, before any
//    step (and before any weight is read);
//  - one run per checkpoint folder (a second is refused naming the holder; a lock left by
//    a killed run is taken over); the packed-data cache waits for its writer and removes
//    what a killed preparation left;
//  - SIGINT and SIGTERM: the step in flight ends, a checkpoint is written, the resume
//    command is printed, exit 130 or 143, on 1 and 2 ranks; a second signal ends at once;
//  - a write error and a real full disk (tmpfs) while saving leave the previous checkpoint;
//  - a hung rank makes the others fail within the collective timeout, naming rank,
//    collective and step;
//  - --on-save copies in the background, reports failures, and --keep-last keeps what a
//    copy still needs;
//  - export --ckpt <ckpt-dir> names the newest complete checkpoint.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "core/file_lock.h"
#include "core/fs.h"
#include "data/tokenizer.h"
#include "io/checkpoint_files.h"
#include "testing.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;

// Steps of a run meant to be stopped by a signal: long enough never to end first, short
// enough (a minute) that a run which ignores the signal fails the test instead of hanging.
constexpr int64_t kLong = 2000;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class Safety : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::temp_dir("safety"));
    testing::write_random_blocks(*dir_ + "/blocks.safetensors", 24, 37, 5);
  }

  static std::string dir() { return *dir_; }
  static std::string tiny() { return testing::shared_dir() + "/fixtures/tiny-qwen3"; }
  static std::string demo() { return std::string(ANVIL_SOURCE_DIR) + "/data/demo"; }

  // anvil train on the tiny fixture model and the 24 blocks, then `extra`.
  static std::vector<std::string> train_args(int64_t steps, const std::vector<std::string>& extra) {
    return testing::tiny_train_args(dir() + "/blocks.safetensors", steps, extra);
  }
  static std::string command(const std::vector<std::string>& args, const std::string& env = "") {
    std::string cmd = env + " '" + testing::anvil_binary() + "'";
    for (const auto& a : args) cmd += " '" + a + "'";
    return cmd;
  }
  static testing::RunResult run(const std::vector<std::string>& args, const std::string& env = "") {
    return testing::run_command(command(args, env) + " </dev/null");
  }
  // The command in the background (its pid is anvil's).
  static std::string background(const std::vector<std::string>& args, const std::string& env = "") {
    return "exec env " + command(args, env);
  }
  // Starts the command in the background, waits for a line of its output holding `marker`,
  // runs `then` on the process, and waits for the end: its exit code and its output.
  static testing::RunResult run_then(const std::vector<std::string>& args, const std::string& marker,
                                     const std::function<void(testing::Background&)>& then,
                                     const std::string& env = "") {
    testing::Background bg(background(args, env));
    EXPECT_TRUE(bg.wait_for_line(marker)) << "no line with '" << marker << "'";
    then(bg);
    return bg.finish();
  }
  // A file where a folder is expected: nothing can be created under it, whoever runs.
  static std::string blocker() {
    const std::string f = dir() + "/a-file";
    if (!fs::exists(f)) std::ofstream(f) << "x";
    return f;
  }

  // Sends `sig` to the process (a run_then step).
  static std::function<void(testing::Background&)> interrupt(int sig) {
    return [sig](testing::Background& bg) { ::kill(bg.pid(), sig); };
  }

  static std::string* dir_;
};
std::string* Safety::dir_ = nullptr;

// No step ran and no weight was read.
void expect_stopped_before_training(const testing::RunResult& r) {
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_FALSE(has(r.out, "step 1/")) << r.out;
  EXPECT_FALSE(has(r.out, "training ")) << r.out;
}

TEST_F(Safety, UnwritableOutputsAreFoundBeforeTheFirstStep) {
  const std::string out = blocker() + "/out";
  const testing::RunResult ex = run(train_args(4, {"--export", out}));
  expect_stopped_before_training(ex);
  EXPECT_TRUE(has(ex.out, "anvil train: --export " + out + ": cannot be created, " + blocker() + " is not a folder"))
      << ex.out;

  const testing::RunResult ck = run(train_args(4, {"--ckpt-dir", out, "--save-every", "2"}));
  expect_stopped_before_training(ck);
  EXPECT_TRUE(has(ck.out, "anvil train: --ckpt-dir " + out + ": cannot be created")) << ck.out;

  const std::string metrics = dir() + "/no-such-folder/m.jsonl";
  const testing::RunResult m = run(train_args(4, {"--metrics", metrics}));
  expect_stopped_before_training(m);
  EXPECT_TRUE(has(m.out, "--metrics " + metrics + ": the folder " + dir() + "/no-such-folder does not exist")) << m.out;
  if (::geteuid() != 0) {  // permissions bind everyone but root
    const std::string ro = dir() + "/read-only";
    fs::create_directories(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    const testing::RunResult r = run(train_args(4, {"--export", ro + "/out"}));
    expect_stopped_before_training(r);
    EXPECT_TRUE(has(r.out, "Permission denied")) << r.out;
  }
}

TEST_F(Safety, HyperparametersOutOfRangeAreRefused) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--lr", "-1e-3"}, "--lr -0.001 is out of range: it must be > 0"},
      {{"--beta1", "1.5"}, "--beta1 1.5 is out of range: it must be in [0, 1)"},
      {{"--beta2", "1"}, "--beta2 1 is out of range: it must be in [0, 1)"},
      {{"--eps", "0"}, "--eps 0 is out of range: it must be > 0"},
      {{"--weight-decay", "-1"}, "--weight-decay -1 is out of range: it must be >= 0"},
      {{"--max-grad-norm", "-1"}, "--max-grad-norm -1 is out of range: it must be >= 0"},
      {{"--warmup", "10"}, "--warmup 10 is out of range: it must be between 0 and --steps 2"},
  };
  for (const auto& [flags, message] : cases) {
    const testing::RunResult r = run(train_args(2, flags));
    expect_stopped_before_training(r);
    EXPECT_TRUE(has(r.out, "anvil train: " + message)) << r.out;
  }
}

TEST_F(Safety, TokenizerAndDataAreCheckedAgainstTheModel) {
  const std::string jsonl = dir() + "/text.jsonl";
  std::ofstream(jsonl) << "{\"text\": \"hello world\"}\n";
  const std::string qwen3 = testing::shared_dir() + "/fixtures/qwen3-tokenizer";
  const std::string size = std::to_string(Tokenizer::load(qwen3).vocab_size());
  std::vector<std::string> a = train_args(2, {"--tokenizer", qwen3, "--seq-len", "16"});
  a[6] = jsonl;
  const testing::RunResult big = run(a);
  expect_stopped_before_training(big);
  EXPECT_TRUE(has(big.out, "the tokenizer " + qwen3 + "/tokenizer.json has " + size + " tokens, more than the 1000 rows "
                           "of the vocabulary of the model " + tiny() + "/config.json"))
      << big.out;

  a = train_args(2, {"--tokenizer", qwen3});
  a[6] = jsonl;
  const testing::RunResult no_len = run(a);
  expect_stopped_before_training(no_len);
  EXPECT_TRUE(has(no_len.out, "anvil train: --seq-len must be at least 2 to pack the rows of " + jsonl)) << no_len.out;

  a = train_args(2, {"--seq-len", "16"});
  a[6] = jsonl;
  const testing::RunResult no_tok = run(a);
  expect_stopped_before_training(no_tok);
  EXPECT_TRUE(has(no_tok.out, tiny() + "/tokenizer.json: no such file; the model folder has no tokenizer: give one "
                              "with --tokenizer DIR"))
      << no_tok.out;
}

std::vector<std::string> preset_args(const std::string& data, const std::string& tokenizer, const std::string& cache) {
  return {"train", "--device", "cpu", "--preset", "tiny", "--data", data, "--tokenizer", tokenizer,
          "--seq-len", "32", "--steps", "1", "--data-cache", cache};
}

TEST_F(Safety, ChatRowsThatRenderWrongAreErrorsNamingTheRow) {
  const std::string chat = dir() + "/chat.jsonl";
  std::ofstream(chat) << "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
                         "\"content\": \"hello\"}]}\n"
                         "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"wizard\", "
                         "\"content\": \"abracadabra\"}]}\n";
  const testing::RunResult role = run(preset_args(chat, demo(), dir() + "/cache-role"));
  expect_stopped_before_training(role);
  EXPECT_TRUE(has(role.out, chat + ":2: bad row: message 1 has the unknown role \"wizard\"")) << role.out;

  // A template that renders nothing for a chat.
  const std::string tok = dir() + "/silent-template";
  fs::create_directories(tok);
  fs::copy_file(demo() + "/tokenizer.json", tok + "/tokenizer.json", fs::copy_options::overwrite_existing);
  std::ofstream(tok + "/chat_template.jinja") << "{% for m in messages %}{% endfor %}";
  const testing::RunResult silent = run(preset_args(chat, tok, dir() + "/cache-silent"));
  expect_stopped_before_training(silent);
  EXPECT_TRUE(has(silent.out, chat + ":1: bad row: the chat template renders this row to nothing")) << silent.out;
}

TEST_F(Safety, PackedCacheWaitsForItsWriterAndRemovesLeftovers) {
  const std::string cache = dir() + "/cache";
  const std::string data = demo() + "/arithmetic.jsonl";
  const testing::RunResult first = run(preset_args(data, demo(), cache));
  ASSERT_EQ(first.exit_code, 0) << first.out;
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(cache)) entries.push_back(e.path());
  ASSERT_EQ(entries.size(), 1u);
  const std::string entry = entries[0].string();

  // What a preparation killed halfway leaves: a temporary file beside no packed.bin.
  fs::remove(entry + "/packed.bin");
  const std::string leftover = entry + "/packed.bin.tmp.999999";
  std::ofstream(leftover) << std::string(1 << 16, 'x');
  const testing::RunResult again = run(preset_args(data, demo(), cache));
  ASSERT_EQ(again.exit_code, 0) << again.out;
  EXPECT_FALSE(fs::exists(leftover));
  EXPECT_TRUE(has(again.out, "data: removed " + leftover + ", left by an interrupted preparation")) << again.out;

  // Another writer holds the entry: the run says it waits, the test then lets go of the
  // lock, and only after that the run reuses the result.
  FileLock held = FileLock::acquire(entry + "/lock", "the test");
  testing::Background waiting(background(preset_args(data, demo(), cache)));
  ASSERT_TRUE(waiting.wait_for_line("waiting for it")) << waiting.finish().out;
  const size_t released_at = waiting.out().size();
  held = FileLock();
  const testing::RunResult waited = waiting.finish();
  ASSERT_EQ(waited.exit_code, 0) << waited.out;
  EXPECT_TRUE(has(waited.out, "the data cache " + entry + " is in use by another anvil run (pid " +
                                  std::to_string(::getpid()) + " on host "))
      << waited.out;
  const size_t reused = waited.out.find("data: reusing " + entry + "/packed.bin");
  ASSERT_NE(reused, std::string::npos) << waited.out;
  EXPECT_GE(reused, released_at) << "reused before the lock was released\n" << waited.out;
}

TEST_F(Safety, OneRunPerCheckpointFolder) {
  const std::string ckpt = dir() + "/ckpt-lock";
  const std::vector<std::string> a = train_args(kLong, {"--ckpt-dir", ckpt, "--save-every", "1000"});
  // While the first run trains, a second one into the same folder is refused.
  testing::RunResult second;
  std::string pid;
  const testing::RunResult first = run_then(a, "tok/s", [&](testing::Background& bg) {
    second = run(train_args(2, {"--ckpt-dir", ckpt}));
    pid = std::to_string(bg.pid());
    ::kill(bg.pid(), SIGTERM);
  });
  EXPECT_EQ(first.exit_code, 143) << first.out;
  EXPECT_TRUE(has(second.out, "--ckpt-dir " + ckpt + " is in use by another anvil run (pid " + pid + " on host "))
      << second.out;
  EXPECT_TRUE(has(second.out, "lock file " + ckpt + "/anvil.lock")) << second.out;
  EXPECT_FALSE(has(second.out, "step 1/")) << second.out;

  // A run killed with -9 leaves its lock file: the next run takes it over.
  std::string killed_pid;
  const testing::RunResult killed = run_then(a, "tok/s", [&](testing::Background& bg) {
    killed_pid = std::to_string(bg.pid());
    ::kill(bg.pid(), SIGKILL);
  });
  EXPECT_EQ(killed.exit_code, 137);
  const testing::RunResult next = run(train_args(2, {"--ckpt-dir", ckpt}));
  EXPECT_EQ(next.exit_code, 0) << next.out;
  EXPECT_TRUE(has(next.out, "taking over the lock " + ckpt + "/anvil.lock left by a run that is no longer running (pid " +
                                killed_pid + " on host "))
      << next.out;
}

TEST_F(Safety, SignalsStopAfterTheStepWithACheckpoint) {
  const std::string ckpt = dir() + "/ckpt-sigint";
  const testing::RunResult r =
      run_then(train_args(kLong, {"--ckpt-dir", ckpt, "--save-every", "1000"}), "step 3/", interrupt(SIGINT));
  EXPECT_EQ(r.exit_code, 130) << r.out;
  const size_t at = r.out.find("stopped by SIGINT after step ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const int64_t step = std::stoll(r.out.substr(at + 29));
  EXPECT_GE(step, 3);
  const std::string saved = ckpt + "/step-" + std::to_string(step);
  EXPECT_TRUE(has(r.out, "stopped by SIGINT after step " + std::to_string(step) + " of " + std::to_string(kLong) +
                             ": saved " + saved))
      << r.out;
  EXPECT_TRUE(has(r.out, "to resume: " + testing::anvil_binary() + " train --device cpu --model " + tiny())) << r.out;
  EXPECT_TRUE(validate_checkpoint(saved).ok());
  const testing::RunResult resumed = run(train_args(step + 1, {"--ckpt-dir", ckpt}));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.out;
  EXPECT_TRUE(has(resumed.out, "resumed from " + saved + " at step " + std::to_string(step))) << resumed.out;

  // Two ranks under the launcher: SIGTERM is forwarded, both stop after the same step.
  const std::string ckpt2 = dir() + "/ckpt-sigterm";
  const testing::RunResult two = run_then(
      train_args(kLong, {"--ckpt-dir", ckpt2, "--save-every", "1000", "--nproc-per-node", "2", "--micro-batch", "1"}),
      "step 3/", interrupt(SIGTERM));
  EXPECT_EQ(two.exit_code, 143) << two.out;
  EXPECT_TRUE(has(two.out, "stopped by SIGTERM: all 2 workers stopped after the same step")) << two.out;
  const std::vector<std::string> left = list_checkpoints(ckpt2);
  ASSERT_EQ(left.size(), 1u) << two.out;
  EXPECT_TRUE(has(two.out, "stopped by SIGTERM after step " + std::to_string(checkpoint_step(left[0])) +
                               " of " + std::to_string(kLong) + ": saved " + left[0]))
      << two.out;
  EXPECT_TRUE(validate_checkpoint(left[0]).ok());
  EXPECT_EQ(read_checkpoint_meta(left[0])["world"].get<int>(), 2);

  // A second signal ends the run at once, without the save. Rank 1 hangs before step 3
  // (ANVIL_FAULT), so rank 0 cannot finish its step in flight (nor save) before the second
  // signal reaches it: rank 0 gets both signals, once it has said it got the first.
  const std::string ckpt3 = dir() + "/ckpt-twice";
  pid_t rank0 = -1;
  const testing::RunResult twice = run_then(
      train_args(kLong, {"--ckpt-dir", ckpt3, "--nproc-per-node", "2", "--micro-batch", "1"}),
      "rank 1 stops answering before step 3", [&](testing::Background& bg) {
        rank0 = testing::child_with_env(bg.pid(), "RANK=0");
        ASSERT_GT(rank0, 0) << "no worker with RANK=0";
        ::kill(rank0, SIGINT);
        ASSERT_TRUE(bg.wait_for_line("stopping after the step in flight")) << bg.out();
        ::kill(rank0, SIGINT);
      },
      "ANVIL_FAULT=hang_at_step:3");
  EXPECT_TRUE(has(twice.out, "second signal: stopping at once")) << twice.out;
  EXPECT_TRUE(has(twice.out, "rank 0 (pid " + std::to_string(rank0) + ") exited with code 130")) << twice.out;
  EXPECT_FALSE(has(twice.out, "saved ")) << twice.out;
}

TEST_F(Safety, WriteErrorWhileSavingKeepsThePreviousCheckpoint) {
  const std::string ckpt = dir() + "/ckpt-enospc";
  std::vector<std::string> a = train_args(8, {"--ckpt-dir", ckpt, "--save-every", "4", "--nproc-per-node", "2",
                                              "--micro-batch", "1"});
  const testing::RunResult r = run(a, "ANVIL_FAULT=no_space_in_save:8");
  EXPECT_NE(r.exit_code, 0) << r.out;
  const std::string shard = ckpt + "/.tmp-step-8/rank-00001.safetensors";
  const uint64_t total = fs::file_size(ckpt + "/step-4/rank-00001.safetensors");
  EXPECT_TRUE(has(r.out, "checkpoint step-8 not saved: " + shard + ": write failed (No space left on device): " +
                             std::to_string(total - total / 2) + " of its " + std::to_string(total) + " bytes missing"))
      << r.out;
  EXPECT_TRUE(has(r.out, "the run stops; its last good checkpoint is " + ckpt + "/step-4 (step 4), untouched")) << r.out;
  EXPECT_EQ(list_checkpoints(ckpt), std::vector<std::string>{ckpt + "/step-4"});
  EXPECT_FALSE(fs::exists(ckpt + "/.tmp-step-8"));
  EXPECT_TRUE(validate_checkpoint(ckpt + "/step-4").ok());
}

TEST_F(Safety, FullDiskWhileSavingKeepsThePreviousCheckpoint) {
  // A real full disk: a tmpfs with room for one checkpoint and a half, in a mount
  // namespace of our own (root, or an unprivileged user namespace).
  if (testing::run_command("unshare -rm sh -c 'mount -t tmpfs -o size=64k tmpfs /mnt'").exit_code != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (unshare -rm with mount is not allowed): the full-disk case is covered "
                    "by the fault-injection test only";
  const std::string probe = dir() + "/ckpt-size";
  ASSERT_EQ(run(train_args(1, {"--ckpt-dir", probe, "--save-every", "1"})).exit_code, 0);
  uint64_t one = 0;
  for (const auto& e : fs::directory_iterator(probe + "/step-1")) one += fs::file_size(e.path());
  const std::string mnt = dir() + "/tmpfs", kept = dir() + "/kept";
  fs::create_directories(mnt);
  const std::string inner = command(train_args(8, {"--ckpt-dir", mnt, "--save-every", "4"})) +
                            "; echo \"exit=\\$?\"; cp -r '" + mnt + "/step-4' '" + kept + "'; ls -a '" + mnt + "'";
  const testing::RunResult r = testing::run_command("unshare -rm sh -c \"mount -t tmpfs -o size=" +
                                                    std::to_string(one * 3 / 2 / 1024) + "k tmpfs '" + mnt + "' && " +
                                                    inner + "\"");
  EXPECT_TRUE(has(r.out, "exit=1")) << r.out;
  EXPECT_TRUE(has(r.out, "checkpoint step-8 not saved: ")) << r.out;
  EXPECT_TRUE(has(r.out, "No space left on device")) << r.out;
  EXPECT_TRUE(has(r.out, "its last good checkpoint is " + mnt + "/step-4 (step 4), untouched")) << r.out;
  const size_t listing = r.out.find("exit=");
  ASSERT_NE(listing, std::string::npos) << r.out;
  EXPECT_TRUE(has(r.out.substr(listing), "step-4")) << r.out;
  EXPECT_FALSE(has(r.out.substr(listing), ".tmp-step-8")) << "the half-written checkpoint is removed\n" << r.out;
  EXPECT_TRUE(validate_checkpoint(kept).ok());
}

// The run is bounded by 20 times its comm timeout (then killed: exit 137): a hang the
// timeout misses fails the test on the messages, instead of running to ctest's limit.
TEST_F(Safety, HungRankFailsTheOthersWithinTheTimeout) {
  const int timeout_s = 3;
  const testing::RunResult r =
      testing::run_command("timeout -s KILL " + std::to_string(20 * timeout_s) + " env " +
                           command(train_args(6, {"--nproc-per-node", "2", "--micro-batch", "1"}),
                                   "ANVIL_FAULT=hang_at_step:3 ANVIL_COMM_TIMEOUT_S=" + std::to_string(timeout_s)) +
                           " </dev/null");
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.exit_code, 137) << "still running after 20 times the comm timeout: the hang was not detected\n"
                              << r.out;
  EXPECT_TRUE(has(r.out, "rank 1 stops answering before step 3")) << r.out;
  // The step's first collective is the host sum of its target tokens.
  EXPECT_TRUE(has(r.out, "anvil train: rank 0 (pid ")) << r.out;
  EXPECT_TRUE(has(r.out, "host_all_gather on rank 0 of 2 (step 3, tag 'target tokens')")) << r.out;
  EXPECT_TRUE(has(r.out, "no answer from rank 1 within 3 s (ANVIL_COMM_TIMEOUT_S)")) << r.out;
}

TEST_F(Safety, OnSaveCopiesInTheBackground) {
  // Copies held until the run has ended its steps and waits for them (the test then creates
  // the file they wait for): --keep-last 1 must not delete a checkpoint being copied.
  const std::string ckpt = dir() + "/ckpt-copies", backup = dir() + "/backup", go = dir() + "/copies-go";
  fs::create_directories(backup);
  const std::string held = "while [ ! -e '" + go + "' ]; do sleep 0.01; done; cp -r \"$1\" '" + backup +
                           "'/; echo copied";
  const testing::RunResult r =
      run_then(train_args(6, {"--ckpt-dir", ckpt, "--save-every", "2", "--keep-last", "1", "--on-save", held}),
               "--on-save: waiting for 3 copies still running",
               [&](testing::Background&) { std::ofstream(go) << "go"; });
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* s : {"step-2", "step-4", "step-6"}) {
    EXPECT_TRUE(validate_checkpoint(backup + "/" + s).ok()) << s << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "--on-save: " + ckpt + "/" + s + " done in ")) << r.out;
  }
  EXPECT_EQ(list_checkpoints(ckpt), std::vector<std::string>{ckpt + "/step-6"});

  // Failing copies: reported with the exit code and last line; the newest checkpoint whose
  // copy succeeded is kept past --keep-last.
  const std::string ckpt2 = dir() + "/ckpt-copies-fail";
  const std::string flaky = dir() + "/flaky-copy.sh";
  std::ofstream(flaky) << "case \"$1\" in *step-2) true;; *) echo 'rsync: connection refused' >&2; exit 7;; esac\n";
  const testing::RunResult f =
      run(train_args(6, {"--ckpt-dir", ckpt2, "--save-every", "2", "--keep-last", "1", "--on-save", "sh " + flaky}));
  EXPECT_EQ(f.exit_code, 0) << f.out;
  EXPECT_TRUE(has(f.out, "failed on " + ckpt2 + "/step-4 with exit code 7; its last line: 'rsync: connection refused'"))
      << f.out;
  EXPECT_EQ(list_checkpoints(ckpt2), (std::vector<std::string>{ckpt2 + "/step-6", ckpt2 + "/step-2"}));
}

TEST_F(Safety, ExportOfACheckpointFolderNamesItsNewestCheckpoint) {
  const std::string ckpt = dir() + "/ckpt-export";
  ASSERT_EQ(run(train_args(4, {"--ckpt-dir", ckpt, "--save-every", "2"})).exit_code, 0);
  const testing::RunResult r = run({"export", "--ckpt", ckpt, "--out", dir() + "/exported"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(has(r.out, "anvil export: " + ckpt + " is a checkpoint folder (--ckpt-dir), not one checkpoint; its "
                         "newest complete checkpoint is " + ckpt + "/step-4: anvil export --ckpt " + ckpt + "/step-4"))
      << r.out;
}

}  // namespace
}  // namespace anvil
