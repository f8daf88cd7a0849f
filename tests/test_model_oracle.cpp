// Model parity generated live: random small configs of each supported family (Qwen3; Qwen2
// with q/k/v biases; Llama 3 with llama3 RoPE scaling), head_dim 16-128, 1-8 query heads per
// key/value head, tied and untied embeddings, odd sizes. tests/oracle/model_oracle.py makes
// each model folder, its tokens and transformers' float64 loss, logits and gradients on the
// CPU (eager attention); `anvil grad --device cpu` computes them on the same folder and
// tokens. Bars: loss rel 1e-6, logits rel L2 1e-5, every gradient rel L2 1e-4. The seed is
// fixed, so the configs are the same on every run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "io/safetensors.h"
#include "testing.h"

namespace anvil {
namespace {

constexpr int kCases = 10;  // per family

class ModelOracle : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelOracle, LossLogitsAndGradients) {
  ANVIL_REQUIRE_ORACLE();
  const std::string family = GetParam();
  const std::string dir = testing::temp_dir("model-oracle");
  const auto made = testing::run_oracle("model_oracle.py", {family, std::to_string(kCases), "20261130", dir});
  ASSERT_EQ(made.exit_code, 0) << made.out;
  double worst_loss = 0, worst_logits = 0, worst_grad = 0;
  std::string worst_grad_name;
  std::printf("%s", made.out.c_str());
  for (int k = 0; k < kCases; ++k) {
    const std::string c = dir + "/" + std::to_string(k);
    const auto r = testing::run_anvil({"grad", "--device", "cpu", "--model", c, "--tokens", c + "/tokens.safetensors",
                                       "--out", c + "/anvil.safetensors"});
    ASSERT_EQ(r.exit_code, 0) << "case " << k << ": " << r.out;
    SafetensorsFile got(c + "/anvil.safetensors"), want(c + "/golden.safetensors");
    const double loss = read_as_f64(got.get("loss"))[0], want_loss = read_as_f64(want.get("loss"))[0];
    const double loss_err = std::abs(loss - want_loss) / std::abs(want_loss);
    EXPECT_LE(loss_err, 1e-6) << "case " << k << " loss " << loss << " want " << want_loss;
    const auto logits = read_as_f64(got.get("logits")), want_logits = read_as_f64(want.get("logits"));
    EXPECT_TRUE(testing::close_rel_l2(logits, want_logits, 1e-5)) << "case " << k << " logits";
    worst_loss = std::max(worst_loss, loss_err);
    worst_logits = std::max(worst_logits, testing::rel_l2(logits.data(), want_logits.data(), logits.size()));
    int grads = 0;
    for (const SafeTensorInfo& info : want.tensors()) {
      const std::string& name = info.name;
      if (name.rfind("grad.", 0) != 0) continue;
      // Tied models: anvil writes the embedding's gradient only, which holds the head's.
      const SafeTensorInfo* g = got.find(name);
      if (!g && name == "grad.lm_head.weight") continue;
      ASSERT_NE(g, nullptr) << "case " << k << ": anvil wrote no " << name;
      const auto gv = read_as_f64(*g), wv = read_as_f64(info);
      EXPECT_TRUE(testing::close_rel_l2(gv, wv, 1e-4)) << "case " << k << " " << name;
      const double e = testing::rel_l2(gv.data(), wv.data(), gv.size());
      if (e > worst_grad) worst_grad = e, worst_grad_name = "case " + std::to_string(k) + " " + name;
      ++grads;
    }
    EXPECT_GT(grads, 0);
  }
  std::printf("%s, %d random configs: worst loss rel error %.2e, logits rel L2 %.2e, gradient rel L2 %.2e (%s)\n",
              family.c_str(), kCases, worst_loss, worst_logits, worst_grad, worst_grad_name.c_str());
}

INSTANTIATE_TEST_SUITE_P(Families, ModelOracle, ::testing::Values("qwen3", "qwen2", "llama"));

}  // namespace
}  // namespace anvil
