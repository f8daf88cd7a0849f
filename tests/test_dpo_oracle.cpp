// DPO against TRL (tests/oracle/dpo_oracle.py): random preference pairs on each golden tiny
// model, float64 on the CPU; TRL's DPOTrainer.compute_loss (reference log-probs precomputed)
// and its backward against `anvil grad --objective dpo`: the loss, every parameter's gradient,
// and the model's completion log-probs (the forward the reference pass runs) against
// transformers'. For sigmoid, ipo, and robust (TRL 1.16's label-smoothed sigmoid; its sigmoid
// reads no label smoothing, which anvil refuses there).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "io/safetensors.h"
#include "model_golden.h"
#include "testing.h"

namespace anvil {
namespace {

struct LossCase {
  const char* loss;
  const char* beta;
  const char* smoothing;
};

double rel(double got, double want) { return std::abs(got - want) / std::abs(want); }

class DpoOracle : public ::testing::TestWithParam<std::string> {};

TEST_P(DpoOracle, LossGradientsAndLogpsAreTrls) {
  ANVIL_REQUIRE_ORACLE();
  const std::string model = testing::fixture_dir(GetParam());
  const std::string tok = testing::shared_dir() + "/fixtures/qwen3-tokenizer";
  int seed = 20261202;
  for (const LossCase& lc : {LossCase{"sigmoid", "0.1", "0"}, LossCase{"robust", "0.5", "0.1"},
                             LossCase{"ipo", "0.1", "0"}}) {
    const std::string dir = testing::temp_dir("dpo_oracle");
    const auto o = testing::run_oracle("dpo_oracle.py", {model, tok, dir, std::to_string(seed++), lc.loss, lc.beta,
                                                         lc.smoothing});
    ASSERT_EQ(o.exit_code, 0) << o.out;
    const auto r = testing::run_anvil({"grad", "--device", "cpu", "--model", model, "--tokens",
                                       dir + "/tokens.safetensors", "--out", dir + "/anvil.safetensors", "--objective",
                                       "dpo", "--dpo-loss", lc.loss, "--beta", lc.beta, "--label-smoothing",
                                       lc.smoothing});
    ASSERT_EQ(r.exit_code, 0) << r.out;
    SafetensorsFile got(dir + "/anvil.safetensors"), want(dir + "/golden.safetensors");
    const double loss_err = rel(read_as_f64(got.get("loss"))[0], read_as_f64(want.get("loss"))[0]);
    EXPECT_LE(loss_err, 1e-6) << lc.loss;
    double logp_err = 0, grad_err = 0;
    for (const char* name : {"logps_chosen", "logps_rejected"}) {
      const auto g = read_as_f64(got.get(name)), w = read_as_f64(want.get(name));
      for (size_t k = 0; k < w.size(); ++k) logp_err = std::max(logp_err, rel(g[k], w[k]));
    }
    EXPECT_LE(logp_err, 1e-6) << lc.loss;
    std::string worst;
    for (const SafeTensorInfo& info : want.tensors()) {
      if (info.name.rfind("grad.", 0) != 0) continue;
      const SafeTensorInfo* g = got.find(info.name);
      if (!g && info.name == "grad.lm_head.weight") continue;  // tied: in the embedding's
      ASSERT_NE(g, nullptr) << info.name;
      const auto gv = read_as_f64(*g), wv = read_as_f64(info);
      const double e = testing::rel_l2(gv.data(), wv.data(), gv.size());
      EXPECT_LE(e, 1e-5) << lc.loss << " " << info.name;  // the fp32 CPU backend: measured 1.2e-6 at worst
      if (e > grad_err) grad_err = e, worst = info.name;
    }
    std::printf("%s %s beta %s smoothing %s: loss rel %.2e, log-probs rel %.2e, gradients rel L2 %.2e (%s)\n",
                GetParam().c_str(), lc.loss, lc.beta, lc.smoothing, loss_err, logp_err, grad_err, worst.c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DpoOracle, ::testing::Values("tiny-qwen3", "tiny-qwen3-untied"));

}  // namespace
}  // namespace anvil
