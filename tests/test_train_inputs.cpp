// Inputs anvil train used to take without a word (on the CPU, the tiny fixture model and
// the demo's tokenizer), each now refused or reported:
//  - --seq-len above the model's max_position_embeddings: refused, saying the limit;
//  - --keep-last without --ckpt-dir: refused (it kept nothing);
//  - an empty data file: named as empty, not as "0 tokens make no block";
//  - a run that diverges: the step's record and the reason land in --metrics before the
//    error stops it.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/json.h"
#include "testing.h"

namespace anvil {
namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string tiny() { return testing::fixture_dir("tiny-qwen3"); }
std::string demo() { return std::string(ANVIL_SOURCE_DIR) + "/data/demo"; }

// anvil train on the tiny fixture with rows of `data` packed by the demo's tokenizer, then `extra`.
testing::RunResult train_rows(const std::string& data, const std::string& cache,
                              const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"train",      "--device",  "cpu",   "--model", tiny(),  "--data",
                                data,         "--tokenizer", demo(), "--data-cache", cache, "--steps", "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return testing::run_anvil(a);
}

TEST(TrainInputs, SeqLenPastTheModelsPositionsIsRefused) {
  const std::string dir = testing::temp_dir("inputs-seq");
  const testing::RunResult r = train_rows(demo() + "/arithmetic.jsonl", dir + "/cache", {"--seq-len", "1024"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(has(r.out, "anvil train: --seq-len 1024 is longer than the 512 positions of the model " + tiny() +
                             "/config.json (max_position_embeddings): use --seq-len 512 or less"))
      << r.out;
  EXPECT_FALSE(has(r.out, "step 1/")) << r.out;
  const testing::RunResult ok = train_rows(demo() + "/arithmetic.jsonl", dir + "/cache", {"--seq-len", "512"});
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
}

TEST(TrainInputs, KeepLastWithoutCheckpointFolderIsRefused) {
  const std::string dir = testing::temp_dir("inputs-keep");
  const testing::RunResult r = train_rows(demo() + "/arithmetic.jsonl", dir + "/cache",
                                          {"--seq-len", "64", "--keep-last", "2"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(has(r.out, "anvil train: --keep-last needs --ckpt-dir")) << r.out;
}

TEST(TrainInputs, EmptyDataFileSaysItIsEmpty) {
  const std::string dir = testing::temp_dir("inputs-empty");
  const std::string empty = dir + "/empty.jsonl";
  std::ofstream(empty).close();
  testing::RunResult r = train_rows(empty, dir + "/cache", {"--seq-len", "64"});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, empty + " is empty: no rows to train on")) << r.out;
  r = testing::run_anvil({"prepare", "--tokenizer", demo(), "--data", empty, "--seq-len", "64", "--out", dir + "/p"});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, empty + " is empty")) << r.out;
}

// A learning rate of 1e30 blows the weights up after the first update: step 2 is not finite.
TEST(TrainInputs, DivergedStepIsRecordedInTheMetrics) {
  const std::string dir = testing::temp_dir("inputs-nan");
  const std::string metrics = dir + "/m.jsonl";
  const testing::RunResult r = train_rows(demo() + "/arithmetic.jsonl", dir + "/cache",
                                          {"--seq-len", "64", "--steps", "4", "--lr", "1e30", "--log-every", "1",
                                           "--metrics", metrics});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "at step 2")) << r.out;
  std::ifstream in(metrics);
  std::string line, last;
  while (std::getline(in, line)) last = line;
  ASSERT_FALSE(last.empty()) << r.out;
  const Json j = json_parse(last, metrics);
  EXPECT_EQ(j.value("step", int64_t{0}), 2) << last;
  EXPECT_TRUE(has(j.value("diverged", std::string()), "at step 2")) << last;
}

}  // namespace
}  // namespace anvil
