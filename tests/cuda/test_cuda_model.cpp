// The whole model on the GPU against the float64 fixtures: loss within 2e-3 relative and
// every gradient at cosine similarity 0.999 or better (bf16 compute, fp32 master weights);
// the 8-step AdamW run's losses, gradient norms and final parameters within tolerances
// derived from PyTorch's own bf16 deviation, which a no-op update fails; ddp and fsdp
// (compute copies per unit) give the same bits on one GPU. Packed documents (positions): the
// GPU's loss and gradients against the CPU reference's (which the packed oracle checks
// against transformers), unlike wrapped packing's, and the same bits under every recompute
// policy.
#include <gtest/gtest.h>

#include <cmath>

#include "core/json.h"
#include "io/safetensors.h"
#include "model/weights.h"
#include "ops/cuda/attention_cudnn.h"
#include "ops/ops.h"
#include "train/open_run.h"
#include "../testing.h"
#include "require_gpu.h"

namespace anvil {
namespace {

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

// With the blocks' gradients in fp32 and in bf16 (model/params.h, GradDType): the bf16 ones
// are the fp32 ones rounded once, so they agree with them to one bf16 rounding.
TEST_P(GpuGolden, LossAndGradients) {
  REQUIRE_GPU();
  const std::string dir = testing::fixture_dir(GetParam());
  ModelConfig cfg = load_config(dir);
  SafetensorsFile gold(dir + "/golden_step0.safetensors");
  const SafeTensorInfo& ids = gold.get("input_ids");
  ParamTable table(cfg, 1);
  HostUnits w = make_host_units(table);
  load_hf_weights(dir, table, w);
  std::vector<HostUnits> grads;
  for (GradDType gd : {GradDType::kF32, GradDType::kBF16}) {
    TrainConfig c;
    c.model.device = "cuda";
    c.parallel.mode = ParallelMode::kDdp;
    c.data.micro_batch = ids.shape[0];
    c.data.seq_len = ids.shape[1];
    c.parallel.grad_dtype = gd;
    const std::unique_ptr<Trainer> t = make_trainer(cfg, host_units_reader(w), c, c.data.seq_len, nullptr, 0);
    Trainer& trainer = *t;
    TokenBatch b;
    b.ids = read_as_i64(ids);
    std::vector<float> logits;
    const double loss = trainer.loss_and_grads(b, &logits);
    const double want = read_as_f64(gold.get("loss"))[0];
    EXPECT_NEAR(loss, want, 2e-3 * want);
    std::vector<double> lg(logits.begin(), logits.end());
    EXPECT_TRUE(testing::close_rel_l2(lg, read_as_f64(gold.get("logits")), 2e-2)) << "logits";
    grads.push_back(trainer.grads());
    double worst = 1;
    for (const ParamEntry& e : table.entries()) {
      const double c =
          cosine(grads.back()[static_cast<size_t>(e.unit)].data() + e.offset, read_as_f64(gold.get("grad." + e.name)));
      worst = std::min(worst, c);
      EXPECT_GE(c, 0.999) << "grad." << e.name << " (" << grad_dtype_name(gd) << ")";
    }
    std::printf("%s, %s gradients: loss %.7f (fp64 %.7f, rel %.2e), worst gradient cosine %.6f\n",
                GetParam().c_str(), grad_dtype_name(gd), loss, want, std::abs(loss - want) / want, worst);
  }
  for (size_t u = 0; u < grads[0].size(); ++u) {
    const std::vector<double> f32(grads[0][u].begin(), grads[0][u].end()), b16(grads[1][u].begin(), grads[1][u].end());
    const double rel = testing::rel_l2(b16.data(), f32.data(), f32.size());
    if (table.grads_written_once(static_cast<int>(u)))
      EXPECT_LE(rel, 4e-3) << "unit " << u << ": bf16 gradients against fp32 (one rounding)";
    else
      EXPECT_EQ(b16, f32) << "unit " << u << " keeps fp32 gradients";
    std::printf("  unit %zu (%s): bf16 against fp32 gradients rel L2 %.2e\n", u, table.units()[u].name.c_str(), rel);
  }
}

// The fixture's first batch as documents packed in each sequence: lengths 1, 7, 30, 2, then
// the rest of the sequence.
TokenBatch packed_batch(const SafeTensorInfo& ids) {
  TokenBatch b;
  b.ids = read_as_i64(ids);
  const int64_t T = ids.shape[1];
  const int64_t lengths[] = {1, 7, 30, 2, T};
  for (int64_t s = 0; s < ids.shape[0]; ++s)
    for (int64_t t = 0, doc = 0, at = 0; t < T; ++t, ++at) {
      if (at == lengths[doc]) at = 0, ++doc;
      b.positions.push_back(at);
    }
  return b;
}

struct LossAndGrads {
  double loss = 0;
  HostUnits grads;
};

LossAndGrads packed_loss_and_grads(const std::string& dir, const std::string& device, Recompute recompute,
                                   const TokenBatch& b, int64_t micro_batch, int64_t seq_len) {
  ModelConfig cfg = load_config(dir);
  TrainConfig c;
  c.model.device = device;
  c.parallel.mode = ParallelMode::kDdp;
  c.parallel.recompute = recompute;
  c.parallel.grad_dtype = GradDType::kF32;
  c.data.micro_batch = micro_batch;
  c.data.seq_len = seq_len;
  ParamTable table(cfg, 1);
  HostUnits w = make_host_units(table);
  load_hf_weights(dir, table, w);
  const std::unique_ptr<Trainer> t = make_trainer(cfg, host_units_reader(w), c, c.data.seq_len, nullptr, 0);
  LossAndGrads r;
  r.loss = t->loss_and_grads(b, nullptr);
  r.grads = t->grads();
  return r;
}

TEST_P(GpuGolden, PackedDocumentsAgainstTheCpu) {
  REQUIRE_GPU();
  const std::string dir = testing::fixture_dir(GetParam());
  SafetensorsFile gold(dir + "/golden_step0.safetensors");
  const SafeTensorInfo& ids = gold.get("input_ids");
  const int64_t B = ids.shape[0], T = ids.shape[1];
  const TokenBatch packed = packed_batch(ids);
  TokenBatch wrapped;
  wrapped.ids = packed.ids;
  const LossAndGrads cpu = packed_loss_and_grads(dir, "cpu", Recompute::kNone, packed, B, T);
  const LossAndGrads cpu_wrapped = packed_loss_and_grads(dir, "cpu", Recompute::kNone, wrapped, B, T);
  const double apart = std::abs(cpu_wrapped.loss - cpu.loss) / cpu.loss;
  // The bar below must tell the masks apart: the wrapped batch's gradients fail it.
  double wrapped_worst = 1;
  for (size_t u = 0; u < cpu.grads.size(); ++u) {
    const std::vector<double> want(cpu.grads[u].begin(), cpu.grads[u].end());
    wrapped_worst = std::min(wrapped_worst, cosine(cpu_wrapped.grads[u].data(), want));
  }
  EXPECT_LT(wrapped_worst, 0.999) << "the wrapped batch's gradients pass the bar: a missing mask would go unseen";
  LossAndGrads none;
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    const cuda::CudnnAttentionCounts before = cuda::cudnn_attention_counts();
    const LossAndGrads gpu = packed_loss_and_grads(dir, "cuda", r, packed, B, T);
    const cuda::CudnnAttentionCounts after = cuda::cudnn_attention_counts();
    std::printf("[path] %s packed, recompute %s: cuDNN ran %lld attention forwards, %lld backwards\n",
                GetParam().c_str(), recompute_name(r), static_cast<long long>(after.forward - before.forward),
                static_cast<long long>(after.backward - before.backward));
    EXPECT_NEAR(gpu.loss, cpu.loss, 2e-3 * cpu.loss) << recompute_name(r);
    double worst = 1;
    for (size_t u = 0; u < gpu.grads.size(); ++u) {
      const std::vector<double> want(cpu.grads[u].begin(), cpu.grads[u].end());
      worst = std::min(worst, cosine(gpu.grads[u].data(), want));
    }
    EXPECT_GE(worst, 0.999) << recompute_name(r) << ": worst unit gradient cosine against the CPU";
    if (r == Recompute::kNone) none = gpu;
    else EXPECT_EQ(gpu.grads, none.grads) << recompute_name(r) << " against recompute none, packed documents";
    std::printf("%s packed, recompute %s: loss %.7f (CPU %.7f; wrapped %.7f, %.1e apart), worst gradient cosine "
                "%.6f (wrapped against packed on the CPU: %.6f)\n",
                GetParam().c_str(), recompute_name(r), gpu.loss, cpu.loss, cpu_wrapped.loss, apart, worst,
                wrapped_worst);
  }
}

// Evaluation's forward: the loss of loss_and_grads, bit for bit, and no gradient touched
// (ddp and fsdp's per-unit compute copies).
TEST_P(GpuGolden, ForwardLossLeavesGradientsAlone) {
  REQUIRE_GPU();
  const std::string dir = testing::fixture_dir(GetParam());
  ModelConfig cfg = load_config(dir);
  SafetensorsFile gold(dir + "/golden_step0.safetensors");
  const SafeTensorInfo& ids = gold.get("input_ids");
  for (ParallelMode mode : {ParallelMode::kDdp, ParallelMode::kFsdp}) {
    TrainConfig c;
    c.model.device = "cuda";
    c.parallel.mode = mode;
    c.data.micro_batch = ids.shape[0];
    c.data.seq_len = ids.shape[1];
    ParamTable table(cfg, 1);
    HostUnits w = make_host_units(table);
    load_hf_weights(dir, table, w);
    const std::unique_ptr<Trainer> t = make_trainer(cfg, host_units_reader(w), c, c.data.seq_len, nullptr, 0);
    Trainer& trainer = *t;
    TokenBatch b;
    b.ids = read_as_i64(ids);
    const double loss = trainer.loss_and_grads(b, nullptr);
    const HostUnits before = trainer.grads();
    const Trainer::LossSum e = trainer.forward_loss(b);
    EXPECT_EQ(e.sum / static_cast<double>(e.tokens), loss) << GetParam();
    EXPECT_EQ(e.tokens, static_cast<int64_t>(b.ids.size()) - c.data.micro_batch) << GetParam();
    EXPECT_EQ(trainer.grads(), before) << GetParam() << ": forward_loss touched the gradients";
  }
}

// The 8-step AdamW run against the fp64 golden run, at tolerances derived from PyTorch's own
// bf16-vs-fp64 deviation on the same run (fp32 master weights, bf16 autocast):
// - loss and pre-clip gradient norm of every step: kCurveMargin times the worst deviation of
//   the fixture's bf16_autocast_fp32_master curve (golden_curve.json, measured on an H200 by
//   make_golden_model.py): tiny-qwen3 7.3e-5 (loss) and 4.2e-3 (norm), tiny-qwen3-untied
//   4.3e-5 and 4.5e-3;
// - final parameters, rel L2 over all of them: kParamTolerance.
// A no-op update (lr 0) deviates by 1e-3..5e-3 (loss), 0.15..0.19 (norm) and 0.06..0.07
// (parameters) on these fixtures; NoOpUpdateFailsTheCheck shows that it fails.
constexpr double kCurveMargin = 10;
// PyTorch bf16 autocast, final-parameter rel L2 against fp64 over all parameters after the 8
// steps (python3 bench/bf16_adamw_deviation.py FIXTURE --device cuda, on an H200): tiny-qwen3
// 2.47e-3, tiny-qwen3-untied 2.76e-3, tiny-qwen2 2.08e-3, tiny-llama3 2.26e-3 (2.1e-3..2.8e-3
// with CPU autocast). anvil on the same H200: 2.26e-3..3.00e-3. Tolerance: about 5 times that.
constexpr double kParamTolerance = 1.5e-2;

struct AdamwDeviation {
  double loss = 0, grad_norm = 0, params = 0;      // worst relative errors against fp64
  double loss_tol = 0, grad_norm_tol = 0;          // derived from the fixture's bf16 curve
  std::vector<double> losses;
  bool within() const { return loss <= loss_tol && grad_norm <= grad_norm_tol && params <= kParamTolerance; }
};

AdamwDeviation run_adamw_on_gpu(const std::string& dir, ParallelMode mode, double lr_scale,
                                GradDType grad_dtype = GradDType::kAuto) {
  ModelConfig cfg = load_config(dir);
  SafetensorsFile gold(dir + "/golden_adamw.safetensors");
  Json curve = json_read_file(dir + "/golden_curve.json");
  const Json& cc = curve["config"];
  TrainConfig c;
  c.model.device = "cuda";
  c.parallel.mode = mode;
  c.parallel.grad_dtype = grad_dtype;
  c.data.micro_batch = cc["batch"].get<int64_t>();
  c.data.seq_len = cc["seq"].get<int64_t>();
  c.optim.schedule.lr = cc["lr"].get<double>() * lr_scale;
  c.optim.adamw.beta1 = cc["betas"][0].get<double>();
  c.optim.adamw.beta2 = cc["betas"][1].get<double>();
  c.optim.adamw.eps = cc["eps"].get<double>();
  c.optim.adamw.weight_decay = cc["weight_decay"].get<double>();
  c.optim.adamw.max_grad_norm = cc["max_norm"].get<double>();
  const int steps = cc["steps"].get<int>();
  c.steps = steps;
  AdamwDeviation d;
  const Json& bf16 = curve["bf16_autocast_fp32_master"];
  EXPECT_EQ(static_cast<int>(bf16.size()), steps)
      << dir << ": golden_curve.json has no bf16 curve to derive tolerances from";
  for (int i = 0; i < steps && i < static_cast<int>(bf16.size()); ++i) {
    const Json &f = curve["fp64"][i], &b = bf16[i];
    d.loss_tol = std::max(d.loss_tol, kCurveMargin * std::abs(b["loss"].get<double>() / f["loss"].get<double>() - 1));
    const double grad_norm_ratio = b["grad_norm"].get<double>() / f["grad_norm"].get<double>();
    d.grad_norm_tol = std::max(d.grad_norm_tol, kCurveMargin * std::abs(grad_norm_ratio - 1));
  }
  ParamTable table(cfg, 1);
  HostUnits w = make_host_units(table);
  load_hf_weights(dir, table, w);
  const std::unique_ptr<Trainer> t = make_trainer(cfg, host_units_reader(w), c, c.data.seq_len, nullptr, 0);
  Trainer& trainer = *t;
  for (int i = 0; i < steps; ++i) {
    TokenBatch b;
    b.ids = read_as_i64(gold.get("batch" + std::to_string(i)));
    const StepStats st = trainer.step({b});
    d.losses.push_back(st.loss);
    const double want_loss = curve["fp64"][i]["loss"].get<double>();
    const double want_norm = curve["fp64"][i]["grad_norm"].get<double>();
    d.loss = std::max(d.loss, std::abs(st.loss - want_loss) / want_loss);
    d.grad_norm = std::max(d.grad_norm, std::abs(st.grad_norm - want_norm) / want_norm);
  }
  const HostUnits final_w = trainer.masters();
  double num = 0, den = 0;
  for (const ParamEntry& e : trainer.table().entries()) {
    const float* p = final_w[static_cast<size_t>(e.unit)].data() + e.offset;
    const std::vector<double> want = read_as_f64(gold.get("param." + e.name));
    for (size_t k = 0; k < want.size(); ++k) {
      num += (p[k] - want[k]) * (p[k] - want[k]);
      den += want[k] * want[k];
    }
  }
  d.params = std::sqrt(num / den);
  return d;
}

TEST_P(GpuGolden, EightAdamWSteps) {
  REQUIRE_GPU();
  const std::string dir = testing::fixture_dir(GetParam());
  for (GradDType gd : {GradDType::kF32, GradDType::kBF16}) {
    std::vector<double> losses[2];
    for (int mode = 0; mode < 2; ++mode) {
      const AdamwDeviation d = run_adamw_on_gpu(dir, mode == 0 ? ParallelMode::kDdp : ParallelMode::kFsdp, 1.0, gd);
      losses[mode] = d.losses;
      EXPECT_LE(d.loss, d.loss_tol) << "worst step loss rel error";
      EXPECT_LE(d.grad_norm, d.grad_norm_tol) << "worst step gradient norm rel error";
      EXPECT_LE(d.params, kParamTolerance) << "final parameters rel L2";
      std::printf("%s %s, %s gradients: vs fp64: loss %.2e (tol %.2e), grad norm %.2e (tol %.2e), final params "
                  "%.2e (tol %.2e)\n",
                  GetParam().c_str(), mode ? "fsdp" : "ddp", grad_dtype_name(gd), d.loss, d.loss_tol, d.grad_norm,
                  d.grad_norm_tol, d.params, kParamTolerance);
    }
    EXPECT_EQ(losses[0], losses[1]) << "ddp and fsdp on one GPU, " << grad_dtype_name(gd) << " gradients";
  }
}

// The check above rejects an optimizer that never updates (lr 0).
TEST_P(GpuGolden, NoOpUpdateFailsTheCheck) {
  REQUIRE_GPU();
  const AdamwDeviation d = run_adamw_on_gpu(testing::fixture_dir(GetParam()), ParallelMode::kDdp, 0.0);
  EXPECT_FALSE(d.within());
  EXPECT_GT(d.params, kParamTolerance) << "final parameters of a no-op update";
  EXPECT_GT(d.grad_norm, d.grad_norm_tol) << "gradient norms of a no-op update";
  std::printf("%s lr 0: loss %.2e (tol %.2e), grad norm %.2e (tol %.2e), final params %.2e (tol %.2e)\n",
              GetParam().c_str(), d.loss, d.loss_tol, d.grad_norm, d.grad_norm_tol, d.params, kParamTolerance);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GpuGolden, ::testing::ValuesIn(testing::golden_models()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return testing::test_suffix(p.param); });

}  // namespace
}  // namespace anvil
