// anvil train --objective dpo on the CPU, the tiny preset and the demo tokenizer, with random
// preference rows (conversations with a prompt, and the implicit-prompt form):
//  - two CPU ranks with the same global batch train as one (ddp, zero2 and fsdp): every step's loss
//    and TRL metrics, and the exported weights, within 1e-6 relative;
//  - the first step's loss is log 2 (the policy is its reference), the reference pass runs once
//    and a later run on the same data and model reads its cache;
//  - a checkpoint records the objective and DPO's settings, and a resume that changes beta or
//    the objective is refused (exit 2) naming the change;
//  - anvil prepare --objective dpo --max-length writes pairs that train on; --max-length is
//    refused on prepared blocks and with sft rows;
//  - recomputation (full, selective) gives the steps of none bit for bit; FP8 (tensorwise,
//    the CPU's exact emulation) trains within 1e-2 of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "core/json.h"
#include "io/safetensors.h"
#include "dpo_rows.h"
#include "testing.h"

namespace anvil {
namespace {

using testing::dpo_train_args;
using testing::step_records;

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

class DpoTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("dpo_train");
    testing::write_pairs(dir_);
  }
  std::string dir_;
};

TEST_F(DpoTrain, TwoRanksTrainAsOne) {
  const std::string one = dir_ + "/one";
  const auto r1 = testing::run_anvil(dpo_train_args("cpu", dir_, one, 4));
  ASSERT_EQ(r1.exit_code, 0) << r1.out;
  EXPECT_NE(r1.out.find("reference log-probs: one forward pass"), std::string::npos) << r1.out;
  const std::vector<Json> want = step_records(one + ".jsonl");
  ASSERT_EQ(want.size(), 4u);
  EXPECT_NEAR(want[0]["loss"].get<double>(), std::log(2.0), 1e-6);  // the policy is its reference
  SafetensorsFile want_w(one + "/model.safetensors");
  for (const char* mode : {"ddp", "zero2", "fsdp"}) {
    const std::string two = dir_ + "/two_" + mode;
    std::vector<std::string> args = dpo_train_args("cpu", dir_, two, 2);
    args.insert(args.end(), {"--nproc-per-node", "2", "--mode", mode});
    const auto r2 = testing::run_anvil(args);
    ASSERT_EQ(r2.exit_code, 0) << r2.out;
    EXPECT_NE(r2.out.find("reference log-probs: read from the cache"), std::string::npos) << r2.out;
    const std::vector<Json> got = step_records(two + ".jsonl");
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t s = 0; s < got.size(); ++s)
      for (const std::string& key : testing::dpo_metric_names()) {
        const double e = rel(got[s][key].get<double>(), want[s][key].get<double>());
        EXPECT_LE(e, 1e-6) << mode << " step " << s + 1 << " " << key;
        if (key != "rewards/margins" || s > 0) worst = std::max(worst, e);
      }
    SafetensorsFile got_w(two + "/model.safetensors");
    double worst_w = 0;
    for (const SafeTensorInfo& t : want_w.tensors()) {
      const auto a = read_as_f64(got_w.get(t.name)), b = read_as_f64(t);
      const double e = testing::rel_l2(a.data(), b.data(), b.size());
      EXPECT_LE(e, 1e-5) << mode << " " << t.name;  // test_parallel.cpp's bar for weights after AdamW
      worst_w = std::max(worst_w, e);
    }
    std::printf("2 ranks (%s) against 1: worst metric rel %.2e, weights rel L2 %.2e\n", mode, worst, worst_w);
  }
}

TEST_F(DpoTrain, ResumeRefusesAnotherObjective) {
  const std::string ck = dir_ + "/ckpt";
  std::vector<std::string> args = dpo_train_args("cpu", dir_, dir_ + "/a", 2);
  args.insert(args.end(), {"--steps", "2", "--save-every", "2", "--ckpt-dir", ck});
  const auto first = testing::run_anvil(args);
  ASSERT_EQ(first.exit_code, 0) << first.out;
  std::ifstream meta(ck + "/step-2/meta.json");
  const Json m = Json::parse(meta);
  EXPECT_EQ(m["train"]["objective"], "dpo");
  EXPECT_EQ(m["train"]["beta"], 0.2);
  std::vector<std::string> beta = dpo_train_args("cpu", dir_, dir_ + "/b", 2);
  beta.insert(beta.end(), {"--beta", "0.3", "--ckpt-dir", ck});
  const auto refused = testing::run_anvil(beta);
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.out.find("beta 0.2 -> 0.3"), std::string::npos) << refused.out;
  EXPECT_NE(refused.out.find("would train another objective"), std::string::npos) << refused.out;
  std::vector<std::string> same = dpo_train_args("cpu", dir_, dir_ + "/c", 2);
  same.insert(same.end(), {"--ckpt-dir", ck});
  const auto resumed = testing::run_anvil(same);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.out;
}

TEST_F(DpoTrain, RecomputeAndFp8) {
  const auto run = [&](const std::string& tag, const std::vector<std::string>& extra) {
    std::vector<std::string> args = dpo_train_args("cpu", dir_, dir_ + "/" + tag, 4);
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = testing::run_anvil(args);
    EXPECT_EQ(r.exit_code, 0) << tag << ": " << r.out;
    return step_records(dir_ + "/" + tag + ".jsonl");
  };
  const std::vector<Json> none = run("none", {"--recompute", "none"});
  ASSERT_EQ(none.size(), 4u);
  for (const char* r : {"full", "selective"}) {
    const std::vector<Json> got = run(r, {"--recompute", r});
    ASSERT_EQ(got.size(), none.size()) << r;
    for (size_t s = 0; s < got.size(); ++s)
      for (const std::string& key : testing::dpo_metric_names())
        EXPECT_EQ(got[s][key].get<double>(), none[s][key].get<double>()) << r << " step " << s + 1 << " " << key;
  }
  const std::vector<Json> fp8 = run("fp8", {"--fp8", "tensorwise"});
  ASSERT_EQ(fp8.size(), none.size());
  double worst = 0;
  for (size_t s = 0; s < fp8.size(); ++s) {
    const double e = rel(fp8[s]["loss"].get<double>(), none[s]["loss"].get<double>());
    EXPECT_LE(e, 1e-2) << "fp8 step " << s + 1;
    worst = std::max(worst, e);
  }
  std::printf("fp8 tensorwise against none: worst loss difference %.2e relative\n", worst);
}

TEST_F(DpoTrain, PreparedPairsTrain) {
  const std::string out = dir_ + "/prepared";
  const auto prep = testing::run_anvil({"prepare", "--tokenizer", testing::demo_dir(), "--data", dir_ + "/pairs.jsonl",
                                        "--seq-len", "96", "--objective", "dpo", "--max-length", "20", "--out", out});
  ASSERT_EQ(prep.exit_code, 0) << prep.out;
  EXPECT_NE(prep.out.find("pairs dropped (the prompt alone holds --max-length 20 tokens)"), std::string::npos)
      << prep.out;
  const auto on_prepared = [&](const std::string& run) {
    std::vector<std::string> args = dpo_train_args("cpu", dir_, dir_ + "/" + run, 4);
    *(std::find(args.begin(), args.end(), "--data") + 1) = out;
    return args;
  };
  const auto trained = testing::run_anvil(on_prepared("p"));
  ASSERT_EQ(trained.exit_code, 0) << trained.out;
  EXPECT_EQ(step_records(dir_ + "/p.jsonl").size(), 4u);
  std::vector<std::string> again = on_prepared("q");
  again.insert(again.end(), {"--max-length", "12"});
  const auto cut_again = testing::run_anvil(again);
  EXPECT_EQ(cut_again.exit_code, 2) << cut_again.out;
  EXPECT_NE(cut_again.out.find("--max-length cuts rows as they are prepared"), std::string::npos) << cut_again.out;
  const auto sft = testing::run_anvil({"train", "--device", "cpu", "--preset", "tiny", "--tokenizer",
                                       testing::demo_dir(), "--data", testing::demo_dir() + "/sums_train.jsonl",
                                       "--data-cache", dir_ + "/cache", "--seq-len", "96", "--steps", "1",
                                       "--max-length", "12"});
  EXPECT_EQ(sft.exit_code, 2) << sft.out;
  EXPECT_NE(sft.out.find("cuts preference pairs (--objective dpo) only"), std::string::npos) << sft.out;
}

}  // namespace
}  // namespace anvil
