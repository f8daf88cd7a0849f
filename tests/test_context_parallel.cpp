// Context parallelism (--context-parallel, model/context_parallel.h) on CPU ranks (threads,
// each with its own TCP comm): a small Qwen3 with 8 query and 4 key/value heads, one
// micro-batch of 2 sequences, split over 2 and 4 ranks, gives one process's loss and every
// parameter gradient within 1e-6 relative, in ddp and in fsdp (its shards joined), for plain
// sequences and for packed documents that cross the slices' borders (positions restarting
// inside a slice, labels of -100), and so do the Qwen2 and Llama 3 fixtures on 2 ranks;
// three AdamW steps give one process's losses; anvil train with --context-parallel 2 on two
// processes logs one process's losses and counts the eval set's tokens once, as bench step
// its steps'; the memory plan counts a rank's slice; and the settings Ulysses cannot run
// are refused, each saying why.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <random>
#include <regex>

#include "comm/comm.h"
#include "core/json.h"
#include "model/weights.h"
#include "plan/memory_plan.h"
#include "train/open_run.h"
#include "comm_ranks.h"
#include "plan_case.h"
#include "testing.h"

namespace anvil {
namespace {

constexpr int64_t kBatch = 2, kSeq = 32;

// A Qwen3 folder of fresh weights whose heads split over 4 ranks (anvil init).
std::string model_dir() {
  static const std::string dir = [] {
    const std::string d = testing::temp_dir("cp-model");
    Json c = json_read_file(testing::fixture_dir("tiny-qwen3") + "/config.json");
    c["num_attention_heads"] = 8;
    c["num_key_value_heads"] = 4;
    c["head_dim"] = 16;
    json_write_file(d + "/config.json", c);
    const testing::RunResult r = testing::run_anvil({"init", "--config", d + "/config.json", "--out", d + "/model"});
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return d + "/model";
  }();
  return dir;
}

// Random ids; packed: documents of 5, 13 and 14 tokens, then of 20 and 12 (each crossing
// the borders of the slices of 2 and of 4 ranks), and a stretch of labels -100 (a prompt).
TokenBatch make_batch(bool packed) {
  std::mt19937 rng(11);
  TokenBatch b;
  for (int64_t i = 0; i < kBatch * kSeq; ++i) b.ids.push_back(static_cast<int64_t>(rng() % 1000));
  if (!packed) return b;
  b.labels = b.ids;
  for (int64_t i = 9; i < 15; ++i) b.labels[static_cast<size_t>(i)] = -100;
  for (int64_t len : {5, 13, 14, 20, 12})
    for (int64_t t = 0; t < len; ++t) b.positions.push_back(t);
  return b;
}

TrainConfig config_of(ParallelMode mode, int64_t cp) {
  TrainConfig c;
  c.model.device = "cpu";
  c.data.micro_batch = kBatch;
  c.data.seq_len = kSeq;
  c.parallel.mode = mode;
  c.parallel.context_parallel = cp;
  c.optim.schedule.lr = 1e-3;
  c.steps = 3;
  return c;
}

struct Result {
  double loss = 0;
  std::vector<std::vector<double>> grads;  // each unit's gradient, without the padding
  std::vector<double> losses;             // of three steps after
};

// One process: the reference.
Result one_rank(const std::string& dir, const TokenBatch& batch) {
  const ModelConfig cfg = load_config(dir);
  const ParamTable table(cfg, 1);
  const std::unique_ptr<Trainer> t =
      make_trainer(cfg, hf_weights_reader(dir, table), config_of(ParallelMode::kDdp, 1), kSeq, nullptr, 0);
  Result r;
  r.loss = t->loss_and_grads(batch, nullptr);
  const HostUnits grads = t->grads();
  for (size_t u = 0; u < grads.size(); ++u)
    r.grads.emplace_back(grads[u].begin(), grads[u].begin() + table.units()[u].numel);
  for (int i = 0; i < 3; ++i) r.losses.push_back(t->step({batch}).loss);
  return r;
}

// Runs fn(comm) on P ranks, one thread each, and expects no rank to fail.
void run_ranks(int P, const std::function<void(Comm&)>& fn) {
  const std::vector<std::string> errors = testing::run_comm_ranks(P, fn, 60);
  for (int rank = 0; rank < P; ++rank) EXPECT_EQ(errors[static_cast<size_t>(rank)], "") << "rank " << rank;
}

// P ranks of one context-parallel group: rank 0's loss and losses, the gradients as the
// ranks hold them after the reduction (ddp: each whole, rank 0's; fsdp: the shards joined).
Result cp_ranks(const std::string& dir, int P, ParallelMode mode, const TokenBatch& batch) {
  const ModelConfig cfg = load_config(dir);
  const ParamTable table(cfg, P);
  std::vector<Result> per_rank(static_cast<size_t>(P));
  run_ranks(P, [&](Comm& comm) {
    const std::unique_ptr<Trainer> t =
        make_trainer(cfg, hf_weights_reader(dir, table), config_of(mode, P), kSeq, &comm, 0);
    Result& r = per_rank[static_cast<size_t>(comm.rank())];
    r.loss = t->loss_and_grads(batch, nullptr);
    t->store().finish_collectives();
    for (const Tensor& g : t->store().owned_grads()) {
      std::vector<float> host(static_cast<size_t>(g.numel()));
      t->ops().runtime().download(host.data(), g);
      r.grads.emplace_back(host.begin(), host.end());
    }
    for (int i = 0; i < 3; ++i) r.losses.push_back(t->step({batch}).loss);
  });
  Result r = per_rank[0];
  for (size_t u = 0; u < table.units().size(); ++u) {
    std::vector<double>& g = r.grads[u];
    if (mode == ParallelMode::kFsdp)
      for (int rank = 1; rank < P; ++rank) {
        const std::vector<double>& shard = per_rank[static_cast<size_t>(rank)].grads[u];
        g.insert(g.end(), shard.begin(), shard.end());
      }
    g.resize(static_cast<size_t>(table.units()[u].numel));
  }
  return r;
}

void expect_same(const Result& got, const Result& want, const std::string& what) {
  EXPECT_NEAR(got.loss, want.loss, 1e-6 * std::abs(want.loss)) << what;
  ASSERT_EQ(got.grads.size(), want.grads.size()) << what;
  for (size_t u = 0; u < want.grads.size(); ++u) {
    ASSERT_EQ(got.grads[u].size(), want.grads[u].size()) << what << " unit " << u;
    EXPECT_TRUE(testing::close_rel_l2(got.grads[u], want.grads[u], 1e-6)) << what << ": gradient of unit " << u;
  }
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-6 * std::abs(want.losses[i])) << what << ": step " << i + 1;
}

class ContextParallelRanks : public ::testing::TestWithParam<std::tuple<int, ParallelMode, bool>> {};

TEST_P(ContextParallelRanks, EqualsOneRank) {
  const auto [P, mode, packed] = GetParam();
  const TokenBatch batch = make_batch(packed);
  expect_same(cp_ranks(model_dir(), P, mode, batch), one_rank(model_dir(), batch),
              cat(P, " ranks, ", parallel_mode_name(mode), packed ? ", packed" : ""));
}

// Qwen2 (q, k and v biases, no qk-norm) and Llama 3 (no qk-norm, its RoPE), 2 key/value
// heads: 2 ranks, packed documents.
TEST(ContextParallel, OtherArchitecturesEqualOneRank) {
  const TokenBatch batch = make_batch(true);
  for (const char* fixture : {"tiny-qwen2", "tiny-llama3"}) {
    const std::string dir = testing::fixture_dir(fixture);
    expect_same(cp_ranks(dir, 2, ParallelMode::kFsdp, batch), one_rank(dir, batch), fixture);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ContextParallelRanks,
                         ::testing::Combine(::testing::Values(2, 4),
                                            ::testing::Values(ParallelMode::kDdp, ParallelMode::kFsdp),
                                            ::testing::Bool()),
                         [](const auto& p) {
                           return cat(std::get<0>(p.param), "ranks_", parallel_mode_name(std::get<1>(p.param)),
                                      std::get<2>(p.param) ? "_packed" : "");
                         });

// The losses of --metrics, and the eval line's "(N blocks, M tokens" as "N blocks, M tokens".
struct CliRun {
  std::vector<double> losses;
  std::string eval_counts;
};

CliRun train_cli(const std::string& dir, const std::string& tag, const std::vector<std::string>& extra) {
  std::vector<std::string> args = testing::tiny_train_args(
      dir + "/blocks.safetensors", 3,
      {"--eval-data", dir + "/eval.safetensors", "--metrics", dir + "/" + tag + ".jsonl"});
  args.insert(args.end(), extra.begin(), extra.end());
  const testing::RunResult r = testing::run_anvil(args);
  EXPECT_EQ(r.exit_code, 0) << tag << ": " << r.out;
  CliRun run;
  std::ifstream m(dir + "/" + tag + ".jsonl");
  for (std::string line; std::getline(m, line);)
    if (const Json j = json_parse(line, tag); j.contains("step")) run.losses.push_back(j["loss"].get<double>());
  // The eval line ("eval loss 6.9162  (6 blocks, 186 tokens, 0.0 s)"), wherever the ranks'
  // lines fall among each other.
  std::smatch m_eval;
  static const std::regex kEval(R"(eval loss [0-9.]+ +\((\d+ blocks, \d+ tokens), )");
  if (std::regex_search(r.out, m_eval, kEval)) run.eval_counts = m_eval[1].str();
  return run;
}

// Two processes of one group read the same blocks (the data order of one rank), train on
// their slices to one process's losses, and the eval set's tokens are counted once.
TEST(ContextParallel, TrainTwoProcessesLikeOne) {
  const std::string dir = testing::temp_dir("cp-train");
  testing::write_random_blocks(dir + "/blocks.safetensors", 24, 32, 5);
  testing::write_random_blocks(dir + "/eval.safetensors", 6, 32, 6);
  const CliRun one = train_cli(dir, "one", {});
  const CliRun cp = train_cli(dir, "cp", {"--nproc-per-node", "2", "--context-parallel", "2"});
  ASSERT_EQ(one.losses.size(), 3u);
  ASSERT_EQ(cp.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(cp.losses[i], one.losses[i], 1e-6 * one.losses[i]) << "step " << i + 1;
  EXPECT_NE(one.eval_counts, "");
  EXPECT_EQ(cp.eval_counts, one.eval_counts);
}

// bench step on a group of two: each step's tokens (tokens/s x step time) are one micro-batch's,
// counted once, not once a rank.
TEST(ContextParallel, BenchStepCountsTokensOnce) {
  const testing::RunResult r =
      testing::run_anvil({"bench", "step", "--device", "cpu", "--preset", "tiny", "--seq-len", "64", "--micro-batch",
                          "2", "--steps", "3", "--warmup", "1", "--context-parallel", "2", "--nproc-per-node", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const Json j = json_parse(r.out.substr(r.out.rfind('{')), "bench step");
  EXPECT_EQ(j["context_parallel"], 2);
  EXPECT_NEAR(j["tokens_per_s"].get<double>() * j["step_ms"].get<double>() / 1e3, 2 * 64, 1e-6 * 128) << r.out;
}

// A rank's activations under context parallel P are those of T/P tokens, but for the RoPE
// tables (all T positions) and the all-to-all's two chunk buffers; anvil plan prints them.
TEST(ContextParallel, PlanCountsARanksSlice) {
  testing::PlanCase in(preset_config("qwen3-1.7b"));
  in.world = 2;
  in.parallel.mode = ParallelMode::kFsdp;
  in.parallel.recompute = Recompute::kFull;
  in.data.seq_len = 131072;
  in.parallel.context_parallel = 2;
  // As anvil plan resolves it (the tiled MLP's F32 sum of bf16 gradients counts).
  in.parallel.grad_dtype = GradDType::kBF16;
  const MemoryPlan cp = plan_memory(in.run());
  in.data.seq_len /= 2;
  in.parallel.context_parallel = 1;
  const MemoryPlan half = plan_memory(in.run());
  const ModelConfig& c = in.model;
  const int64_t rope = 2 * in.data.seq_len * c.head_dim / 2 * 4;  // the other half of the positions, both tables
  const int64_t chunks = 2 * in.data.seq_len * (c.num_heads + 2 * c.num_kv_heads) * c.head_dim * 2;
  EXPECT_EQ(cp.activations, half.activations + rope + chunks);
  // The model allocates what the plan counts, to the byte (the CPU backend counts).
  const ModelConfig small = load_config(model_dir());
  run_ranks(4, [&](Comm& comm) {
    const ParamTable t(small, 4);
    const std::unique_ptr<Ops> ops = make_cpu_ops();
    const Transformer model(small, t, *ops, kBatch, kSeq,
                            {.recompute = Recompute::kSelective, .context_parallel = &comm});
    testing::PlanCase p(small);
    p.data.seq_len = kSeq;
    p.data.micro_batch = kBatch;
    p.parallel.recompute = Recompute::kSelective;
    p.compute_dtype = DType::kF32;
    p.parallel.context_parallel = 4;
    EXPECT_EQ(ops->runtime().memory_stats().allocated, plan_memory(p.run()).activations);
  });
  // (The tile plan_memory took by size: anvil plan's auto would leave the MLP untiled where it fits.)
  const testing::RunResult r = testing::run_anvil({"plan", "--preset", "qwen3-1.7b", "--nproc", "2", "--mode", "fsdp",
                                                   "--recompute", "full", "--seq-len", "131072",
                                                   "--context-parallel", "2", "--mlp-tile",
                                                   std::to_string(cp.mlp_tile), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(json_parse(r.out, "plan")["fsdp"]["activations"].get<int64_t>(), cp.activations) << r.out;
  const testing::RunResult bad = testing::run_anvil({"plan", "--preset", "qwen3-1.7b", "--nproc", "2",
                                                     "--context-parallel", "4"});
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--context-parallel 4 on 2 ranks"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("--nproc 4"), std::string::npos) << bad.out;
}

// What Ulysses cannot split is refused before anything is allocated, naming the fix.
TEST(ContextParallel, RefusesWhatCannotSplit) {
  const ModelConfig cfg = load_config(model_dir());
  const ParamTable table(cfg, 1);
  auto refusal = [&](int64_t cp, int64_t seq) {
    TrainConfig c = config_of(ParallelMode::kDdp, cp);
    c.data.seq_len = seq;
    try {
      make_trainer(cfg, hf_weights_reader(model_dir(), table), c, seq, nullptr, 0);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal(3, 33).find("the model's 4 key/value heads do not split evenly over 3 ranks"), std::string::npos)
      << refusal(3, 33);
  EXPECT_NE(refusal(2, 33).find("sequence length 33 does not split into 2 equal slices"), std::string::npos)
      << refusal(2, 33);
  EXPECT_NE(refusal(2, 32).find("--context-parallel 2 on 1 ranks"), std::string::npos) << refusal(2, 32);
  EXPECT_NE(refusal(0, 32).find("must be at least 1"), std::string::npos) << refusal(0, 32);
  // anvil train checks the ranks before it reads or packs anything: exit 2, the fix named.
  const testing::RunResult r =
      testing::run_anvil(testing::tiny_train_args("no-such-blocks.safetensors", 1, {"--context-parallel", "2"}));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--context-parallel 2 on 1 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--nproc-per-node 2"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace anvil
