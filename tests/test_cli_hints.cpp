// The first hour at the command line: a refusal names what is wrong (--seq-len out of range,
// another trainer's name for a setting, a table in the config file), anvil help CMD is CMD's
// help, --device defaults and reads alike in every command, --batch means generate's prompts
// only, prepare says the tokenizer stays behind (and generate takes it with --tokenizer), and
// train --help says each thing once, in 100 columns.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/fs.h"
#include "ops/ops.h"
#include "testing.h"

namespace anvil {
namespace {

using testing::run_anvil;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string source(const std::string& path) { return std::string(ANVIL_SOURCE_DIR) + "/" + path; }

std::string write(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// --seq-len 0 (the default: the blocks' length) cannot pack rows; below 0 or 1 is never a length.
TEST(CliHints, SeqLenOutOfRangeSaysSo) {
  for (const char* len : {"0", "-5", "1"}) {
    auto r = run_anvil({"train", "--model", source("tests/data/tiny-qwen2"), "--data",
                        source("data/demo/sums_train.jsonl"), "--steps", "1", "--seq-len", len});
    EXPECT_EQ(r.exit_code, 2) << len << ": " << r.out;
    EXPECT_FALSE(has(r.out, "is needed")) << len << ": " << r.out;
    EXPECT_TRUE(has(r.out, "--seq-len must be at least 2") || has(r.out, cat("--seq-len ", len, " is out of range")))
        << len << ": " << r.out;
  }
  auto p = run_anvil({"plan", "--preset", "tiny", "--seq-len", "-5"});
  EXPECT_EQ(p.exit_code, 2) << p.out;
  EXPECT_TRUE(has(p.out, "anvil plan: --seq-len -5 is out of range: a sequence holds at least 2 tokens")) << p.out;
}

// An unknown key or flag gets a suggestion only when one makes sense: epochs is not --eps but
// --steps; a [train] table is no flag at all (the file has no tables).
TEST(CliHints, UnknownKeysSuggestWhatMakesSense) {
  const std::string dir = testing::temp_dir("hints");
  auto run = [&](const std::string& file) {
    return run_anvil({"train", "--config", file, "--preset", "tiny", "--data", "x"});
  };
  auto r = run(write(dir, "epochs.toml", "epochs = 3\n"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.out, "unknown key 'epochs' (--steps N counts optimizer steps; anvil has no epochs)")) << r.out;
  EXPECT_FALSE(has(r.out, "--eps")) << r.out;
  r = run(write(dir, "table.toml", "[train]\nlr = 1e-4\nsteps = 3\n"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.out, "unknown table [train]: the file holds flags as top-level keys, in no table; move lr, "
                         "steps above [train]")) << r.out;
  EXPECT_FALSE(has(r.out, "--lr-min")) << r.out;
  r = run(write(dir, "far.toml", "colour = 3\n"));
  EXPECT_TRUE(has(r.out, "unknown key 'colour' (see anvil train --help)")) << "nothing near: no suggestion\n" << r.out;
  r = run(write(dir, "typo.toml", "lr_mn = 1e-4\n"));
  EXPECT_TRUE(has(r.out, "unknown key 'lr_mn' (nearest flag: --lr-min)")) << r.out;
  r = run_anvil({"train", "--epochs", "3"});
  EXPECT_TRUE(has(r.out, "unknown flag --epochs (--steps N counts optimizer steps; anvil has no epochs)")) << r.out;
}

TEST(CliHints, HelpCommandIsTheCommandsHelp) {
  for (const std::vector<std::string>& command : std::vector<std::vector<std::string>>{{"train"}, {"bench", "step"}}) {
    std::vector<std::string> help = {"help"}, flag = command;
    help.insert(help.end(), command.begin(), command.end());
    flag.push_back("--help");
    const auto a = run_anvil(help), b = run_anvil(flag);
    EXPECT_EQ(a.exit_code, 0) << a.out;
    EXPECT_TRUE(has(a.out, "usage: anvil " + command[0])) << a.out;
    EXPECT_EQ(a.out, b.out);
  }
  EXPECT_TRUE(has(run_anvil({"help"}).out, "usage: anvil <command>"));
}

// Every command that takes --device: the same default (cuda when a GPU is present, else cpu)
// in the same words.
TEST(CliHints, DeviceReadsAlikeEverywhere) {
  for (const std::vector<std::string>& command : std::vector<std::vector<std::string>>{
           {"train"}, {"generate"}, {"grad"}, {"bench"}, {"bench", "step"}}) {
    std::vector<std::string> args = command;
    args.push_back("--help");
    const auto r = run_anvil(args);
    EXPECT_TRUE(has(r.out, "\n  --device cpu|cuda           where to run [default: cuda when a GPU is present, else "
                           "cpu]\n")) << command[0] << ":\n" << r.out;
  }
  if (cuda_available()) GTEST_SKIP() << "a GPU here: the default is cuda";
  // No GPU here: a collective without --device measures CPU ranks.
  const auto b = run_anvil({"bench", "all_reduce", "-e", "1K", "--iters", "1", "--warmup", "0"});
  EXPECT_EQ(b.exit_code, 0) << b.out;
}

// --batch is one thing: generate's prompts at once. train's micro-batch is --micro-batch only,
// and train --batch says so rather than taking it as another name.
TEST(CliHints, BatchMeansOneThing) {
  for (const std::vector<std::string>& command :
       std::vector<std::vector<std::string>>{{"train"}, {"bench", "step"}, {"plan"}}) {
    std::vector<std::string> args = command;
    args.insert(args.end(), {"--preset", "tiny", "--batch", "4"});
    const auto r = run_anvil(args);
    EXPECT_EQ(r.exit_code, 2) << command[0] << ": " << r.out;
    EXPECT_TRUE(has(r.out, "--micro-batch B: sequences per micro-batch and GPU; --batch is generate's prompts"))
        << command[0] << ": " << r.out;
  }
  const auto g = run_anvil({"generate", "--help"});
  EXPECT_TRUE(has(g.out, "--batch B")) << g.out;
  EXPECT_TRUE(has(g.out, "prompts generated at once")) << g.out;
}

// A folder of prepared blocks keeps no tokenizer: prepare says what a run on it exports.
TEST(CliHints, PrepareSaysTheTokenizerStaysBehind) {
  const std::string out = testing::temp_dir("prepared") + "/blocks";
  const auto r = run_anvil({"prepare", "--tokenizer", source("data/demo"), "--data", source("data/demo/sums_train.jsonl"),
                            "--seq-len", "64", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, out + " holds token ids, not the tokenizer")) << r.out;
  EXPECT_TRUE(has(r.out, "anvil train --tokenizer " + source("data/demo"))) << r.out;
}

// train --help: within 100 columns, and short: a flag whose help fits beside it takes one line.
// A model folder without tokenizer files (the tiny fixture) generates text with the
// tokenizer named by --tokenizer; without it the refusal names the flag.
TEST(CliHints, GenerateTakesTheTokenizerFromAnotherFolder) {
  const std::string model = testing::shared_dir() + "/fixtures/tiny-qwen3";
  auto none = run_anvil({"generate", "--device", "cpu", "--model", model, "--prompt", "What is 1 + 1?"});
  EXPECT_EQ(none.exit_code, 2) << none.out;
  EXPECT_TRUE(has(none.out, "--tokenizer DIR")) << none.out;
  auto given = run_anvil({"generate", "--device", "cpu", "--model", model, "--tokenizer", source("data/demo"),
                          "--prompt", "What is 1 + 1?", "--max-new-tokens", "3"});
  EXPECT_EQ(given.exit_code, 0) << given.out;
  EXPECT_TRUE(has(given.out, "generated for 1 prompt")) << given.out;
  auto wrong = run_anvil({"generate", "--device", "cpu", "--model", model, "--tokenizer", model, "--prompt", "x"});
  EXPECT_EQ(wrong.exit_code, 2) << wrong.out;
  EXPECT_TRUE(has(wrong.out, "--tokenizer " + model + " has no tokenizer.json")) << wrong.out;
}

TEST(CliHints, TrainHelpIsShort) {
  const auto r = run_anvil({"train", "--help"});
  ASSERT_EQ(r.exit_code, 0);
  std::istringstream lines(r.out);
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    ++count;
    EXPECT_LE(line.size(), 100u) << line;
  }
  EXPECT_LE(count, 150) << r.out;
  EXPECT_TRUE(has(r.out, "\n  --steps N                   optimizer steps [default: 40]\n")) << r.out;
}

}  // namespace
}  // namespace anvil
