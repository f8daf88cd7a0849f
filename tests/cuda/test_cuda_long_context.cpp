// The tiled MLP on the GPU (model/activations.h, mlp_tile): the whole model on each golden
// fixture with the MLP in tiles of 16 tokens (the last one partial) against the same model
// untiled, with the blocks' gradients in fp32 (the tiles' weight gradients added by the GEMMs
// into the fp32 buffers) and in bf16 (summed in the F32 mlp_dw, rounded once): the loss
// within 1e-3 relative and every gradient within one bf16 rounding (4e-3 relative L2), since
// each tile's gate_up, recomputed in the backward by a GEMM of another row count, may round
// otherwise. The attention past cuDNN's dP bound is in test_cuda_attention.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "io/safetensors.h"
#include "../folder_trainer.h"
#include "../testing.h"
#include "require_gpu.h"

namespace anvil {
namespace {

struct MlpRun {
  double loss = 0;
  HostUnits grads;
  int64_t mlp_tile = 0;
};

MlpRun run_fixture(const std::string& dir, int64_t mlp_tile, GradDType grad_dtype) {
  ModelConfig cfg = load_config(dir);
  SafetensorsFile gold(dir + "/golden_step0.safetensors");
  const SafeTensorInfo& ids = gold.get("input_ids");
  TrainConfig c;
  c.model.device = "cuda";
  c.parallel.mode = ParallelMode::kDdp;
  c.parallel.grad_dtype = grad_dtype;
  c.parallel.mlp_tile = mlp_tile;
  c.data.micro_batch = ids.shape[0];
  c.data.seq_len = ids.shape[1];
  const std::unique_ptr<Trainer> t = testing::folder_trainer(dir, cfg, c);
  TokenBatch b;
  b.ids = read_as_i64(ids);
  MlpRun r;
  r.loss = t->loss_and_grads(b, nullptr);
  r.grads = t->grads();
  r.mlp_tile = t->settings().config.parallel.mlp_tile;
  return r;
}

class GpuTiledMlp : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuTiledMlp, MatchesUntiled) {
  REQUIRE_GPU();
  const std::string dir = testing::fixture_dir(GetParam());
  for (GradDType gd : {GradDType::kF32, GradDType::kBF16}) {
    const MlpRun whole = run_fixture(dir, 0, gd), tiled = run_fixture(dir, 16, gd);
    ASSERT_GT(whole.mlp_tile, 16) << "auto leaves a small fixture untiled";
    ASSERT_EQ(tiled.mlp_tile, 16);
    EXPECT_NEAR(tiled.loss, whole.loss, 1e-3 * std::abs(whole.loss)) << grad_dtype_name(gd);
    double worst = 0;
    for (size_t u = 0; u < whole.grads.size(); ++u) {
      const std::vector<double> a(tiled.grads[u].begin(), tiled.grads[u].end());
      const std::vector<double> b(whole.grads[u].begin(), whole.grads[u].end());
      const double rel = testing::rel_l2(a.data(), b.data(), b.size());
      worst = std::max(worst, rel);
      EXPECT_LE(rel, 4e-3) << GetParam() << " unit " << u << " (" << grad_dtype_name(gd) << " gradients)";
    }
    std::printf("%s, %s gradients, MLP tiles of 16 tokens: loss %.7f (untiled %.7f), worst unit rel L2 %.2e\n",
                GetParam().c_str(), grad_dtype_name(gd), tiled.loss, whole.loss, worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GpuTiledMlp, ::testing::ValuesIn(testing::golden_models()),
                         [](const auto& info) { return testing::test_suffix(info.param); });

}  // namespace
}  // namespace anvil
