// What a new user sees (issue 28): one error voice across the commands ("anvil <command>:
// <what>", exit 2 for bad input, 3 for a missing device), the nearest flag for a typo, help
// lines with one default each, the results of anvil train on stdout and its progress on
// stderr, a run's first line and its id in the metrics, the --metrics file refusing an
// unrelated run, the same tokens/s in the log and the report, nothing trained saying so,
// counted nouns, anvil plan saying why a mode does not fit, and a run whose output pipe's
// reader has gone still stopping on SIGINT with a checkpoint. CPU ranks, the tiny fixture.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "core/fs.h"
#include "core/json.h"
#include "core/units.h"
#include "io/checkpoint_files.h"
#include "report/tensorboard.h"
#include "testing.h"

namespace anvil {
namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

class CliOutput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::temp_dir("cli-output"));
    testing::write_random_blocks(*dir_ + "/blocks.safetensors", 24, 37, 7);
  }
  static std::string dir() { return *dir_; }
  static std::string tiny() { return testing::shared_dir() + "/fixtures/tiny-qwen3"; }

  // anvil train on the tiny fixture model and the 24 blocks (12 steps of 2), then `extra`.
  static std::vector<std::string> train_args(int64_t steps, const std::vector<std::string>& extra) {
    return testing::tiny_train_args(dir() + "/blocks.safetensors", steps, extra);
  }
  static std::string command(const std::vector<std::string>& args) {
    std::string cmd = testing::shell_quote(testing::anvil_binary());
    for (const auto& a : args) cmd += " " + testing::shell_quote(a);
    return cmd;
  }
  // stdout and stderr apart: {exit code, stdout, stderr}.
  struct Split {
    int code;
    std::string out, err;
  };
  static Split run_split(const std::vector<std::string>& args, const std::string& tag) {
    const std::string out = dir() + "/" + tag + ".out", err = dir() + "/" + tag + ".err";
    const testing::RunResult r = testing::run_command("{ " + command(args) + " </dev/null >" +
                                                      testing::shell_quote(out) + " 2>" + testing::shell_quote(err) +
                                                      "; }");
    return {r.exit_code, read_file(out), read_file(err)};
  }
  static std::string* dir_;
};
std::string* CliOutput::dir_ = nullptr;

TEST_F(CliOutput, ErrorsSpeakInOneVoiceWithExitCodes) {
  struct Case {
    std::vector<std::string> args;
    std::string line;  // the error line opens with it
    int code;
  };
  const std::vector<Case> cases = {
      {{"generate", "--model", dir() + "/no-model", "--prompt", "hi"}, "anvil generate: ", 2},
      {{"report", dir() + "/no-metrics.jsonl"}, "anvil report: " + dir() + "/no-metrics.jsonl: cannot open", 2},
      {{"grad", "--model", "nobody/no-such-model", "--tokens", "x", "--out", "y"}, "anvil grad: ", 2},
      {{"bench", "all_reduce", "--device", "cuda"}, "anvil bench: no GPU is visible", 3},
      {{"bench", "p2p", "--device", "cpu"}, "anvil bench p2p: it measures GPUs only", 2},
      {{"export", "--ckpt", dir() + "/no-ckpt", "--out", dir() + "/x"}, "anvil export: ", 2},
  };
  for (const Case& c : cases) {
    const testing::RunResult r = testing::run_anvil(c.args);
    EXPECT_EQ(r.exit_code, c.code) << c.args[0] << "\n" << r.out;
    EXPECT_EQ(r.out.rfind(c.line, 0), 0u) << c.args[0] << ": the error line opens with '" << c.line << "'\n" << r.out;
    EXPECT_FALSE(has(r.out, "error: ")) << r.out;
    EXPECT_EQ(lines_of(r.out).size(), 1u) << r.out;
  }
  // A second run on a locked checkpoint folder: the lock's message in the same voice.
  const std::string ckpt = dir() + "/ckpt-locked";
  testing::Background holder("exec " + command(train_args(2000, {"--ckpt-dir", ckpt, "--save-every", "1000"})));
  ASSERT_TRUE(holder.wait_for_line("step 1/"));
  const testing::RunResult locked = testing::run_anvil(train_args(2, {"--ckpt-dir", ckpt}));
  EXPECT_EQ(locked.exit_code, 2) << locked.out;
  EXPECT_TRUE(has(locked.out, "anvil train: --ckpt-dir " + ckpt + " is in use by another anvil run")) << locked.out;
}

TEST_F(CliOutput, TyposGetTheNearestFlagAndBadCountsNameTheirFlag) {
  testing::RunResult r = testing::run_anvil({"train", "--lerning-rate", "3e-4"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.out, "anvil train: unknown flag --lerning-rate (did you mean --learning-rate? see anvil train "
                         "--help)")) << r.out;
  r = testing::run_anvil({"plan", "--presett", "tiny"});
  EXPECT_TRUE(has(r.out, "unknown flag --presett (did you mean --preset?")) << r.out;
  r = testing::run_anvil({"train", "--frobnicate", "1"});
  EXPECT_TRUE(has(r.out, "anvil train: unknown flag --frobnicate (see anvil train --help)")) << r.out;

  r = testing::run_anvil(train_args(-5, {}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "anvil train: --steps must be at least 1, got -5\n");

  // One default a flag: its help's own where it says one (the help of each flag is its names
  // line and the lines under it).
  for (const char* command : {"train", "generate", "plan", "bench", "report", "export", "prepare"}) {
    std::vector<std::string> flags;
    for (const std::string& line : lines_of(testing::run_anvil({command, "--help"}).out)) {
      if (line.rfind("  -", 0) == 0) flags.emplace_back();
      if (!flags.empty()) flags.back().append(line).append("\n");
    }
    for (const std::string& flag : flags) {
      const size_t first = flag.find("[default:");
      EXPECT_TRUE(first == std::string::npos || flag.find("[default:", first + 1) == std::string::npos)
          << command << ": " << flag;
    }
  }
  const std::string help = testing::run_anvil({"train", "--help"}).out;
  EXPECT_TRUE(has(help, "[default: the data's blocks' length;")) << help;
  EXPECT_FALSE(has(help, "[default: 0]\n  --micro-batch")) << "--seq-len's 0 is the data's: " << help;
}

TEST_F(CliOutput, ResultsOnStdoutProgressOnStderrAndTheRunNamed) {
  const std::string metrics = dir() + "/named.jsonl";
  const Split r = run_split(train_args(12, {"--metrics", metrics, "--seed", "3"}), "named");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<std::string> err = lines_of(r.err), out = lines_of(r.out);
  ASSERT_FALSE(err.empty());
  const std::string first = "anvil train: run ";
  ASSERT_EQ(err[0].rfind(first, 0), 0u) << r.err;
  const std::string id = err[0].substr(first.size(), err[0].find(':', first.size()) - first.size());
  EXPECT_EQ(err[0], first + id + ": model " + tiny() + ", data " + dir() + "/blocks.safetensors, mode auto, seed 3");
  EXPECT_TRUE(has(r.err, "step 1/12")) << r.err;
  EXPECT_TRUE(has(r.err, "): 24 blocks of 37 tokens, 12 steps of 2 sequences\n")) << r.err;
  EXPECT_FALSE(has(r.out, "step 1/")) << r.out;
  ASSERT_EQ(out.size(), 2u) << r.out;
  EXPECT_EQ(out[0].rfind("done: 12 steps, ", 0), 0u) << r.out;
  EXPECT_EQ(out[1].rfind("finished: final loss ", 0), 0u) << r.out;
  // The results of init and export too.
  const Split init = run_split({"init", "--preset", "tiny", "--out", dir() + "/fresh"}, "init");
  EXPECT_EQ(init.out, "wrote " + dir() + "/fresh: Qwen3ForCausalLM, 828800 parameters\n") << init.err;

  // The metrics: the header first (the run's id and resolved settings), each record with the id.
  const std::vector<std::string> records = lines_of(read_file(metrics));
  ASSERT_EQ(records.size(), 13u);
  const Json header = Json::parse(records[0]);
  EXPECT_EQ(header["run_id"], id);
  EXPECT_EQ(header["config"]["mode"], "ddp");
  EXPECT_EQ(header["config"]["seed"], 3);
  EXPECT_FALSE(header.contains("step"));
  const Json last = Json::parse(records.back());
  EXPECT_EQ(last["run_id"], id);
  EXPECT_EQ(last["step"], 12);

  // The log's tokens/s is the last record's mean_tokens_per_s, and the report's.
  char want[64];
  std::snprintf(want, sizeof want, "%.0f", last["mean_tokens_per_s"].get<double>());
  std::string grouped = want;
  for (int i = static_cast<int>(grouped.size()) - 3; i > 0; i -= 3) grouped.insert(static_cast<size_t>(i), ",");
  EXPECT_EQ(out[0].rfind("done: 12 steps, " + grouped + " tokens/s (tokens over step time, first 10 steps excluded)",
                         0), 0u) << out[0];
  const testing::RunResult report = testing::run_anvil({"report", metrics, "--out", dir() + "/named.html"});
  EXPECT_TRUE(has(report.out, "tokens/s    " + grouped + " (tokens over step time, first 10 steps excluded, as the "
                              "train log)")) << report.out;
}

TEST_F(CliOutput, MetricsRefuseAnotherRunUnlessItResumesOrAppends) {
  const std::string metrics = dir() + "/runs.jsonl", ckpt = dir() + "/ckpt-runs";
  const testing::RunResult first =
      testing::run_anvil(train_args(4, {"--metrics", metrics, "--ckpt-dir", ckpt, "--save-every", "2"}));
  ASSERT_EQ(first.exit_code, 0) << first.out;
  const std::string before = read_file(metrics);
  const std::string id = Json::parse(lines_of(before)[0])["run_id"];

  // A new run into the same file: refused before any step, the file untouched.
  testing::RunResult r = testing::run_anvil(train_args(4, {"--metrics", metrics}));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(has(r.out, "anvil train: --metrics " + metrics + " already holds the records of run " + id)) << r.out;
  EXPECT_TRUE(has(r.out, "--metrics-append")) << r.out;
  EXPECT_FALSE(has(r.out, "resolved ")) << "refused before the data and weights are read\n" << r.out;
  EXPECT_EQ(read_file(metrics), before);

  // The run resumed (its checkpoint carries the id): appended, under the same id.
  r = testing::run_anvil(train_args(6, {"--metrics", metrics, "--ckpt-dir", ckpt, "--save-every", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "anvil train: run " + id + " (resumed): ")) << r.out;
  const std::vector<std::string> resumed = lines_of(read_file(metrics));
  ASSERT_EQ(resumed.size(), 5u + 1u + 2u);
  EXPECT_EQ(Json::parse(resumed[5])["run_id"], id);
  EXPECT_EQ(Json::parse(resumed[5])["resumed_at_step"], 4);

  // --metrics-append: a run of its own in the file, which the report reads as a second run.
  r = testing::run_anvil(train_args(3, {"--metrics", metrics, "--metrics-append"}));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = testing::run_anvil({"report", metrics, "--out", dir() + "/runs.html"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "run " + id + " (" + metrics + ")\nsteps       1 to 6 (6 logged)")) << r.out;
  EXPECT_TRUE(has(r.out, "steps       1 to 3 (3 logged)")) << r.out;

  // Resumed with nothing left: said so, no "0 tokens/s".
  r = testing::run_anvil(train_args(6, {"--ckpt-dir", ckpt}));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "done: nothing left to train (the checkpoint is at step 6 of --steps 6)")) << r.out;
  EXPECT_FALSE(has(r.out, " 0 tokens/s")) << r.out;
}

// A run killed while it wrote a metrics record (SIGKILL stops a write() where it crosses a page
// of the file) leaves a last line without its newline: the resumed run drops it, says so, and
// every line of the file parses.
TEST_F(CliOutput, ATornMetricsLineFromAKilledRunIsDroppedOnResume) {
  const std::string metrics = dir() + "/torn.jsonl", ckpt = dir() + "/ckpt-torn";
  const testing::RunResult first =
      testing::run_anvil(train_args(4, {"--metrics", metrics, "--ckpt-dir", ckpt, "--save-every", "2"}));
  ASSERT_EQ(first.exit_code, 0) << first.out;
  const std::string whole = read_file(metrics);
  const std::string torn = R"({"run_id":"x","step":5,"loss":2.5,"lr")";
  write_file_atomic(metrics, whole + torn);
  testing::RunResult r = testing::run_anvil({"report", metrics, "--out", dir() + "/torn.html"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, metrics + ":6: the last line is incomplete")) << r.out;
  EXPECT_TRUE(has(r.out, "steps       1 to 4 (4 logged)")) << r.out;


  r = testing::run_anvil(train_args(6, {"--metrics", metrics, "--ckpt-dir", ckpt, "--save-every", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "--metrics " + metrics + ": its last line (" + std::to_string(torn.size()) +
                             " bytes, no newline) was cut short by a run killed while writing it")) << r.out;
  const std::string after = read_file(metrics);
  EXPECT_EQ(after.substr(0, whole.size()), whole);
  const std::vector<std::string> lines = lines_of(after);
  ASSERT_EQ(lines.size(), 5u + 1u + 2u) << after;
  for (const std::string& line : lines) EXPECT_TRUE(Json::parse(line, nullptr, false).is_object()) << line;
  EXPECT_EQ(Json::parse(lines[5])["resumed_at_step"], 4);
}

// A run piped into a reader that exits (as `anvil train 2>&1 | tee log` when Ctrl-C reaches
// tee too): the run keeps going, SIGINT still stops it after the step with a checkpoint, and
// the stop and resume lines reach the terminal (a pseudo-terminal made by script(1)).
TEST_F(CliOutput, SigintWithTheOutputPipesReaderGoneStillSaves) {
  const std::string ckpt = dir() + "/ckpt-pipe", fifo = dir() + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // The shell starts anvil writing into the fifo and prints its pid; the reader reads up to
  // the first step's line (anvil is in its loop, where SIGINT stops it) and closes the fifo
  // (the reader is gone); then the shell waits for anvil and prints its exit code.
  const std::string shell = command(train_args(2000, {"--ckpt-dir", ckpt, "--save-every", "1000"})) + " >" +
                            testing::shell_quote(fifo) + " 2>&1 & echo \"pid $!\"; grep -m 1 'step 1/' " +
                            testing::shell_quote(fifo) + " >/dev/null; echo reader-gone; wait $!; echo \"exit $?\"";
  testing::Background bg("exec script -qfec " + testing::shell_quote(shell) + " /dev/null");
  ASSERT_TRUE(bg.wait_for_line("reader-gone"));
  const std::string out = bg.out();
  const pid_t pid = static_cast<pid_t>(std::stol(out.substr(out.find("pid ") + 4)));
  ::kill(pid, SIGINT);
  const testing::RunResult r = bg.finish();
  EXPECT_TRUE(has(r.out, "exit 130")) << "anvil ended by SIGPIPE (exit 141) or otherwise:\n" << r.out;
  const std::vector<std::string> saved = list_checkpoints(ckpt);
  ASSERT_EQ(saved.size(), 1u) << "the graceful save";
  EXPECT_TRUE(validate_checkpoint(saved[0]).ok());
  EXPECT_TRUE(has(r.out, "anvil: SIGINT: stopping after the step in flight")) << r.out;
  EXPECT_TRUE(has(r.out, "stopped by SIGINT after step ")) << r.out;
  EXPECT_TRUE(has(r.out, "to resume: " + testing::anvil_binary() + " train ")) << r.out;
}

// The lines a new user reads give sizes, durations and counts in human units.
TEST_F(CliOutput, LogsSpeakInHumanUnits) {
  const testing::RunResult r = testing::run_anvil(train_args(1, {"--micro-batch", "1", "--export", dir() + "/units"}));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "24 blocks of 37 tokens, 1 step of 1 sequence\n")) << r.out;
  std::smatch m;
  EXPECT_TRUE(std::regex_search(r.out, m, std::regex("exported .* \\(bf16, 1 file, [0-9.]+ (kB|MB)\\)\n"))) << r.out;
  std::ofstream(dir() + "/prompt.jsonl") << "{\"input_ids\": [1, 2, 3]}\n";
  const testing::RunResult g = testing::run_anvil({"generate", "--model", tiny(), "--input", dir() + "/prompt.jsonl",
                                                   "--max-new-tokens", "2"});
  ASSERT_EQ(g.exit_code, 0) << g.out;
  EXPECT_TRUE(std::regex_search(g.out, m, std::regex("generated for 1 prompt; prefill: 3 tokens in [0-9.]+ (us|ms|s) "
                                                     "\\([0-9,]+ tokens/s\\); decode: [0-9]+ tokens? in [0-9.]+ "
                                                     "(us|ms|s) \\([0-9,]+ tokens/s\\)")))
      << g.out;
}

TEST_F(CliOutput, PlanSaysWhyAModeDoesNotFit) {
  const testing::RunResult two = testing::run_anvil({"plan", "--preset", "qwen3-14b", "--nproc", "2"});
  ASSERT_EQ(two.exit_code, 0) << two.out;
  EXPECT_TRUE(has(two.out, "why: ddp does not fit: 198.67 GiB planned + 1.00 GiB kept free (the CUDA context, "
                           "allocator slack) = 199.67 GiB > 139.80 GiB per GPU\n")) << two.out;
  EXPECT_TRUE(has(two.out, "gradients: the blocks' in bf16")) << two.out;
  const testing::RunResult one = testing::run_anvil({"plan", "--preset", "qwen3-8b", "--nproc", "1"});
  EXPECT_FALSE(has(one.out, "why: ddp")) << one.out;
  EXPECT_TRUE(has(one.out, "gradients: the blocks' in bf16")) << one.out;
  const testing::RunResult accum = testing::run_anvil({"plan", "--preset", "qwen3-8b", "--grad-accum", "2"});
  EXPECT_TRUE(has(accum.out, "gradients: fp32 (--grad-dtype auto: the gradients of several micro-batches are summed, "
                             "in fp32); bf16 needs --grad-accum 1")) << accum.out;
}

TEST(TensorBoard, MaskedCrc32cIsTfRecords) {
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);  // the CRC-32C check value
  const uint64_t len = 0;
  EXPECT_EQ(masked_crc32c(&len, 8), ((crc32c(&len, 8) >> 15) | (crc32c(&len, 8) << 17)) + 0xa282ead8u);
}

// The event files read back by the tensorboard package hold the metrics' scalars, step by step.
TEST_F(CliOutput, TensorBoardEventsEqualTheMetrics) {
  ANVIL_REQUIRE_ORACLE();
  const std::string metrics = dir() + "/tb.jsonl", tb = dir() + "/tb";
  const testing::RunResult r = testing::run_anvil(train_args(6, {"--metrics", metrics, "--tensorboard", tb,
                                                                 "--eval-data", dir() + "/blocks.safetensors",
                                                                 "--eval-every", "3"}));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const testing::RunResult o = testing::run_oracle("tensorboard_oracle.py", {tb});
  ASSERT_EQ(o.exit_code, 0) << o.out;
  const Json events = Json::parse(o.out.substr(o.out.find('{')));
  ASSERT_EQ(events["files"].size(), 1u);
  EXPECT_EQ(events["files"][0].get<std::string>().rfind("events.out.tfevents.", 0), 0u);
  EXPECT_EQ(events["file_version"], "brain.Event:2");
  const Json& scalars = events["scalars"];
  std::vector<Json> records;
  for (const std::string& line : lines_of(read_file(metrics)))
    if (Json j = Json::parse(line); j.contains("step")) records.push_back(j);
  ASSERT_EQ(records.size(), 6u);
  for (const char* tag : {"loss", "eval_loss", "lr", "grad_norm", "tokens_per_s", "peak_mem_gib"}) {
    ASSERT_TRUE(scalars.contains(tag)) << tag << "\n" << o.out;
    std::vector<std::pair<int64_t, double>> want;
    for (const Json& j : records)
      if (j.contains(tag) && j[tag].is_number()) want.emplace_back(j["step"].get<int64_t>(), j[tag].get<double>());
    ASSERT_EQ(scalars[tag].size(), want.size()) << tag;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(scalars[tag][i][0].get<int64_t>(), want[i].first) << tag;
      EXPECT_EQ(scalars[tag][i][1].get<double>(), static_cast<double>(static_cast<float>(want[i].second))) << tag;
    }
  }
  EXPECT_EQ(scalars["eval_loss"].size(), 2u);
  EXPECT_FALSE(scalars.contains("mfu")) << "MFU is measured on GPUs only";
}

TEST(Units, NumbersReadAsPeopleWriteThem) {
  EXPECT_EQ(format_bytes(1657600), "1.66 MB");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3.44e9), "3.44 GB");
  EXPECT_EQ(format_bytes(999.6e6), "1.00 GB");
  EXPECT_EQ(format_seconds(0.0107844), "10.8 ms");
  EXPECT_EQ(format_seconds(0.0004), "400 us");
  EXPECT_EQ(format_seconds(95.04), "95.0 s");
  EXPECT_EQ(format_count(1064.4), "1,064");
  EXPECT_EQ(format_count(1234567), "1,234,567");
  EXPECT_EQ(count_of(1, "sequence"), "1 sequence");
  EXPECT_EQ(count_of(2, "sequence"), "2 sequences");
}

}  // namespace
}  // namespace anvil
