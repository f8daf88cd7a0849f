// The advice of anvil plan and the mode anvil train --mode auto takes are one choice
// (plan/memory_plan.h's advise): of the modes that fit, the faster predicted, stated as the
// flags to pass; each fitting mode says its recomputation; without a GPU here the plan says
// which it assumed; when nothing fits, the advice names what would.
#include <gtest/gtest.h>

#include "core/json.h"
#include "model/config.h"
#include "ops/ops.h"
#include "plan/step_target.h"
#include "train/resolve.h"
#include "testing.h"

namespace anvil {
namespace {

using testing::run_anvil;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Qwen3-8B on 8 H200s: every mode fits; zero2 is predicted fastest (its optimizer runs on an
// eighth of the parameters, as fsdp's, and it gathers the weights once a step, not twice), so
// the advice is zero2, as flags.
TEST(PlanAdvice, TheFasterPredictedModeAsFlags) {
  auto r = run_anvil({"plan", "--preset", "qwen3-8b", "--nproc", "8", "--gpu", "H200"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "\nadvice: --mode zero2 --recompute none (")) << r.out;
  EXPECT_TRUE(contains(r.out, "yes (none)       yes (none)       yes (none)\n")) << "fits, and with which --recompute\n"
                                                                             << r.out;
  auto j = run_anvil({"plan", "--preset", "qwen3-8b", "--nproc", "8", "--gpu", "H200", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.out;
  const Json plan = json_parse(j.out, "plan");
  for (const char* other : {"ddp", "fsdp"})
    EXPECT_GT(plan["predicted"]["zero2"]["tokens_per_s"].get<double>(),
              plan["predicted"][other]["tokens_per_s"].get<double>()) << other;
  EXPECT_LT(plan["zero2"]["total"].get<int64_t>(), plan["ddp"]["total"].get<int64_t>());
  EXPECT_GT(plan["zero2"]["total"].get<int64_t>(), plan["fsdp"]["total"].get<int64_t>());
  EXPECT_EQ(plan["advice"], "zero2");
  EXPECT_EQ(plan["flags"], "--mode zero2 --recompute none");
}

// anvil train --mode auto on the same run takes the same mode, for the same reason.
TEST(PlanAdvice, TrainModeAutoTakesThePlansAdvice) {
  const ModelConfig m = preset_config("qwen3-8b");
  TrainConfig c;
  c.data.seq_len = 2048;
  RunFacts f;
  f.model = &m;
  f.world = 8;
  f.data_seq_len = 2048;
  f.compute_dtype = DType::kBF16;
  f.capacity = kH200Bytes;
  const ResolvedConfig r = resolve_config(c, f);
  EXPECT_EQ(r.config.parallel.mode, ParallelMode::kZero2) << r.mode_reason;
  EXPECT_EQ(r.config.parallel.recompute, Recompute::kNone);
  EXPECT_TRUE(contains(r.mode_reason, "zero2 is predicted fastest")) << r.mode_reason;
}

// Without a prediction (a GPU the step model does not know) the rule stays: ddp where it fits.
TEST(PlanAdvice, WithoutAPredictionDdpWhereItFits) {
  const ModelConfig m = preset_config("qwen3-8b");
  DataSection d;
  d.seq_len = 2048;
  ParallelSection p;
  p.grad_dtype = GradDType::kBF16;
  const PlannedRun run{m, d, p, 8, DType::kBF16};
  const PlanAdvice a = advise(run, kH200Bytes);
  ASSERT_TRUE(a.fits);
  EXPECT_EQ(a.mode, ParallelMode::kDdp);
  EXPECT_EQ(a.flags, "--mode ddp --recompute none");
  TargetFlags h200;
  h200.gpu = "H200";
  const StepTarget t = step_target(h200, 8);
  EXPECT_EQ(advise(run, kH200Bytes, plan_speed(run, t)).flags, "--mode zero2 --recompute none");
}

TEST(PlanAdvice, SaysWhichGpuItAssumed) {
  if (cuda_available()) GTEST_SKIP() << "a GPU here: the plan is of it, nothing assumed";
  auto r = run_anvil({"plan", "--preset", "qwen3-1.7b"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "assumed: 1 x NVIDIA H200 139.80 GiB (no GPU here; --gpu NAME / --gpu-mem GiB to "
                              "change)\n")) << r.out;
  auto g = run_anvil({"plan", "--preset", "qwen3-1.7b", "--gpu", "H200"});
  EXPECT_FALSE(contains(g.out, "assumed:")) << "--gpu names it\n" << g.out;
}

// Qwen3-14B on one 80 GiB GPU: the model states (16 bytes a parameter) are the cause, not the
// 1.5 GiB of activations: the advice is fsdp over enough GPUs, not a shorter sequence.
TEST(PlanAdvice, NothingFitsNamesWhatWould) {
  auto r = run_anvil({"plan", "--preset", "qwen3-14b", "--gpu-mem", "80"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "fsdp fits on 4 GPUs: --nproc 4 --mode fsdp --recompute ")) << r.out;
  EXPECT_FALSE(contains(r.out, "--seq-len")) << r.out;
  // Long sequences on a small GPU: the activations are the cause, and a shorter sequence the cure.
  auto a = run_anvil({"plan", "--preset", "qwen3-0.6b", "--gpu-mem", "24", "--seq-len", "65536", "--recompute",
                      "none"});
  ASSERT_EQ(a.exit_code, 0) << a.out;
  EXPECT_TRUE(contains(a.out, "the activations take")) << a.out;
  EXPECT_TRUE(contains(a.out, "a shorter --seq-len")) << a.out;
}

}  // namespace
}  // namespace anvil
