// --offload-activations (issue 25): the blocks' checkpoints in host memory change where they
// live, not what is computed. On the CPU the copies are memcpy, so offload on and off must be
// bit for bit the same, and that checks the bookkeeping: the ring slot each block writes and
// reads, and which host buffer comes back before which block's backward (a wrong one changes
// the gradients). Models of 1, 2, 4 and 7 blocks: none offloaded, one (no ring slot reused),
// and the ring reused with copies back; and anvil train's losses and export. Also: the
// activation table and the plan with offload against the shapes written out by hand, the
// step benchmark's measured peak, the refusals (another policy; host memory too small), and
// the plan of Qwen3-8B at 65,536 and 131,072 tokens.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/json.h"
#include "metrics_losses.h"
#include "model/activations.h"
#include "model/weights.h"
#include "plan/memory_plan.h"
#include "plan_case.h"
#include "testing.h"
#include "train/open_run.h"

namespace anvil {
namespace {

struct TinyRun {
  double loss = 0;
  HostUnits grads, masters;
  std::vector<double> losses;
};

// The tiny preset with `layers` blocks, fresh weights, 2 sequences of 24 tokens: the loss and
// gradients of one pass, then the losses of 3 AdamW steps and the weights after them.
TinyRun train_tiny(int64_t layers, bool offload) {
  ModelConfig cfg = preset_config("tiny");
  cfg.num_layers = layers;
  ParamTable table(cfg, 1);
  HostUnits w = make_host_units(table);
  init_weights(cfg, table, 7, w);
  TokenBatch batch;
  for (int64_t i = 0; i < 2 * 24; ++i) batch.ids.push_back((i * 37 + 11) % cfg.vocab_size);
  TrainConfig c;
  c.model.device = "cpu";
  c.data.micro_batch = 2;
  c.data.seq_len = 24;
  c.parallel.recompute = Recompute::kFull;
  c.parallel.offload_activations = offload;
  c.optim.schedule.lr = 1e-3;
  c.steps = 3;
  const std::unique_ptr<Trainer> trainer = make_trainer(cfg, host_units_reader(w), c, c.data.seq_len, nullptr, 0);
  TinyRun out;
  out.loss = trainer->loss_and_grads(batch, nullptr);
  out.grads = trainer->grads();
  for (int i = 0; i < 3; ++i) out.losses.push_back(trainer->step({batch}).loss);
  out.masters = trainer->masters();
  return out;
}

TEST(Offload, OnAndOffAreTheSameBits) {
  for (int64_t layers : {1, 2, 4, 7}) {
    const TinyRun off = train_tiny(layers, false), on = train_tiny(layers, true);
    EXPECT_EQ(on.loss, off.loss) << layers << " blocks";
    EXPECT_TRUE(on.grads == off.grads) << layers << " blocks: gradients differ";
    EXPECT_EQ(on.losses, off.losses) << layers << " blocks";
    EXPECT_TRUE(on.masters == off.masters) << layers << " blocks: weights after 3 steps differ";
  }
}

// Bytes of a file ("" when missing).
std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// anvil train on the demo's rows, the tiny preset, 3 steps: the logged losses and the fp32
// export the same bytes with and without the flag, and the run says what it resolved.
TEST(Offload, TrainLossesAndExportTheSame) {
  const std::string demo = std::string(ANVIL_SOURCE_DIR) + "/data/demo", dir = testing::temp_dir("offload_train");
  std::map<std::string, testing::MetricsLosses> losses;
  for (const std::string run : {"kept", "offloaded"}) {
    std::vector<std::string> args = {"train", "--device", "cpu", "--preset", "tiny", "--tokenizer", demo, "--data",
                                     demo + "/arithmetic.jsonl", "--data-cache", dir + "/cache", "--seq-len", "64",
                                     "--micro-batch", "2", "--steps", "3", "--metrics", dir + "/" + run + ".jsonl",
                                     "--export", dir + "/" + run, "--export-dtype", "fp32", "--recompute", "auto",
                                     "--log-every", "1"};
    if (run == "offloaded") args.push_back("--offload-activations");
    const testing::RunResult r = testing::run_anvil(args);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    losses[run] = testing::read_metrics_losses(dir + "/" + run + ".jsonl");
    if (run == "offloaded") {
      EXPECT_NE(r.out.find("recompute full: --offload-activations moves its checkpoints to host memory"),
                std::string::npos)
          << r.out;
    }
  }
  EXPECT_EQ(losses["offloaded"].loss.size(), 3u);
  EXPECT_EQ(losses["offloaded"].loss, losses["kept"].loss);
  const std::string kept = file_bytes(dir + "/kept/model.safetensors");
  EXPECT_FALSE(kept.empty());
  EXPECT_TRUE(file_bytes(dir + "/offloaded/model.safetensors") == kept) << "the exported weights differ";
}

// The tiny preset (C = 128, 4 blocks), N = 2 x 32 = 64 tokens in fp32: a residual is
// 64 * 128 * 4 = 32768 bytes. Offloaded: x_1, x_2, x_3 on the host (98304 bytes), two ring
// slots on the device, so the device keeps one residual fewer.
constexpr int64_t kResidual = 64 * 128 * 4;

TEST(Offload, ActivationTableFollowsTheShapes) {
  const ModelConfig c = preset_config("tiny");
  const auto kept = activation_buffers(c, 2, 32, Recompute::kFull, DType::kF32);
  const auto off = activation_buffers(c, 2, 32, Recompute::kFull, DType::kF32, kMlpTileAuto, DType::kF32, 1, true);
  std::vector<int64_t> host, ring;
  for (const ActivationBuffer& b : off) {
    if (b.host) host.push_back(b.index);
    if (b.what == Activation::kResidualRing) ring.push_back(b.index);
    if (b.host || b.what == Activation::kResidualRing) {
      EXPECT_EQ(b.shape, Shape({64, 128})) << b.name << b.index;
    }
  }
  EXPECT_EQ(host, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(ring, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(host_activation_bytes(off), 3 * kResidual);
  EXPECT_EQ(host_activation_bytes(kept), 0);
  EXPECT_EQ(activation_bytes(kept) - activation_bytes(off), kResidual);
}

// `anvil bench step` on the CPU, tiny preset, 2 sequences of 32 tokens, full recomputation.
Json bench_step(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"bench", "step", "--device", "cpu", "--preset", "tiny", "--seq-len", "32",
                                   "--micro-batch", "2", "--steps", "2", "--warmup", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  const testing::RunResult r = testing::run_anvil(args);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  return r.exit_code == 0 ? json_parse(r.out.substr(r.out.rfind('{')), "bench step") : Json::object();
}

TEST(Offload, BenchStepPeakAndPlanDropByTheOffloadedResiduals) {
  const Json off = bench_step({"--recompute", "full"}), on = bench_step({"--recompute", "full",
                                                                         "--offload-activations"});
  ASSERT_TRUE(on.contains("offload_activations")) << on.dump();
  EXPECT_TRUE(on["offload_activations"].get<bool>());
  EXPECT_FALSE(off["offload_activations"].get<bool>());
  auto bytes = [](const Json& j, const char* key) { return j[key].get<double>() * (1ll << 30); };
  EXPECT_EQ(bytes(off, "peak_allocated_gib") - bytes(on, "peak_allocated_gib"), kResidual) << "measured";
  EXPECT_EQ(bytes(off, "planned_gib") - bytes(on, "planned_gib"), kResidual) << "planned";
  EXPECT_EQ(bytes(on, "host_activations_gib"), 3 * kResidual);
  EXPECT_EQ(bytes(off, "host_activations_gib"), 0);
  const Json autoed = bench_step({"--recompute", "auto", "--offload-activations"});
  ASSERT_TRUE(autoed.contains("recompute")) << autoed.dump();
  EXPECT_EQ(autoed["recompute"], "full") << "auto with offload resolves to full";
}

TEST(Offload, OtherPoliciesAreRefused) {
  for (const char* r : {"none", "selective"}) {
    const auto bench = testing::run_anvil({"bench", "step", "--device", "cpu", "--preset", "tiny", "--seq-len", "32",
                                           "--recompute", r, "--offload-activations"});
    EXPECT_EQ(bench.exit_code, 2) << bench.out;
    EXPECT_NE(bench.out.find(std::string("--offload-activations with --recompute ") + r), std::string::npos)
        << bench.out;
    EXPECT_NE(bench.out.find("use --recompute full"), std::string::npos) << bench.out;
    const auto plan = testing::run_anvil({"plan", "--preset", "tiny", "--recompute", r, "--offload-activations"});
    EXPECT_EQ(plan.exit_code, 2) << plan.out;
  }
}

TEST(Offload, HostMemoryTooSmallIsRefused) {
  MemoryPlan p;
  p.host_activations = 40ll << 30;
  p.host_snapshot = 30ll << 30;
  const HostMemory m{100ll << 30, 64ll << 30, "/proc/meminfo"};
  EXPECT_EQ(host_memory_refusal(p, false, 1, m), "");
  const std::string two = host_memory_refusal(p, false, 2, m);
  EXPECT_NE(two.find("40.00 GiB of pinned host memory per rank, 80.00 GiB for the 2 rank(s) of this machine, but "
                     "64.00 GiB of its 100.00 GiB are available (/proc/meminfo)"),
            std::string::npos)
      << two;
  const std::string saves = host_memory_refusal(p, true, 1, m);
  EXPECT_NE(saves.find("and the snapshot of asynchronous saves 30.00 GiB, 70.00 GiB"), std::string::npos) << saves;
  EXPECT_NE(saves.find("--sync-save"), std::string::npos) << saves;
  p.host_activations = 0;
  EXPECT_EQ(host_memory_refusal(p, true, 4, m), "") << "without offload the snapshot is async saves' to check";
}

// Qwen3-8B (C = 4096, 36 blocks) at 65,536 tokens with full recomputation on one H200: a
// residual is 65536 * 4096 * 2 = 512 MiB; offload keeps x_0, x_36 and two ring slots of the
// 37, so the device holds 33 * 0.5 = 16.5 GiB less and the host 35 * 0.5 = 17.5 GiB. At
// 131,072 tokens (1 GiB a residual) it is what makes the run fit: 33 GiB less.
TEST(Offload, PlanOfQwen3_8bAtLongSequences) {
  testing::PlanCase in(preset_config("qwen3-8b"));
  in.data.seq_len = 65536;
  in.parallel.recompute = Recompute::kFull;
  in.parallel.grad_dtype = GradDType::kBF16;
  const MemoryPlan kept = plan_memory(in.run());
  in.parallel.offload_activations = true;
  const MemoryPlan off = plan_memory(in.run());
  const int64_t residual = int64_t{65536} * 4096 * 2;
  EXPECT_EQ(kept.activations - off.activations, 33 * residual);
  EXPECT_EQ(kept.total() - off.total(), 33 * residual);
  EXPECT_EQ(off.host_activations, 35 * residual);
  EXPECT_EQ(kept.host_activations, 0);
  in.parallel.offload_activations = false;
  in.data.seq_len = 131072;
  EXPECT_FALSE(plan_fits(plan_memory(in.run()), kH200Bytes));
  const PlanAdvice a = advise(in.run(), kH200Bytes);
  EXPECT_FALSE(a.fits);
  EXPECT_NE(a.message.find("ddp fits with --recompute full --offload-activations"), std::string::npos) << a.message;
  in.parallel.offload_activations = true;
  EXPECT_TRUE(plan_fits(plan_memory(in.run()), kH200Bytes));
  const auto plan = testing::run_anvil({"plan", "--preset", "qwen3-8b", "--seq-len", "65536", "--recompute", "full",
                                        "--offload-activations"});
  ASSERT_EQ(plan.exit_code, 0) << plan.out;
  EXPECT_NE(plan.out.find("host memory per rank for the offloaded activations (pinned): 17.50 GiB (ddp)"),
            std::string::npos)
      << plan.out;
}

}  // namespace
}  // namespace anvil
