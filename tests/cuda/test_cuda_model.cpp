// The whole model on the GPU against the float64 fixtures: loss within 2e-3 relative and
// every gradient at cosine similarity 0.999 or better (bf16 compute, fp32 master weights);
// the 8-step AdamW run's losses within 2e-3 of the fp64 curve; ddp and fsdp (compute
// copies per unit) give the same bits on one GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "core/json.h"
#include "io/safetensors.h"
#include "model/weights.h"
#include "ops/ops.h"
#include "run/trainer.h"
#include "../testing.h"

namespace anvil {
namespace {

#define REQUIRE_CUDA()                                   \
  do {                                                   \
    if (!cuda_available()) GTEST_SKIP() << "no GPU";     \
  } while (0)


double cosine(const float* a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    ab += a[i] * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += b[i] * b[i];
  }
  return ab / std::sqrt(aa * bb + 1e-300);
}

class GpuGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuGolden, LossAndGradients) {
  REQUIRE_CUDA();
  const std::string dir = testing::fixture_dir(GetParam());
  ModelConfig cfg = load_config(dir);
  SafetensorsFile gold(dir + "/golden_step0.safetensors");
  const SafeTensorInfo& ids = gold.get("input_ids");
  TrainerSettings s;
  s.device = "cuda";
  s.micro_batch = ids.shape[0];
  s.seq_len = ids.shape[1];
  ParamTable table(cfg, 1);
  HostUnits w = make_host_units(table);
  load_hf_weights(dir, table, w);
  Trainer trainer(cfg, w, s);
  TokenBatch b;
  b.ids = read_as_i64(ids);
  std::vector<float> logits;
  const double loss = trainer.loss_and_grads(b, &logits);
  const double want = read_as_f64(gold.get("loss"))[0];
  EXPECT_NEAR(loss, want, 2e-3 * want);
  std::vector<double> lg(logits.begin(), logits.end());
  EXPECT_TRUE(testing::close_rel_l2(lg, read_as_f64(gold.get("logits")), 2e-2)) << "logits";
  const HostUnits g = trainer.grads();
  double worst = 1;
  for (const ParamEntry& e : table.entries()) {
    const double c = cosine(g[static_cast<size_t>(e.unit)].data() + e.offset, read_as_f64(gold.get("grad." + e.name)));
    worst = std::min(worst, c);
    EXPECT_GE(c, 0.999) << "grad." << e.name;
  }
  std::printf("%s: loss %.7f (fp64 %.7f, rel %.2e), worst gradient cosine %.6f\n", GetParam().c_str(), loss, want,
              std::abs(loss - want) / want, worst);
}

// Evaluation's forward: the loss of loss_and_grads, bit for bit, and no gradient touched
// (ddp and fsdp's per-unit compute copies).
TEST_P(GpuGolden, ForwardLossLeavesGradientsAlone) {
  REQUIRE_CUDA();
  const std::string dir = testing::fixture_dir(GetParam());
  ModelConfig cfg = load_config(dir);
  SafetensorsFile gold(dir + "/golden_step0.safetensors");
  const SafeTensorInfo& ids = gold.get("input_ids");
  for (ParallelMode mode : {ParallelMode::kDdp, ParallelMode::kFsdp}) {
    TrainerSettings s;
    s.device = "cuda";
    s.mode = mode;
    s.micro_batch = ids.shape[0];
    s.seq_len = ids.shape[1];
    ParamTable table(cfg, 1);
    HostUnits w = make_host_units(table);
    load_hf_weights(dir, table, w);
    Trainer trainer(cfg, w, s);
    TokenBatch b;
    b.ids = read_as_i64(ids);
    const double loss = trainer.loss_and_grads(b, nullptr);
    const HostUnits before = trainer.grads();
    const Trainer::LossSum e = trainer.forward_loss(b);
    EXPECT_EQ(e.sum / static_cast<double>(e.tokens), loss) << GetParam();
    EXPECT_EQ(e.tokens, static_cast<int64_t>(b.ids.size()) - s.micro_batch) << GetParam();
    EXPECT_EQ(trainer.grads(), before) << GetParam() << ": forward_loss touched the gradients";
  }
}

TEST_P(GpuGolden, EightAdamWSteps) {
  REQUIRE_CUDA();
  const std::string dir = testing::fixture_dir(GetParam());
  ModelConfig cfg = load_config(dir);
  SafetensorsFile gold(dir + "/golden_adamw.safetensors");
  Json curve = json_read_file(dir + "/golden_curve.json");
  TrainerSettings s;
  s.device = "cuda";
  s.micro_batch = curve["config"]["batch"].get<int64_t>();
  s.seq_len = curve["config"]["seq"].get<int64_t>();
  s.optim.lr = curve["config"]["lr"].get<double>();
  s.total_steps = 8;
  ParamTable table(cfg, 1);
  HostUnits w = make_host_units(table);
  load_hf_weights(dir, table, w);
  std::vector<double> losses[2];
  for (int mode = 0; mode < 2; ++mode) {
    s.mode = mode == 0 ? ParallelMode::kDdp : ParallelMode::kFsdp;
    Trainer trainer(cfg, w, s);
    double worst = 0;
    for (int i = 0; i < 8; ++i) {
      TokenBatch b;
      b.ids = read_as_i64(gold.get("batch" + std::to_string(i)));
      const StepStats st = trainer.step({b});
      losses[mode].push_back(st.loss);
      const double want = curve["fp64"][i]["loss"].get<double>();
      worst = std::max(worst, std::abs(st.loss - want) / want);
      EXPECT_NEAR(st.loss, want, 2e-3 * want) << "step " << i + 1;
    }
    std::printf("%s %s: worst step loss rel error vs fp64 %.2e\n", GetParam().c_str(), mode ? "fsdp" : "ddp", worst);
  }
  EXPECT_EQ(losses[0], losses[1]) << "ddp and fsdp on one GPU";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GpuGolden, ::testing::ValuesIn(testing::golden_models()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return testing::test_suffix(p.param); });

}  // namespace
}  // namespace anvil
