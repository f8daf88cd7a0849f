// An eval set carved from the training rows (--eval-rows N, --eval-fraction F; data/holdout.h),
// on 240 of the demo's chats:
//  - the held-out side and the training side are complements: no row in both, none lost;
//  - --eval-rows holds out exactly N rows; the same seed makes the same split, another seed
//    another one;
//  - anvil train packs and evaluates exactly the held-out rows and trains on the others
//    (their block counts are those of prepare_packed on each side); a fraction too small
//    to hold out a row says so.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/holdout.h"
#include "data/packing.h"
#include "testing.h"

namespace anvil {
namespace {

std::string demo() { return std::string(ANVIL_SOURCE_DIR) + "/data/demo"; }

std::string rows_file(const std::string& dir) {
  std::ifstream in(demo() + "/arithmetic.jsonl");
  const std::string path = dir + "/rows.jsonl";
  std::ofstream out(path);
  std::string line;
  for (int i = 0; i < 240 && std::getline(in, line); ++i) out << line << "\n";
  return path;
}

std::vector<bool> held_rows(const RowHoldout& h, const std::string& file) {
  const HoldoutRule rule = HoldoutRule::make(h, {file});
  std::vector<bool> held;
  for (int64_t i = 0; i < 240; ++i) held.push_back(rule.keeps(i));
  return held;
}

TEST(EvalHoldout, SidesAreDisjointAndRepeatBySeed) {
  const std::string file = rows_file(testing::temp_dir("holdout"));
  for (const RowHoldout base : {RowHoldout{0, 40, 3, false}, RowHoldout{0.25, 0, 3, false}}) {
    RowHoldout eval = base, train = base;
    eval.held_out = true;
    const std::vector<bool> held = held_rows(eval, file), kept = held_rows(train, file);
    int64_t n = 0;
    for (size_t i = 0; i < held.size(); ++i) {
      EXPECT_NE(held[i], kept[i]) << "row " << i << " must be on exactly one side";
      n += held[i];
    }
    if (base.rows > 0) EXPECT_EQ(n, 40);
    else EXPECT_TRUE(n > 30 && n < 90) << n << " of 240 rows for a fraction of 0.25";
    EXPECT_EQ(held_rows(eval, file), held) << "the same seed, the same split";
    eval.seed = 4;
    EXPECT_NE(held_rows(eval, file), held) << "another seed, another split";
  }
  EXPECT_THROW(HoldoutRule::make(RowHoldout{0, 240, 3, true}, {file}), Error);
}

TEST(EvalHoldout, TrainEvaluatesTheHeldOutRows) {
  const std::string dir = testing::temp_dir("holdout-train");
  const std::string file = rows_file(dir);
  PrepareOptions o;
  o.tokenizer = demo();
  o.data = {file};
  o.seq_len = 32;
  o.holdout = RowHoldout{0, 40, 3, true};
  const Json held = prepare_packed(o, dir + "/held");
  o.holdout.held_out = false;
  const Json rest = prepare_packed(o, dir + "/rest");
  EXPECT_EQ(held["rows"].get<int64_t>(), 40);
  EXPECT_EQ(rest["rows"].get<int64_t>(), 200);
  const auto r = testing::run_anvil({"train", "--device", "cpu", "--preset", "tiny", "--tokenizer", demo(), "--data",
                                     file, "--seq-len", "32", "--steps", "2", "--seed", "3", "--eval-rows", "40",
                                     "--data-cache", dir + "/cache"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find(": " + std::to_string(rest["num_blocks"].get<int64_t>()) + " blocks of 32 tokens"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("eval loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(" + std::to_string(held["num_blocks"].get<int64_t>()) + " blocks, "), std::string::npos)
      << r.out;
  const auto both = testing::run_anvil({"train", "--device", "cpu", "--preset", "tiny", "--tokenizer", demo(),
                                        "--data", file, "--seq-len", "32", "--eval-rows", "4", "--eval-data", file});
  EXPECT_EQ(both.exit_code, 2) << both.out;
  const auto none = testing::run_anvil({"train", "--device", "cpu", "--preset", "tiny", "--tokenizer", demo(),
                                        "--data", file, "--seq-len", "32", "--eval-fraction", "1e-30",
                                        "--data-cache", dir + "/cache"});
  EXPECT_NE(none.exit_code, 0) << none.out;
  EXPECT_NE(none.out.find("no row of " + file + " falls in the held-out set of --eval-fraction 1e-30"),
            std::string::npos) << none.out;
}

}  // namespace
}  // namespace anvil
