// The run's config tree (train/config.h) and its one resolution (train/resolve.h): each
// auto's result and reason; the schedule's cosine floor (--lr-min) against its closed form,
// in-process and through the binary, and its validation; the flags bound to the tree read
// back from the anvil_config.toml a run writes to the same tree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "cli/args.h"
#include "cli/launch.h"
#include "cli/config_flags.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "optim/schedule.h"
#include "train/resolve.h"
#include "testing.h"

namespace anvil {
namespace {

RunFacts cpu_facts(const ModelConfig& model, int64_t data_seq_len) {
  RunFacts f;
  f.model = &model;
  f.data_seq_len = data_seq_len;
  return f;
}

bool has(const ResolvedConfig& r, const std::string& reason) {
  for (const std::string& x : r.reasons)
    if (x == reason) return true;
  return false;
}

TEST(Resolve, SeqLenFromTheData) {
  const ModelConfig m = preset_config("tiny");
  TrainConfig c;
  const ResolvedConfig r = resolve_config(c, cpu_facts(m, 37));
  EXPECT_EQ(r.config.data.seq_len, 37);
  EXPECT_TRUE(has(r, "seq_len 37: the data's blocks"));
  c.data.seq_len = 37;  // given: no reason
  for (const std::string& x : resolve_config(c, cpu_facts(m, 37)).reasons)
    EXPECT_EQ(x.find("seq_len"), std::string::npos) << x;
}

TEST(Resolve, GradDtype) {
  const ModelConfig m = preset_config("tiny");
  TrainConfig c;
  c.parallel.mode = ParallelMode::kDdp;
  RunFacts f = cpu_facts(m, 16);
  ResolvedConfig r = resolve_config(c, f);
  EXPECT_EQ(r.config.parallel.grad_dtype, GradDType::kF32);
  EXPECT_TRUE(has(r, "grad dtype fp32: an fp32 device (the CPU)"));
  f.compute_dtype = DType::kBF16;
  r = resolve_config(c, f);
  EXPECT_EQ(r.config.parallel.grad_dtype, GradDType::kBF16);
  EXPECT_TRUE(has(r, "grad dtype bf16: one micro-batch per step, a bf16 device (a GPU)"));
  f.world = 2;  // every rank keeps the fast path (parallel/grad_reducer.h)
  r = resolve_config(c, f);
  EXPECT_EQ(r.config.parallel.grad_dtype, GradDType::kBF16);
  f.world = 1;
  c.data.grad_accum = 2;
  r = resolve_config(c, f);
  EXPECT_EQ(r.config.parallel.grad_dtype, GradDType::kF32);
  EXPECT_TRUE(has(r, "grad dtype fp32: --grad-accum 2 sums micro-batches in fp32"));
  c.parallel.grad_dtype = GradDType::kBF16;  // asked where it cannot hold
  try {
    resolve_config(c, f);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("--grad-dtype bf16 needs --grad-accum 1"), std::string::npos);
  }
}

TEST(Resolve, ModeAndRecomputeOnTheHost) {
  const ModelConfig m = preset_config("tiny");
  TrainConfig c;
  EXPECT_EQ(c.parallel.recompute, Recompute::kAuto) << "the default";
  const ResolvedConfig r = resolve_config(c, cpu_facts(m, 16));
  EXPECT_EQ(r.config.parallel.mode, ParallelMode::kDdp);
  EXPECT_EQ(r.mode_reason, "auto: host memory is not planned, so ddp");
  EXPECT_TRUE(has(r, "mode ddp: host memory is not planned, so ddp"));
  EXPECT_EQ(r.config.parallel.recompute, Recompute::kNone);
  EXPECT_TRUE(has(r, "recompute none: host memory is not planned"));
}

// On a GPU of a chosen size: the plans of qwen3-0.6b on 2 ranks decide.
TEST(Resolve, ModeAndRecomputeFromThePlan) {
  const ModelConfig m = preset_config("qwen3-0.6b");
  TrainConfig c;
  c.data.seq_len = 2048;
  c.parallel.grad_dtype = GradDType::kF32;
  c.parallel.recompute = Recompute::kNone;  // the mode decides alone
  RunFacts f = cpu_facts(m, 2048);
  f.world = 2;
  f.compute_dtype = DType::kBF16;
  ParallelSection ddp = c.parallel, zero2 = c.parallel, fsdp = c.parallel;  // as resolved
  ddp.mode = ParallelMode::kDdp;
  zero2.mode = ParallelMode::kZero2;
  fsdp.mode = ParallelMode::kFsdp;
  auto planned = [&](const ParallelSection& p) { return plan_memory({m, c.data, p, 2, DType::kBF16}).total(); };
  const int64_t ddp_bytes = planned(ddp), zero2_bytes = planned(zero2), fsdp_bytes = planned(fsdp);
  ASSERT_LT(std::max(zero2_bytes, fsdp_bytes), ddp_bytes);
  f.capacity = ddp_bytes + kPlanReserve;  // all fit: the fastest predicted (on an H200, the GPU assumed here)
  ResolvedConfig r = resolve_config(c, f);
  EXPECT_EQ(r.config.parallel.mode, ParallelMode::kZero2);
  EXPECT_EQ(r.reasons.back().rfind("mode zero2: ddp, zero2 and fsdp fit; zero2 is predicted fastest: ", 0), 0u)
      << r.reasons.back();
  f.capacity = ddp_bytes + kPlanReserve - 1;  // zero2 and fsdp fit
  r = resolve_config(c, f);
  EXPECT_EQ(r.config.parallel.mode, ParallelMode::kZero2);
  EXPECT_EQ(r.reasons.back().rfind("mode zero2: zero2 and fsdp fit; zero2 is predicted fastest: ", 0), 0u)
      << r.reasons.back();
  // Only fsdp fits: on two ranks its gathered units (the pool's, the plan replays them) take
  // less than zero2's whole weights save elsewhere, by 5 MB here.
  ASSERT_LT(fsdp_bytes, zero2_bytes);
  f.capacity = zero2_bytes + kPlanReserve - 1;
  r = resolve_config(c, f);
  EXPECT_EQ(r.config.parallel.mode, ParallelMode::kFsdp);
  EXPECT_EQ(r.reasons.back().rfind("mode fsdp: neither ddp nor zero2 fits; fsdp does", 0), 0u) << r.reasons.back();
  // ddp with recompute auto on a GPU where no recomputation does not fit, selective does.
  c.parallel.mode = ParallelMode::kDdp;
  c.parallel.recompute = Recompute::kAuto;
  ddp.recompute = Recompute::kSelective;
  ASSERT_LT(planned(ddp), ddp_bytes);
  f.capacity = planned(ddp) + kPlanReserve;
  r = resolve_config(c, f);
  EXPECT_EQ(r.config.parallel.recompute, Recompute::kSelective);
  const auto said = std::find_if(r.reasons.begin(), r.reasons.end(),
                                 [](const std::string& x) { return x.rfind("recompute ", 0) == 0; });
  ASSERT_NE(said, r.reasons.end());
  EXPECT_EQ(said->rfind("recompute selective: the fastest setting whose plan fits in ", 0), 0u) << *said;
}

// The cosine from lr to lr_min after warm-up: lr_min + (lr - lr_min) * (1 + cos(pi p)) / 2.
TEST(Schedule, CosineToTheFloor) {
  ScheduleConfig s;
  s.lr = 1e-3;
  s.warmup_steps = 2;
  s.decay = "cosine";
  s.lr_min = 1e-4;
  EXPECT_DOUBLE_EQ(lr_at(s, 1, 10), 5e-4);  // warm-up
  EXPECT_DOUBLE_EQ(lr_at(s, 2, 10), 1e-3);
  // Step 4 of 10: progress (4 - 2) / (10 - 2) = 1/4, (1 + cos(pi/4)) / 2 = 0.853553390593...
  EXPECT_NEAR(lr_at(s, 4, 10), 1e-4 + 9e-4 * 0.8535533905932737, 1e-18);
  EXPECT_DOUBLE_EQ(lr_at(s, 6, 10), 5.5e-4);  // halfway
  EXPECT_EQ(lr_at(s, 10, 10), 1e-4);          // the floor at the last step
  // lr_min 0 computes the very doubles of the decay to zero: lr * (1 + cos(pi p)) / 2.
  s.lr_min = 0;
  for (int64_t step = 3; step <= 10; ++step) {
    const double p = static_cast<double>(step - 2) / 8.0;
    EXPECT_EQ(lr_at(s, step, 10), 1e-3 * (0.0 + (1.0 - 0.0) * (0.5 * (1.0 + std::cos(M_PI * p))))) << step;
  }
  s.decay = "constant";
  EXPECT_EQ(lr_at(s, 7, 10), 1e-3);
}

std::string blocks_file(const std::string& dir) {
  std::vector<int64_t> ids(8 * 37);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7919) % 1000);
  SafetensorsWriter w;
  w.add("input_ids", DType::kI64, {8, 37}, ids.data());
  w.write(dir + "/blocks.safetensors");
  return dir + "/blocks.safetensors";
}

std::vector<std::string> tiny_run(const std::string& data, std::vector<std::string> more) {
  std::vector<std::string> a = {"train", "--device", "cpu", "--model", testing::fixture_dir("tiny-qwen3"),
                                "--data", data, "--micro-batch", "2", "--log-every", "1"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

TEST(Schedule, LrMinAndScheduleFlags) {
  const std::string dir = testing::temp_dir("lr-min");
  const std::string data = blocks_file(dir);
  auto r = testing::run_anvil(tiny_run(data, {"--schedule", "cosine", "--lr-min", "-1e-4"}));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("anvil train: --lr-min -0.0001 is out of range: it must be in [0, --lr]"), std::string::npos)
      << r.out;
  r = testing::run_anvil(tiny_run(data, {"--schedule", "cosine", "--lr", "1e-4", "--lr-min", "1e-3"}));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--lr-min 0.001 is out of range"), std::string::npos) << r.out;
  r = testing::run_anvil(tiny_run(data, {"--lr-min", "1e-6"}));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--lr-min 1e-06 is the floor of the cosine decay: it needs --schedule cosine"),
            std::string::npos) << r.out;
  r = testing::run_anvil(tiny_run(data, {"--schedule", "linear"}));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--schedule must be one of constant|cosine, got 'linear'"), std::string::npos) << r.out;
}

TEST(Schedule, LrMinReachesTheSteps) {
  const std::string dir = testing::temp_dir("lr-min-run");
  auto r = testing::run_anvil(tiny_run(blocks_file(dir), {"--steps", "6", "--lr", "1e-3", "--warmup", "2",
                                                          "--schedule", "cosine", "--lr-min", "1e-4", "--metrics",
                                                          dir + "/m.jsonl"}));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::ifstream in(dir + "/m.jsonl");
  std::string line;
  std::map<int64_t, double> lr;
  while (std::getline(in, line)) {
    const Json j = json_parse(line, "metrics");
    if (j.contains("step")) lr[j["step"].get<int64_t>()] = j["lr"].get<double>();  // not the run's header
  }
  ASSERT_EQ(lr.size(), 6u);
  // Step 3 of 6 after 2 warm-up steps: progress 1/4.
  EXPECT_NEAR(lr[3], 1e-4 + 9e-4 * 0.8535533905932737, 1e-18);
  EXPECT_DOUBLE_EQ(lr[4], 5.5e-4);
  EXPECT_EQ(lr[6], 1e-4);
}

// anvil train's flags, bound to a tree (with the launch flags, as cmd_train declares them).
TrainConfig parse_train(std::vector<std::string> args) {
  TrainConfig c;
  LaunchFlags launch;
  Args a("train", "test");
  a.config("--config");
  bind_train_flags(a, c);
  launch.declare(a);
  std::vector<char*> argv;
  for (auto& x : args) argv.push_back(x.data());
  EXPECT_TRUE(a.parse(static_cast<int>(argv.size()), argv.data()));
  return c;
}

TEST(TrainConfigFile, WrittenByARunReadsBackToTheSameTree) {
  const std::string dir = testing::temp_dir("config-tree");
  const std::vector<std::string> args =
      tiny_run(blocks_file(dir), {"--steps", "2", "--lr", "3e-4", "--schedule", "cosine", "--lr-min", "1e-5",
                                  "--grad-dtype", "fp32", "--recompute", "selective", "--no-shuffle",
                                  "--no-overlap-optimizer", "--seed", "7", "--save-every", "2", "--ckpt-dir",
                                  dir + "/ckpt", "--beta2", "0.95", "--reduce-dtype", "bf16"});
  auto r = testing::run_anvil(args);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const TrainConfig given = parse_train({args.begin() + 1, args.end()});
  EXPECT_EQ(given.optim.schedule.lr_min, 1e-5);
  EXPECT_FALSE(given.data.shuffle);
  EXPECT_FALSE(given.parallel.overlap_optimizer);
  EXPECT_EQ(given.parallel.reduce_dtype, DType::kBF16);
  EXPECT_EQ(given.parallel.recompute, Recompute::kSelective);
  const std::string file = dir + "/ckpt/step-2/anvil_config.toml";
  ASSERT_TRUE(path_exists(file));
  const TrainConfig read = parse_train({"--config", file});
  // What was given with every auto resolved (mode, the blocks' length, the untiled MLP of a
  // micro-batch's 2 x 37 tokens) and the model's folder absolute.
  TrainConfig want = given;
  want.model.model = std::filesystem::absolute(want.model.model).lexically_normal().string();
  want.parallel.mode = ParallelMode::kDdp;
  want.data.seq_len = 37;
  want.parallel.mlp_tile = 74;
  EXPECT_TRUE(read == want) << read_file(file);
  // The log says why for each auto it resolved.
  EXPECT_NE(r.out.find("resolved seq_len 37: the data's blocks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resolved mode ddp: host memory is not planned, so ddp"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace anvil
