// The CPU reference model against the float64 golden fixtures of PyTorch/transformers:
// logits, loss and every gradient of one batch, and an 8-step AdamW run (loss and pre-clip
// gradient norm of every step, final parameters), for Qwen3 (tied and untied), Qwen2 and
// Llama 3 (llama3 RoPE scaling).
#include <gtest/gtest.h>

#include <cmath>

#include "core/json.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/weights.h"
#include "train/open_run.h"
#include "testing.h"

namespace anvil {
namespace {


std::vector<double> unit_slice(const HostUnits& units, const ParamEntry& e) {
  const float* p = units[static_cast<size_t>(e.unit)].data() + e.offset;
  return std::vector<double>(p, p + e.numel());
}

class GoldenModel : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenModel, Step0LogitsLossAndGradients) {
  const std::string dir = testing::fixture_dir(GetParam());
  ModelConfig cfg = load_config(dir);
  SafetensorsFile gold(dir + "/golden_step0.safetensors");
  const SafeTensorInfo& ids_t = gold.get("input_ids");
  TokenBatch batch;
  batch.ids = read_as_i64(ids_t);
  TrainConfig c;
  c.model.device = "cpu";
  c.data.micro_batch = ids_t.shape[0];
  c.data.seq_len = ids_t.shape[1];
  ParamTable table(cfg, 1);
  HostUnits w = make_host_units(table);
  load_hf_weights(dir, table, w);
  const std::unique_ptr<Trainer> t = make_trainer(cfg, host_units_reader(w), c, c.data.seq_len, nullptr, 0);
  Trainer& trainer = *t;
  std::vector<float> logits;
  const double loss = trainer.loss_and_grads(batch, &logits);

  const double want_loss = read_as_f64(gold.get("loss"))[0];
  EXPECT_NEAR(loss, want_loss, 1e-6 * std::abs(want_loss)) << "loss";
  std::vector<double> got_logits(logits.begin(), logits.end());
  const std::vector<double> want_logits = read_as_f64(gold.get("logits"));
  EXPECT_TRUE(testing::close_rel_l2(got_logits, want_logits, 1e-5)) << "logits";
  double worst_grad = 0;

  HostUnits grads = trainer.grads();
  int checked = 0;
  for (const ParamEntry& e : trainer.table().entries()) {
    const SafeTensorInfo* g = gold.find("grad." + e.name);
    ASSERT_NE(g, nullptr) << "golden gradient of " << e.name;
    const std::vector<double> got = unit_slice(grads, e), want = read_as_f64(*g);
    EXPECT_TRUE(testing::close_rel_l2(got, want, 1e-4)) << "grad." << e.name;
    worst_grad = std::max(worst_grad, testing::rel_l2(got.data(), want.data(), got.size()));
    ++checked;
  }
  std::printf("%s: loss rel error %.2e, logits rel L2 %.2e, worst gradient rel L2 %.2e\n", GetParam().c_str(),
              std::abs(loss - want_loss) / want_loss,
              testing::rel_l2(got_logits.data(), want_logits.data(), got_logits.size()), worst_grad);
  EXPECT_EQ(checked, static_cast<int>(trainer.table().entries().size()));
}

TEST_P(GoldenModel, EightAdamWSteps) {
  const std::string dir = testing::fixture_dir(GetParam());
  ModelConfig cfg = load_config(dir);
  SafetensorsFile gold(dir + "/golden_adamw.safetensors");
  Json curve = json_read_file(dir + "/golden_curve.json");
  const Json& cc = curve["config"];
  TrainConfig c;
  c.model.device = "cpu";
  c.data.micro_batch = cc["batch"].get<int64_t>();
  c.data.seq_len = cc["seq"].get<int64_t>();
  c.optim.schedule.lr = cc["lr"].get<double>();
  c.optim.adamw.beta1 = cc["betas"][0].get<double>();
  c.optim.adamw.beta2 = cc["betas"][1].get<double>();
  c.optim.adamw.eps = cc["eps"].get<double>();
  c.optim.adamw.weight_decay = cc["weight_decay"].get<double>();
  c.optim.adamw.max_grad_norm = cc["max_norm"].get<double>();
  const int64_t steps = cc["steps"].get<int64_t>();
  double worst_loss = 0, worst_norm = 0, worst_param = 0;
  c.steps = steps;
  ParamTable table(cfg, 1);
  HostUnits w = make_host_units(table);
  load_hf_weights(dir, table, w);
  const std::unique_ptr<Trainer> t = make_trainer(cfg, host_units_reader(w), c, c.data.seq_len, nullptr, 0);
  Trainer& trainer = *t;
  for (int64_t i = 0; i < steps; ++i) {
    TokenBatch b;
    b.ids = read_as_i64(gold.get("batch" + std::to_string(i)));
    StepStats st = trainer.step({b});
    const double want_loss = curve["fp64"][i]["loss"].get<double>();
    const double want_norm = curve["fp64"][i]["grad_norm"].get<double>();
    EXPECT_NEAR(st.loss, want_loss, 1e-5 * std::abs(want_loss)) << "loss of step " << i + 1;
    EXPECT_NEAR(st.grad_norm, want_norm, 1e-5 * std::abs(want_norm)) << "grad norm of step " << i + 1;
    worst_loss = std::max(worst_loss, std::abs(st.loss - want_loss) / want_loss);
    worst_norm = std::max(worst_norm, std::abs(st.grad_norm - want_norm) / want_norm);
  }
  HostUnits final_w = trainer.masters();
  for (const ParamEntry& e : trainer.table().entries()) {
    const std::vector<double> got = unit_slice(final_w, e), want = read_as_f64(gold.get("param." + e.name));
    EXPECT_TRUE(testing::close_rel_l2(got, want, 1e-4)) << "param." << e.name;
    worst_param = std::max(worst_param, testing::rel_l2(got.data(), want.data(), got.size()));
  }
  std::printf("%s: 8 AdamW steps: worst loss rel error %.2e, grad norm %.2e, final parameter rel L2 %.2e\n",
              GetParam().c_str(), worst_loss, worst_norm, worst_param);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenModel, ::testing::ValuesIn(testing::golden_models()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return testing::test_suffix(p.param); });

}  // namespace
}  // namespace anvil
