// The training step on the GPU, against itself in another order: the optimizer overlapped
// with the next forward (the default) gives the same bits as the optimizer run alone after
// the backward, in ddp and in one-GPU fsdp: every step's loss and gradient norm, and the
// final master weights and AdamW m and v. Selective and full recomputation give the same
// bits as keeping every activation (the same kernels on the same inputs). The memory plan
// against the measured peak on one GPU, and to the byte on two ranks sharing one GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "comm/comm.h"
#include "model/weights.h"
#include "ops/ops.h"
#include "train/open_run.h"
#include "../comm_ranks.h"
#include "../testing.h"
#include "require_gpu.h"

namespace anvil {
namespace {

struct Model {
  std::string name;
  ModelConfig config;
  HostUnits weights;
  int64_t batch = 1, seq = 16;
};

// The golden fixtures, and a Qwen3-0.6B shape cut to 4 layers: units large enough that the
// optimizer of one unit is still running while the forward reaches it.
std::vector<Model> models() {
  std::vector<Model> out;
  for (const std::string& name : testing::golden_models()) {
    Model m;
    m.name = name;
    const std::string dir = testing::fixture_dir(name);
    m.config = load_config(dir);
    ParamTable table(m.config, 1);
    m.weights = make_host_units(table);
    load_hf_weights(dir, table, m.weights);
    m.batch = 2;
    m.seq = 32;
    out.push_back(std::move(m));
  }
  Model big;
  big.name = "qwen3-0.6b, 4 layers";
  big.config = preset_config("qwen3-0.6b");
  big.config.num_layers = 4;
  ParamTable table(big.config, 1);
  big.weights = make_host_units(table);
  init_weights(big.config, table, 3, big.weights);
  big.batch = 2;
  big.seq = 512;
  out.push_back(std::move(big));
  return out;
}

struct Result {
  std::vector<double> losses, norms;
  HostUnits masters, m, v;
  int64_t peak = 0, planned = 0;  // bytes: measured peak and the memory plan's total
};

Result train(const Model& model, ParallelMode mode, bool overlap, Recompute recompute, int steps) {
  TrainConfig c;
  c.model.device = "cuda";
  c.parallel.mode = mode;
  c.data.micro_batch = model.batch;
  c.data.seq_len = model.seq;
  c.parallel.recompute = recompute;
  c.parallel.overlap_optimizer = overlap;
  c.optim.schedule.lr = 1e-3;
  c.optim.adamw.weight_decay = 0.1;
  c.steps = steps;
  const std::unique_ptr<Trainer> t =
      make_trainer(model.config, host_units_reader(model.weights), c, c.data.seq_len, nullptr, 0);
  Trainer& trainer = *t;
  std::mt19937_64 rng(11);
  Result r;
  for (int i = 0; i < steps; ++i) {
    TokenBatch b;
    b.ids.resize(static_cast<size_t>(model.batch * model.seq));
    for (auto& id : b.ids) id = static_cast<int64_t>(rng() % static_cast<uint64_t>(model.config.vocab_size));
    const StepStats st = trainer.step({b});
    r.losses.push_back(st.loss);
    r.norms.push_back(st.grad_norm);
  }
  r.peak = trainer.ops().runtime().memory_stats().peak;
  r.planned = trainer.plan().total();
  r.masters = trainer.masters();
  for (int k = 0; k < 2; ++k) {
    const std::vector<Tensor>& state = k == 0 ? trainer.store().exp_avg() : trainer.store().exp_avg_sq();
    HostUnits& out = k == 0 ? r.m : r.v;
    for (const Tensor& t : state) {
      out.emplace_back(static_cast<size_t>(t.numel()));
      trainer.ops().runtime().download(out.back().data(), t);
    }
  }
  return r;
}

void expect_same_bits(const Result& got, const Result& want, const std::string& what) {
  EXPECT_EQ(got.losses, want.losses) << what;
  EXPECT_EQ(got.norms, want.norms) << what;
  EXPECT_TRUE(got.masters == want.masters) << what << ": master weights differ";
  EXPECT_TRUE(got.m == want.m) << what << ": AdamW m differs";
  EXPECT_TRUE(got.v == want.v) << what << ": AdamW v differs";
}

TEST(GpuStep, OptimizerOverlapGivesTheSameBits) {
  REQUIRE_GPU();
  for (const Model& model : models())
    for (ParallelMode mode : {ParallelMode::kDdp, ParallelMode::kFsdp}) {
      const std::string what = model.name + (mode == ParallelMode::kDdp ? " ddp" : " fsdp");
      const Result alone = train(model, mode, false, Recompute::kNone, 6);
      const Result overlapped = train(model, mode, true, Recompute::kNone, 6);
      expect_same_bits(overlapped, alone, what);
      std::printf("%s: 6 steps, losses %.6f -> %.6f, overlapped == alone\n", what.c_str(), alone.losses.front(),
                  alone.losses.back());
    }
}

TEST(GpuStep, RecomputationGivesTheSameBits) {
  REQUIRE_GPU();
  for (const Model& model : models()) {
    const Result none = train(model, ParallelMode::kDdp, true, Recompute::kNone, 4);
    for (Recompute r : {Recompute::kSelective, Recompute::kFull})
      expect_same_bits(train(model, ParallelMode::kDdp, true, r, 4), none, model.name + " " + recompute_name(r));
  }
}

// The memory plan against the measured peak, every mode and recomputation, on the model
// large enough that fixed workspaces do not dominate: within 3%.
TEST(GpuStep, PlanPredictsThePeak) {
  REQUIRE_GPU();
  const std::vector<Model> all = models();
  const Model& model = all.back();
  for (ParallelMode mode : {ParallelMode::kDdp, ParallelMode::kFsdp})
    for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      const Result res = train(model, mode, true, r, 2);
      const double err = static_cast<double>(res.planned - res.peak) / static_cast<double>(res.peak);
      std::printf("%s %s %s: peak %.3f GiB, planned %.3f GiB (%+.2f%%)\n", model.name.c_str(),
                  mode == ParallelMode::kDdp ? "ddp" : "fsdp", recompute_name(r),
                  static_cast<double>(res.peak) / (1 << 30), static_cast<double>(res.planned) / (1 << 30), 100 * err);
      EXPECT_LE(std::abs(err), 0.03) << recompute_name(r);
    }
}

// A training run of 3 steps, `micro` micro-batches of one sequence each (at most 128 tokens),
// on `comm`'s rank (null: one GPU): the most the rank held at once and the plan's total.
std::pair<int64_t, int64_t> peak_and_plan(const Model& model, ParallelMode mode, DType wire, int64_t micro,
                                          Comm* comm) {
  const int64_t seq = std::min<int64_t>(model.seq, 128);
  TrainConfig c;
  c.model.device = "cuda";
  c.parallel.mode = mode;
  c.parallel.reduce_dtype = wire;
  c.parallel.recompute = Recompute::kNone;
  c.data.micro_batch = 1;
  c.data.seq_len = seq;
  c.data.grad_accum = micro;
  c.steps = 3;
  const std::unique_ptr<Trainer> t = make_trainer(model.config, host_units_reader(model.weights), c, seq, comm, 0);
  std::mt19937_64 rng(static_cast<uint64_t>(7 + (comm ? comm->rank() : 0)));
  for (int i = 0; i < 3; ++i) {
    std::vector<TokenBatch> mb(static_cast<size_t>(micro));
    for (TokenBatch& b : mb)
      for (int64_t k = 0; k < seq; ++k)
        b.ids.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(model.config.vocab_size)));
    t->step(mb);
  }
  return {t->ops().runtime().memory_stats().peak, t->plan().total()};
}

// Two ranks sharing one GPU through the host-staged comm (ANVIL_GPU_COMM_HOST's: the CPU comm
// with a HostStager; each rank a thread with its own ops and counters): the most each rank
// held at once is the plan's total for its rank, byte for byte, in ddp, zero2 and fsdp, on
// an fp32 and a bf16 wire, with one micro-batch (the blocks' gradients in bf16) and two
// (fp32, accumulated): the store's pooled gathers, full-unit gradients and wire copies as
// StorePool takes them and the plan replays them (parallel/store_pool.h), on the GPU's split
// masters. One GPU alone first, the same way: a difference there is not the ranks'.
TEST(GpuStep, PlanCountsEveryByteOnTwoHostStagedRanks) {
  REQUIRE_GPU();
  const std::vector<Model> all = models();
  for (const Model& model : all) {
    const auto [one_peak, one_planned] = peak_and_plan(model, ParallelMode::kDdp, DType::kF32, 1, nullptr);
    EXPECT_EQ(one_peak, one_planned) << model.name << ", one GPU";
    std::printf("%s, one GPU: peak %lld, planned %lld bytes\n", model.name.c_str(), static_cast<long long>(one_peak),
                static_cast<long long>(one_planned));
    for (ParallelMode mode : {ParallelMode::kDdp, ParallelMode::kZero2, ParallelMode::kFsdp})
      for (DType wire : {DType::kF32, DType::kBF16})
        for (int64_t micro : {1, 2}) {
          if (micro == 2 && &model == &all.back()) continue;  // the large shape: one micro-batch
          std::vector<std::pair<int64_t, int64_t>> got(2);
          const std::vector<std::string> errors = testing::run_comm_ranks(
              2,
              [&](Comm& comm) {
                got[static_cast<size_t>(comm.rank())] = peak_and_plan(model, mode, wire, micro, &comm);
              },
              120, [](const CommOptions& o) { return make_cpu_comm(o, make_host_stager(0)); });
          const std::string what = cat(model.name, " ", parallel_mode_name(mode), ", wire ", dtype_name(wire), ", ",
                                       micro, " micro-batch(es)");
          for (size_t r = 0; r < 2; ++r) {
            EXPECT_EQ(errors[r], "") << what;
            EXPECT_EQ(got[r].first, got[r].second) << what << ", rank " << r << ": peak, planned";
          }
          std::printf("%s: peak %lld, planned %lld bytes (rank 0)\n", what.c_str(),
                      static_cast<long long>(got[0].first), static_cast<long long>(got[0].second));
        }
  }
}

}  // namespace
}  // namespace anvil
