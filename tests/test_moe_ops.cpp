// The mixture-of-experts ops on the CPU reference, by hand: the router's top-k breaks ties
// by the lower expert index, the sort by expert is stable (ties by assignment number), the
// load-balancing loss and its gradient are transformers' formula, and the op front refuses a
// tensor of a wrong shape naming the op and the tensor. `anvil init --num-layers` writes a
// shallower copy of a MoE config.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "core/fs.h"
#include "ops/ops.h"
#include "testing.h"

namespace anvil {
namespace {

Tensor f32(std::vector<float>& v, Shape s) { return {v.data(), DType::kF32, s}; }
Tensor i32(std::vector<int32_t>& v, Shape s) { return {v.data(), DType::kI32, s}; }

TEST(MoeOps, TopKTiesGoToTheLowerExpert) {
  const auto ops = make_cpu_ops();
  // One token, five experts: three share the largest logit.
  std::vector<float> logits = {1, 3, 3, 0, 3}, probs(5), w(3), stats(10);
  std::vector<int32_t> idx(3);
  ops->moe_router_forward(f32(probs, {1, 5}), i32(idx, {1, 3}), f32(w, {1, 3}), f32(stats, {2, 5}),
                          f32(logits, {1, 5}), true);
  EXPECT_EQ(idx, (std::vector<int32_t>{1, 2, 4}));
  for (float x : w) EXPECT_FLOAT_EQ(x, 1.0f / 3.0f);
  EXPECT_EQ(std::vector<float>(stats.begin(), stats.begin() + 5), (std::vector<float>{0, 1, 1, 0, 1}));
  double sum = 0;
  for (float p : probs) sum += p;
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_FLOAT_EQ(stats[5 + 1], probs[1]);
  // Not renormalised: the probabilities themselves.
  ops->moe_router_forward(f32(probs, {1, 5}), i32(idx, {1, 3}), f32(w, {1, 3}), Tensor(), f32(logits, {1, 5}), false);
  EXPECT_FLOAT_EQ(w[0], probs[1]);
}

TEST(MoeOps, SortIsStableByExpert) {
  const auto ops = make_cpu_ops();
  // Three tokens, top-2 of three experts: assignments 0..5 go to experts 2 0 0 2 1 0.
  std::vector<int32_t> topk = {2, 0, 0, 2, 1, 0}, order(6), rows(6), offsets(4);
  ops->moe_sort(i32(order, {6}), i32(rows, {6}), i32(offsets, {4}), i32(topk, {3, 2}));
  EXPECT_EQ(order, (std::vector<int32_t>{1, 2, 5, 4, 0, 3}));
  EXPECT_EQ(offsets, (std::vector<int32_t>{0, 3, 4, 6}));
  for (int32_t r = 0; r < 6; ++r) EXPECT_EQ(rows[static_cast<size_t>(order[static_cast<size_t>(r)])], r);
  // Gather and combine: each token's rows back, weighted.
  std::vector<float> x = {1, 10, 2, 20, 3, 30}, xs(12), out(6), w = {0.5f, 0.25f, 1, 2, 3, 4};
  ops->moe_gather(f32(xs, {6, 2}), f32(x, {3, 2}), i32(order, {6}), 2);
  EXPECT_EQ(xs, (std::vector<float>{1, 10, 2, 20, 3, 30, 3, 30, 1, 10, 2, 20}));
  ops->moe_combine_forward(f32(out, {3, 2}), f32(xs, {6, 2}), i32(rows, {6}), f32(w, {3, 2}));
  EXPECT_EQ(out, (std::vector<float>{0.75f, 7.5f, 6, 60, 21, 210}));
}

TEST(MoeOps, AuxLossIsTransformersFormula) {
  const auto ops = make_cpu_ops();
  // Two sparse layers of 4 tokens, 3 experts, top-1: counts and probability sums per layer.
  std::vector<float> stats = {2, 1, 1, 1.5f, 1.2f, 1.3f, 0, 4, 0, 0.5f, 3.0f, 0.5f}, grad(3), loss = {1.0f};
  const float coef = 0.1f, weight = 8.0f;
  ops->moe_aux_loss(f32(loss, {1}), f32(grad, {3}), f32(stats, {2, 2, 3}), 4, coef, weight);
  // E * sum_e (count_e / 8) (prob_e / 8), counts (2, 5, 1), probs (2, 4.2, 1.8).
  const double aux = 3.0 * (2 * 2 + 5 * 4.2 + 1 * 1.8) / 64.0;
  EXPECT_NEAR(loss[0], 1.0 + coef * aux * weight, 1e-5);
  EXPECT_NEAR(grad[1], coef * 3.0 * 5 / 64.0, 1e-7);
}

TEST(MoeOps, FrontRefusesWrongShapesByName) {
  const auto ops = make_cpu_ops();
  std::vector<float> a(256);
  std::vector<int32_t> b(64);
  auto expect_refused = [](const std::function<void()>& call, const std::string& op, const std::string& tensor) {
    try {
      call();
      ADD_FAILURE() << op << " accepted a wrong " << tensor;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInternal);
      EXPECT_EQ(std::string(e.what()).rfind(op + ": ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(tensor), std::string::npos) << e.what();
    }
  };
  expect_refused([&] { ops->moe_linear_forward(f32(a, {6, 4}), f32(a, {6, 8}), f32(a, {3, 4, 8}), i32(b, {3})); },
                 "moe_linear_forward", "offsets");
  expect_refused([&] { ops->moe_combine_forward(f32(a, {3, 8}), f32(a, {5, 8}), i32(b, {6}), f32(a, {3, 2})); },
                 "moe_combine_forward", "ys");
  expect_refused(
      [&] {
        ops->moe_router_forward(f32(a, {3, 4}), i32(b, {3, 2}), f32(a, {3, 3}), Tensor(), f32(a, {3, 4}), true);
      },
      "moe_router_forward", "topk_w");
}

TEST(MoeInit, NumLayersMakesAShallowerCopy) {
  const std::string dir = testing::temp_dir("moe-init");
  const Json cfg = {{"architectures", {"Qwen3MoeForCausalLM"}}, {"vocab_size", 64}, {"hidden_size", 32},
                    {"intermediate_size", 48}, {"num_hidden_layers", 6}, {"num_attention_heads", 2},
                    {"num_key_value_heads", 1}, {"head_dim", 16}, {"num_experts", 4}, {"num_experts_per_tok", 2},
                    {"moe_intermediate_size", 8}, {"mlp_only_layers", {0}}};
  json_write_file(dir + "/config.json", cfg);
  const auto r =
      testing::run_anvil({"init", "--config", dir + "/config.json", "--num-layers", "2", "--out", dir + "/m"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(json_read_file(dir + "/m/config.json")["num_hidden_layers"], 2);
  // 2 layers: a dense one and a sparse one, every expert named as the hub names them.
  EXPECT_NE(r.out.find("Qwen3MoeForCausalLM"), std::string::npos) << r.out;
  const auto bad = testing::run_anvil({"init", "--preset", "qwen3-30b-a3b", "--num-layers", "60", "--out", dir + "/x"});
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("has 48 layers"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace anvil
