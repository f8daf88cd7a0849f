// Qwen3-MoE's router statistics in the training log, the --metrics file and TensorBoard
// (train/router_stats.h): a tiny MoE model trained on one CPU rank, whose first step (one
// micro-batch of every row, the weights as initialised) routes as transformers routes the
// same rows (tests/oracle/router_stats_oracle.py, float64): the experts' shares of each
// sparse layer's assignments, largest and smallest, are the oracle's counts over the layer's
// tokens x top-k, and the auxiliary loss is transformers' aux_loss. Two ranks of half the rows
// each report the same shares (their counts summed); a dense model reports none. And
// anvil train --router-aux-loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/fs.h"
#include "core/json.h"
#include "testing.h"
#include "tiny_moe.h"

namespace anvil {
namespace {

// The record of `step` in a metrics file.
Json metrics_record(const std::string& path, int64_t step) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (const Json j = json_parse(line, path); j.contains("step") && j["step"].get<int64_t>() == step) return j;
  ADD_FAILURE() << "no step " << step << " in " << path;
  return Json::object();
}

TEST(RouterStats, MetricsHoldTheExpertsSharesAndTheAuxLoss) {
  if (!testing::oracle_missing().empty()) ANVIL_SKIP_UNLESS_REQUIRED(testing::in_ci(), testing::oracle_missing());
  const std::string model = testing::tiny_moe_dir("router-stats", {{"mlp_only_layers", {1}}});
  const std::string dir = testing::temp_dir("router-stats-run");
  const int64_t rows = 4, T = 33, K = 2;
  testing::write_random_blocks(dir + "/blocks.safetensors", rows, T, 5);
  const auto oracle = testing::run_oracle(
      "router_stats_oracle.py", {model, dir + "/blocks.safetensors", dir + "/oracle.json"});
  ASSERT_EQ(oracle.exit_code, 0) << oracle.out;
  const Json want = json_read_file(dir + "/oracle.json");
  ASSERT_GT(want["min_gap"].get<double>(), 1e-4) << "the routing is decided by rounding: draw other rows";

  // The shares of the oracle's counts.
  double most = 0, least = 1;
  ASSERT_EQ(want["counts"].size(), 3u) << "layers 0, 2 and 3 are sparse";
  for (const Json& layer : want["counts"])
    for (const Json& count : layer) {
      const double share = count.get<double>() / static_cast<double>(rows * T * K);
      most = std::max(most, share);
      least = std::min(least, share);
    }

  const auto r = testing::run_anvil(testing::tiny_train_args(
      dir + "/blocks.safetensors", 2,
      {"--model", model, "--micro-batch", std::to_string(rows), "--metrics", dir + "/one.jsonl", "--tensorboard",
       dir + "/tb"}));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const Json one = metrics_record(dir + "/one.jsonl", 1);
  EXPECT_EQ(one["router_fraction_max"].get<double>(), most) << one.dump();
  EXPECT_EQ(one["router_fraction_min"].get<double>(), least) << one.dump();
  const double aux = want["aux_loss"].get<double>();
  EXPECT_NEAR(one["router_aux_loss"].get<double>(), aux, 1e-5 * aux) << one.dump();
  std::printf("router shares: max %.6f, min %.6f (transformers' counts %s); aux_loss %.9f against %.9f (rel %.2e); "
              "least routing gap %.2e\n",
              most, least, want["counts"].dump().c_str(), one["router_aux_loss"].get<double>(), aux,
              std::fabs(one["router_aux_loss"].get<double>() - aux) / aux, want["min_gap"].get<double>());
  EXPECT_TRUE(metrics_record(dir + "/one.jsonl", 2).contains("router_aux_loss"));
  EXPECT_NE(r.out.find("router share "), std::string::npos) << r.out;
  std::string events;
  for (const auto& f : std::filesystem::directory_iterator(dir + "/tb")) events += read_file(f.path().string());
  for (const char* tag : {"router_fraction_max", "router_fraction_min", "router_aux_loss"})
    EXPECT_NE(events.find(tag), std::string::npos) << tag << " is not in the TensorBoard events";

  // Two ranks of two rows each: the counts summed over the ranks.
  const auto two = testing::run_anvil(testing::tiny_train_args(
      dir + "/blocks.safetensors", 1,
      {"--model", model, "--nproc-per-node", "2", "--metrics", dir + "/two.jsonl"}));
  ASSERT_EQ(two.exit_code, 0) << two.out;
  const Json t = metrics_record(dir + "/two.jsonl", 1);
  EXPECT_EQ(t["router_fraction_max"].get<double>(), most) << t.dump();
  EXPECT_EQ(t["router_fraction_min"].get<double>(), least) << t.dump();

  // A dense model: no router statistics.
  const auto dense = testing::run_anvil(
      testing::tiny_train_args(dir + "/blocks.safetensors", 1, {"--metrics", dir + "/dense.jsonl"}));
  ASSERT_EQ(dense.exit_code, 0) << dense.out;
  EXPECT_FALSE(metrics_record(dir + "/dense.jsonl", 1).contains("router_fraction_max"));
  EXPECT_EQ(dense.out.find("router share"), std::string::npos) << dense.out;
}

// anvil train --router-aux-loss: the load-balancing loss added where config.json leaves it
// off, coef x aux on the first step's loss (the same weights and rows), aux the step's
// router_aux_loss; a model without experts is refused (exit 2) before any data is read.
TEST(RouterStats, TrainRouterAuxLossAddsTheLoss) {
  const std::string model = testing::tiny_moe_dir(
      "router-aux", {{"decoder_sparse_step", 2}, {"output_router_logits", false}, {"router_aux_loss_coef", 0.5}});
  const std::string dir = testing::temp_dir("router-aux-run");
  testing::write_random_blocks(dir + "/blocks.safetensors", 4, 33, 9);
  Json first[2];
  for (int on : {0, 1}) {
    std::vector<std::string> extra = {"--model", model, "--micro-batch", "4",
                                      "--metrics", dir + "/m" + std::to_string(on) + ".jsonl"};
    if (on) extra.push_back("--router-aux-loss");
    const auto r = testing::run_anvil(testing::tiny_train_args(dir + "/blocks.safetensors", 1, extra));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    first[on] = metrics_record(dir + "/m" + std::to_string(on) + ".jsonl", 1);
  }
  const double aux = first[1]["router_aux_loss"].get<double>();
  EXPECT_EQ(aux, first[0]["router_aux_loss"].get<double>()) << "the same routing";
  EXPECT_NEAR(first[1]["loss"].get<double>() - first[0]["loss"].get<double>(), 0.5 * aux, 1e-5)
      << first[0].dump() << "\n" << first[1].dump();

  const auto dense = testing::run_anvil(
      testing::tiny_train_args(dir + "/blocks.safetensors", 1, {"--router-aux-loss"}));
  EXPECT_EQ(dense.exit_code, 2) << dense.out;
  EXPECT_NE(dense.out.find("--router-aux-loss: the model "), std::string::npos) << dense.out;
  EXPECT_NE(dense.out.find("has no experts"), std::string::npos) << dense.out;
}

}  // namespace
}  // namespace anvil
