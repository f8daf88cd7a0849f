// --offload-activations on the GPU (model/offload.h): the checkpoints go to pinned host
// memory on the copy stream and come back one block ahead, with events between the streams.
// The same kernels run on the same values, so offload on and off must give the same bits:
// the losses of 3 AdamW steps and the weights after them. A missing wait shows as other bits
// (a block reading a ring slot before its copy back landed, or overwriting it while the copy
// out still reads it). Qwen3-0.6B's shape (28 blocks, C = 1024) with fresh weights at 8,192
// tokens: each residual is 16 MiB, large enough that the copies take real time. The peak of
// device memory drops by exactly the plan's figure: 28 - 1 - 2 ring slots = 25 residuals.
#include <gtest/gtest.h>

#include <cstdio>

#include "model/weights.h"
#include "train/open_run.h"
#include "require_gpu.h"

namespace anvil {
namespace {

constexpr int64_t kSeq = 8192;

struct OffloadRun {
  std::vector<double> losses;
  HostUnits masters;
  int64_t peak = 0, planned_activations = 0, host_activations = 0;
};

OffloadRun run_steps(bool offload) {
  const ModelConfig cfg = preset_config("qwen3-0.6b");
  ParamTable table(cfg, 1);
  HostUnits w = make_host_units(table);
  init_weights(cfg, table, 3, w);
  TrainConfig c;
  c.model.device = "cuda";
  c.parallel.mode = ParallelMode::kDdp;
  c.parallel.recompute = Recompute::kFull;
  c.parallel.offload_activations = offload;
  c.data.micro_batch = 1;
  c.data.seq_len = kSeq;
  c.optim.schedule.lr = 1e-4;
  c.steps = 3;
  const std::unique_ptr<Trainer> t = make_trainer(cfg, host_units_reader(w), c, kSeq, nullptr, 0);
  TokenBatch b;
  for (int64_t i = 0; i < kSeq; ++i) b.ids.push_back((i * 7919 + 13) % cfg.vocab_size);
  OffloadRun r;
  for (int i = 0; i < 3; ++i) r.losses.push_back(t->step({b}).loss);
  r.masters = t->masters();
  r.peak = t->ops().runtime().memory_stats().peak;
  r.planned_activations = t->plan().activations;
  r.host_activations = t->plan().host_activations;
  return r;
}

TEST(GpuOffload, OnAndOffAreTheSameBitsAndThePeakDropsByThePlan) {
  REQUIRE_GPU();
  const OffloadRun off = run_steps(false), on = run_steps(true);
  EXPECT_EQ(on.losses, off.losses);
  EXPECT_TRUE(on.masters == off.masters) << "weights after 3 steps differ";
  const int64_t residual = kSeq * 1024 * 2;
  EXPECT_EQ(off.planned_activations - on.planned_activations, 25 * residual);
  EXPECT_EQ(on.host_activations, 27 * residual);
  EXPECT_EQ(off.peak - on.peak, off.planned_activations - on.planned_activations) << "measured peak";
  std::printf("qwen3-0.6b shape, %lld tokens, recompute full: losses %.6f %.6f %.6f both; peak %.3f GiB -> %.3f GiB "
              "with offload (%.3f GiB pinned on the host)\n",
              static_cast<long long>(kSeq), on.losses[0], on.losses[1], on.losses[2],
              static_cast<double>(off.peak) / (1 << 30), static_cast<double>(on.peak) / (1 << 30),
              static_cast<double>(on.host_activations) / (1 << 30));
}

}  // namespace
}  // namespace anvil
