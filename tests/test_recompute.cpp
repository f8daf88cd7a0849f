// Recomputation changes what is kept, not what is computed: on the CPU reference, selective
// and full recomputation give bit for bit the gradients of keeping everything (the same
// ops on the same inputs), on every golden fixture, and the same losses and weights after
// three AdamW steps. The step benchmark's peak memory under each policy matches the
// activation sizes written out by hand.
#include <gtest/gtest.h>

#include <map>

#include "core/json.h"
#include "io/safetensors.h"
#include "model/weights.h"
#include "train/open_run.h"
#include "testing.h"

namespace anvil {
namespace {

class Recomputation : public ::testing::TestWithParam<std::string> {};

TEST_P(Recomputation, SameBitsAsKeepingEverything) {
  const std::string dir = testing::fixture_dir(GetParam());
  const ModelConfig cfg = load_config(dir);
  SafetensorsFile gold(dir + "/golden_step0.safetensors");
  const SafeTensorInfo& ids = gold.get("input_ids");
  ParamTable table(cfg, 1);
  HostUnits w = make_host_units(table);
  load_hf_weights(dir, table, w);
  TokenBatch batch;
  batch.ids = read_as_i64(ids);

  struct Run {
    double loss = 0;
    HostUnits grads, masters;
    std::vector<double> losses;
  };
  auto run = [&](Recompute r) {
    TrainConfig c;
    c.model.device = "cpu";
    c.data.micro_batch = ids.shape[0];
    c.data.seq_len = ids.shape[1];
    c.parallel.recompute = r;
    c.optim.schedule.lr = 1e-3;
    c.steps = 3;
    const std::unique_ptr<Trainer> t = make_trainer(cfg, host_units_reader(w), c, c.data.seq_len, nullptr, 0);
    Trainer& trainer = *t;
    EXPECT_EQ(trainer.recompute(), r);
    Run out;
    out.loss = trainer.loss_and_grads(batch, nullptr);
    out.grads = trainer.grads();
    for (int i = 0; i < 3; ++i) out.losses.push_back(trainer.step({batch}).loss);
    out.masters = trainer.masters();
    return out;
  };
  const Run none = run(Recompute::kNone);
  for (Recompute r : {Recompute::kSelective, Recompute::kFull}) {
    const Run got = run(r);
    EXPECT_EQ(got.loss, none.loss) << recompute_name(r);
    EXPECT_TRUE(got.grads == none.grads) << recompute_name(r) << ": gradients differ";
    EXPECT_EQ(got.losses, none.losses) << recompute_name(r);
    EXPECT_TRUE(got.masters == none.masters) << recompute_name(r) << ": weights after 3 steps differ";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Recomputation, ::testing::ValuesIn(testing::golden_models()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return testing::test_suffix(p.param); });

// `anvil bench step` on the CPU with the tiny preset, 2 sequences of 32 tokens: its JSON.
Json bench_step(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"bench", "step", "--device", "cpu", "--preset", "tiny", "--seq-len", "32"};
  args.insert(args.end(), extra.begin(), extra.end());
  const testing::RunResult r = testing::run_anvil(args);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  const size_t json = r.out.rfind('{');
  return json == std::string::npos ? Json::object() : json_parse(r.out.substr(json), "bench step");
}

// The step benchmark takes the new settings and says what it ran.
TEST(RecomputeCommand, BenchStep) {
  const Json j = bench_step({"--micro-batch", "2", "--recompute", "selective", "--steps", "3", "--warmup", "1"});
  ASSERT_TRUE(j.contains("recompute")) << j.dump();
  EXPECT_EQ(j["recompute"], "selective");
  EXPECT_TRUE(j["overlap_optimizer"].get<bool>());
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["optimizer_ms"].get<double>(), 0) << "the breakdown steps ran";
  const Json k = bench_step({"--recompute", "auto", "--no-overlap-optimizer", "--steps", "2", "--warmup", "1"});
  ASSERT_TRUE(k.contains("recompute")) << k.dump();
  EXPECT_EQ(k["recompute"], "none") << "auto on the CPU: host memory is not planned";
  EXPECT_FALSE(k["overlap_optimizer"].get<bool>());
  EXPECT_EQ(testing::run_anvil({"bench", "step", "--device", "cpu", "--recompute", "some"}).exit_code, 2);
}

// What each policy keeps, measured (the CPU backend's peak of allocated bytes) and planned,
// against the activation sizes written out for the tiny preset: C = 128, I = 384, 4 layers,
// 4 heads and 2 KV heads of 32 (the packed qkv Q = 256 wide, q 128), N = 2 x 32 = 64 tokens,
// fp32 (4 bytes). Per block, selective recomputes h1, qkv and h2 into one shared set:
// 4 * 64 * (128 + 256 + 128) = 131072 bytes. None keeps all of a block:
// 4 * 64 * (C + qkv_raw Q + qkv Q + att 128 + x_mid C + h2 C + gate_up 2I) = 458752 bytes
// plus the fp32 statistics 4 * (rstd1 64 + rstd2 64 + rstd_qk 64 * 6 + lse 2 * 4 * 32)
// = 3072: 461824 bytes; full keeps one such set for all blocks. So none - selective =
// 3 * 131072 = 393216 and selective - full = 3 * (461824 - 131072) = 992256 bytes.
TEST(RecomputeCommand, BenchStepPeakMemoryFollowsThePolicy) {
  std::map<std::string, double> peak, planned;
  for (const char* r : {"none", "selective", "full"}) {
    const Json j = bench_step({"--micro-batch", "2", "--recompute", r, "--steps", "2", "--warmup", "1"});
    ASSERT_TRUE(j.contains("recompute")) << r;
    ASSERT_EQ(j["recompute"], r);
    peak[r] = j["peak_allocated_gib"].get<double>() * (1ll << 30);
    planned[r] = j["planned_gib"].get<double>() * (1ll << 30);
  }
  EXPECT_EQ(peak["none"] - peak["selective"], 393216.0) << "measured: the element-wise outputs of 3 blocks";
  EXPECT_EQ(peak["selective"] - peak["full"], 992256.0) << "measured: the rest of 3 blocks' activations";
  EXPECT_EQ(planned["none"] - planned["selective"], 393216.0) << "planned";
  EXPECT_EQ(planned["selective"] - planned["full"], 992256.0) << "planned";
}

// --op-times adds its steps and a table; the CPU backend times its ops on the host's clock
// (the CUDA backend's tables are in bench/NOTES.md).
TEST(RecomputeCommand, BenchStepOpTimes) {
  auto r = testing::run_anvil({"bench", "step", "--device", "cpu", "--preset", "tiny", "--seq-len", "32", "--steps",
                               "3", "--warmup", "1", "--op-times"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // The JSON line is the output's last (its op_times is an object of its own).
  const auto last_line = [](const std::string& out) { return out.substr(out.rfind("\n{") + 1); };
  const Json j = json_parse(last_line(r.out), "bench step");
  ASSERT_TRUE(j.contains("op_times")) << r.out;
  EXPECT_EQ(j["op_times"]["steps"], 2);
  bool gate_up = false;
  for (const Json& op : j["op_times"]["ops"])
    if (op["op"] == "linear_forward 32x768x128") gate_up = op["calls"] == 4.0;  // tiny: 4 blocks, 2I = 768
  EXPECT_TRUE(gate_up) << r.out;
  EXPECT_NE(r.out.find("op times per step (mean of 2 steps, main queue)"), std::string::npos) << r.out;
  auto plain = testing::run_anvil({"bench", "step", "--device", "cpu", "--preset", "tiny", "--seq-len", "32",
                                   "--steps", "2", "--warmup", "1"});
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_FALSE(json_parse(last_line("\n" + plain.out), "bench step").contains("op_times"));
  EXPECT_EQ(json_parse(last_line("\n" + plain.out), "bench step")["grad_dtype"], "fp32") << "the CPU computes in fp32";
}

// --grad-dtype (model/params.h): bf16 is refused where it cannot hold, before any step.
TEST(RecomputeCommand, GradDtypeBf16NeedsAGpuAndOneMicroBatch) {
  auto cpu = testing::run_anvil({"bench", "step", "--device", "cpu", "--preset", "tiny", "--seq-len", "32", "--steps",
                                 "2", "--warmup", "1", "--grad-dtype", "bf16"});
  EXPECT_EQ(cpu.exit_code, 2) << cpu.out;
  EXPECT_NE(cpu.out.find("--grad-dtype bf16 needs a bf16 device (a GPU)"), std::string::npos) << cpu.out;
  auto train = testing::run_anvil({"train", "--device", "cpu", "--preset", "tiny", "--data", "no-such-file.jsonl",
                                   "--grad-dtype", "bf16"});
  EXPECT_EQ(train.exit_code, 2) << train.out;
  EXPECT_NE(train.out.find("--grad-dtype bf16 needs a bf16 device"), std::string::npos)
      << "refused before the data is read: " << train.out;
  auto bad = testing::run_anvil({"bench", "step", "--device", "cpu", "--preset", "tiny", "--grad-dtype", "fp16"});
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  auto plan = testing::run_anvil({"plan", "--preset", "qwen3-0.6b", "--grad-accum", "2", "--grad-dtype", "bf16"});
  EXPECT_EQ(plan.exit_code, 2) << plan.out;
  EXPECT_NE(plan.out.find("needs --grad-accum 1 (here: 2)"), std::string::npos) << plan.out;
}

}  // namespace
}  // namespace anvil
