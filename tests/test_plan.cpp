// The memory plan: closed-form parts, the advice of the rule, and `anvil plan` itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "core/json.h"
#include "core/error.h"
#include "model/expert_parallel.h"
#include "model/params.h"
#include "ops/attention_scratch.h"
#include "ops/cross_entropy_chunks.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "ops/ops.h"
#include "parallel/store_pool.h"
#include "plan/memory_plan.h"
#include "plan_case.h"
#include "train/open_run.h"
#include "comm_ranks.h"
#include "testing.h"
#include "tiny_moe.h"

namespace anvil {
namespace {

TEST(Plan, ModelStatesFollowTheUnits) {
  testing::PlanCase in(preset_config("qwen3-1.7b"));
  const int64_t padded1 = ParamTable(in.model, 1).total_padded();
  MemoryPlan d = plan_memory(in.run());
  EXPECT_EQ(d.params, 4 * padded1);
  EXPECT_EQ(d.optimizer, 8 * padded1);
  EXPECT_EQ(d.grads, 4 * padded1);
  EXPECT_EQ(d.weights, 0) << "one process: the masters' high halves are the compute weights";
  in.world = 2;
  EXPECT_EQ(plan_memory(in.run()).weights, 0) << "ddp on every rank: the high halves are the compute weights";
  in.parallel.mode = ParallelMode::kFsdp;
  in.world = 8;
  const int64_t padded8 = ParamTable(in.model, 8).total_padded();
  MemoryPlan f = plan_memory(in.run());
  EXPECT_EQ(f.params, 4 * padded8 / 8);
  EXPECT_EQ(f.optimizer, 8 * padded8 / 8);
  EXPECT_LT(f.total(), d.total() / 2);
  // Recomputation keeps one block's activations instead of every block's.
  in.parallel.recompute = Recompute::kFull;
  EXPECT_LT(plan_memory(in.run()).activations, f.activations / 4);
}

// DDP's wire copies (parallel/grad_reducer.h): one reduction in flight, finished before the
// next copy is made, so the pool holds a copy of each size that no free one holds, in the
// order the backward reaches them: the final norm, a block, the (tied) embedding.
TEST(Plan, Bf16ReductionBuffers) {
  testing::PlanCase in(preset_config("qwen3-1.7b"));
  in.world = 2;
  const ParamTable table(in.model, 2);
  auto padded = [&](int unit) { return table.units()[static_cast<size_t>(unit)].padded; };
  ASSERT_EQ(table.lm_head_unit(), table.embed_unit());
  ASSERT_LT(padded(table.norm_unit()), padded(table.block_unit(0)));
  ASSERT_LT(padded(table.block_unit(0)), padded(table.embed_unit()));
  const MemoryPlan d32 = plan_memory(in.run());
  in.parallel.reduce_dtype = DType::kBF16;
  EXPECT_EQ(plan_memory(in.run()).grads,
            d32.grads + 2 * (padded(table.norm_unit()) + padded(table.block_unit(0)) + padded(table.embed_unit())))
      << "ddp: a bf16 copy of each size";
  in.world = 1;
  testing::PlanCase one(in.model);
  EXPECT_EQ(plan_memory(in.run()).grads, plan_memory(one.run()).grads) << "one rank reduces nothing";
}

// bf16 gradients (model/params.h, GradDType): two bytes per element of the units written
// once per backward (blocks, final norm), four for the embedding and an untied output layer;
// only where there is one process and one micro-batch.
TEST(Plan, Bf16GradientsOfTheBlocks) {
  for (const char* preset : {"qwen3-1.7b", "qwen3-8b"}) {  // tied, untied
    testing::PlanCase in(preset_config(preset));
    const ParamTable table(in.model, 1);
    int64_t once = 0;
    for (size_t u = 0; u < table.units().size(); ++u)
      if (table.grads_written_once(static_cast<int>(u))) once += table.units()[u].padded;
    EXPECT_FALSE(table.grads_written_once(table.embed_unit())) << preset;
    EXPECT_FALSE(table.grads_written_once(table.lm_head_unit())) << preset;
    EXPECT_TRUE(table.grads_written_once(table.block_unit(0))) << preset;
    EXPECT_TRUE(table.grads_written_once(table.norm_unit())) << preset;
    EXPECT_GT(once, table.total_padded() * 3 / 4) << preset << ": the blocks hold most parameters";
    for (ParallelMode mode : {ParallelMode::kDdp, ParallelMode::kFsdp}) {
      in.parallel.mode = mode;
      in.parallel.grad_dtype = GradDType::kF32;
      const MemoryPlan f32 = plan_memory(in.run());
      in.parallel.grad_dtype = GradDType::kBF16;
      const MemoryPlan b16 = plan_memory(in.run());
      EXPECT_EQ(b16.grads, f32.grads - 2 * once) << preset << " " << parallel_mode_name(mode);
      EXPECT_EQ(b16.total(), f32.total() - 2 * once) << preset;
    }
    // Two ranks: DDP holds the blocks' gradients in bf16 too, and widens each block and the
    // final norm on its way to the fp32 wire through one pooled copy, reused (one reduction
    // in flight); on a bf16 wire the embedding and an untied output layer, fp32, are the
    // ones copied, the largest first (untied: the output layer, whose buffer the
    // embedding's copy reuses).
    testing::PlanCase two = in;
    two.world = 2;
    const ParamTable table2(in.model, 2);
    int64_t once2 = 0, largest = 0;
    for (size_t u = 0; u < table2.units().size(); ++u) {
      if (table2.grads_written_once(static_cast<int>(u))) once2 += table2.units()[u].padded;
      largest = std::max(largest, table2.units()[u].padded);
    }
    const int64_t block = table2.units()[static_cast<size_t>(table2.block_unit(0))].padded;
    const int64_t norm = table2.units()[static_cast<size_t>(table2.norm_unit())].padded;
    two.parallel.mode = ParallelMode::kDdp;
    two.parallel.grad_dtype = GradDType::kF32;
    const MemoryPlan d32 = plan_memory(two.run());
    two.parallel.grad_dtype = GradDType::kBF16;
    EXPECT_EQ(plan_memory(two.run()).grads, d32.grads - 2 * once2 + 4 * (norm + block)) << preset;
    two.parallel.reduce_dtype = DType::kBF16;
    EXPECT_EQ(plan_memory(two.run()).grads, d32.grads - 2 * once2 + 2 * largest) << preset << ": bf16 wire";
  }
  EXPECT_EQ(resolve_grad_dtype(GradDType::kAuto, DType::kBF16, 1), DType::kBF16);
  EXPECT_EQ(resolve_grad_dtype(GradDType::kAuto, DType::kBF16, 2), DType::kF32) << "micro-batches sum in fp32";
  EXPECT_EQ(resolve_grad_dtype(GradDType::kAuto, DType::kF32, 1), DType::kF32) << "the CPU";
  EXPECT_EQ(resolve_grad_dtype(GradDType::kF32, DType::kBF16, 1), DType::kF32);
  EXPECT_EQ(resolve_grad_dtype(GradDType::kBF16, DType::kBF16, 1), DType::kBF16);
  EXPECT_THROW(resolve_grad_dtype(GradDType::kBF16, DType::kBF16, 4), Error);
  EXPECT_THROW(resolve_grad_dtype(GradDType::kBF16, DType::kF32, 1), Error);
  EXPECT_EQ(parse_grad_dtype("bf16"), GradDType::kBF16);
  EXPECT_THROW(parse_grad_dtype("fp16"), Error);
}

// The backend's shared scratch holds the larger of the cross-entropy chunk and attention's
// temporaries; cuDNN's deterministic backward keeps dP, B x H x T x T bf16. Beside it: the GEMM
// workspace, the trainer's three I32 per token and its two F32 scalars.
TEST(Plan, WorkspaceHoldsAttentionScratch) {
  testing::PlanCase in(preset_config("qwen3-8b"));  // 32 q / 8 kv heads of 128
  in.data.seq_len = 4096;
  in.data.micro_batch = 4;
  const int64_t attention = attention_scratch_bytes(4, 4096, 32, 8, 128);
  EXPECT_GE(attention, 4ll * 32 * 4096 * 4096 * 2);
  EXPECT_GE(plan_memory(in.run()).workspace, attention);
  // One sequence of 2048: the cross-entropy's logits and dlogits are the larger.
  in.data.seq_len = 2048;
  in.data.micro_batch = 1;
  const CrossEntropyChunks ce = cross_entropy_chunks(2048, in.model.vocab_size);
  EXPECT_LT(attention_scratch_bytes(1, 2048, 32, 8, 128), ce.bytes);
  EXPECT_EQ(plan_memory(in.run()).workspace, (32ll << 20) + ce.bytes + 4 * 2048 * 3 + 2 * 4);
  EXPECT_EQ(kGemmWorkspaceBytes, 32ll << 20) << "cuBLAS's advice for Hopper";
}

// Past the dP bound the scratch holds anvil's kernel or cuDNN's non-deterministic backward:
// what cuDNN 9.14 asked for on an H200 at 32,768 tokens (8B's 32 heads, 1.7B's 16), 256
// bytes over the kernel's partials.
TEST(Plan, AttentionScratchPastTheDpBoundHoldsCudnnsNondeterministicBackward) {
  EXPECT_FALSE(cudnn_backward_within_bound(1, 32768, 32));
  EXPECT_GE(attention_scratch_bytes(1, 32768, 32, 8, 128), 1077936384);
  EXPECT_GE(attention_scratch_bytes(1, 32768, 16, 8, 128), 538968320);
}

// FP8 block linears add their GEMMs' 32 MiB workspace, and their operands' FP8 copies share
// the scratch: within it at 1.7B (the largest, gate_up's backward: dy both ways, 2 x 2I x tokens
// bytes, and x^T, C x tokens, is below the cross-entropy's), beyond it with a small
// vocabulary, two heads and many tokens.
TEST(Plan, Fp8AddsItsWorkspaceAndOperandCopies) {
  testing::PlanCase in(preset_config("qwen3-1.7b"));
  in.data.micro_batch = 4;
  const int64_t off = plan_memory(in.run()).workspace;
  for (Fp8Recipe r : {Fp8Recipe::kTensorwise, Fp8Recipe::kRowwise}) {
    in.parallel.fp8 = r;
    EXPECT_EQ(plan_memory(in.run()).workspace, off + (32ll << 20));
  }
  in.model.vocab_size = 1024;
  in.model.num_heads = 2;
  in.model.num_kv_heads = 1;
  in.data.micro_batch = 64;
  in.parallel.fp8 = Fp8Recipe::kOff;
  const int64_t small_vocab = plan_memory(in.run()).workspace;
  in.parallel.fp8 = Fp8Recipe::kTensorwise;
  const int64_t n = 64 * 2048;
  EXPECT_GT(plan_memory(in.run()).workspace - small_vocab, 32ll << 20) << "the FP8 operands do not outgrow the scratch";
  EXPECT_EQ(plan_memory(in.run()).workspace,
            (32ll << 20) + (32ll << 20) +
                fp8_backward_scratch(n, 2 * in.model.intermediate_size, in.model.hidden_size).total() + 4 * n * 3 +
                2 * 4);
}

// The cross-entropy's blocks of dlogits and chunks of logits stay within 512 MiB together,
// blocks as large as that allows (in multiples of 64 rows), chunks a quarter of a block.
TEST(Plan, CrossEntropyChunks) {
  const CrossEntropyChunks q = cross_entropy_chunks(8192, 151936);
  EXPECT_EQ(q.grad_rows, 1152);
  EXPECT_EQ(q.logit_rows, 288);
  EXPECT_EQ(q.grad_ld, 151936);
  EXPECT_LE(q.logits_bytes + q.grad_bytes, 512ll << 20);
  EXPECT_GT(q.logits_bytes + q.grad_bytes + 64 * 3 * 151936, 512ll << 20) << "64 more rows would not fit";
  EXPECT_EQ(q.bytes, q.logits_bytes + q.grad_bytes + 8192 * 4);
  const CrossEntropyChunks small = cross_entropy_chunks(100, 5003);
  EXPECT_EQ(small.grad_rows, 100) << "one block of every row";
  EXPECT_EQ(small.logit_rows, 100);
  EXPECT_EQ(small.grad_ld, 5008) << "rows of dlogits start 16-byte aligned";
  EXPECT_EQ(small.logits_bytes % 256, 0);
  const CrossEntropyChunks huge = cross_entropy_chunks(64, int64_t{1} << 28);
  EXPECT_EQ(huge.grad_rows, 1);
  EXPECT_EQ(huge.logit_rows, 1);
}

TEST(Plan, SelectiveRecomputeKeepsAllButTheElementwiseOutputs) {
  testing::PlanCase in(preset_config("qwen3-1.7b"));
  const int64_t L = in.model.num_layers, C = 2048, Q = (16 + 2 * 8) * 128;
  int64_t elementwise = 0;  // kSelective's one shared set
  std::string shared;
  for (const ActivationBuffer& b : activation_buffers(in.model, 1, 2048, Recompute::kSelective, DType::kBF16))
    if (b.index == kEveryBlockSet) {
      elementwise += b.bytes();
      shared += std::string(shared.empty() ? "" : " ") + b.name;
    }
  EXPECT_EQ(shared, "h1 qkv h2");
  EXPECT_EQ(elementwise, 2 * 2048 * (C + Q + C)) << "h1, qkv after RoPE, h2 in bf16";
  const int64_t none = plan_memory(in.run()).activations;
  in.parallel.recompute = Recompute::kSelective;
  const int64_t selective = plan_memory(in.run()).activations;
  in.parallel.recompute = Recompute::kFull;
  const int64_t full = plan_memory(in.run()).activations;
  EXPECT_EQ(none - selective, (L - 1) * elementwise) << "one shared set instead of L";
  EXPECT_LT(full, selective);
  in.parallel.recompute = Recompute::kAuto;
  EXPECT_THROW(plan_memory(in.run()), Error) << "auto is resolved by advise()";
}

// What the model allocates, counted by the backend, is what the plan counts, byte for byte,
// for every recomputation and a few models and shapes; and all of it is released.
TEST(Plan, ModelAllocatesWhatThePlanCounts) {
  struct Case {
    ModelConfig config;
    int64_t micro_batch, seq_len;
  };
  const Case cases[] = {{load_config(testing::fixture_dir("tiny-qwen3")), 2, 24},
                        {load_config(testing::fixture_dir("tiny-qwen3-untied")), 3, 5},
                        {preset_config("qwen3-0.6b"), 1, 3}};
  std::unique_ptr<Ops> ops = make_cpu_ops();
  for (const Case& k : cases) {
    const ParamTable table(k.config, 1);
    for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      testing::PlanCase in(k.config);
      in.data.micro_batch = k.micro_batch;
      in.data.seq_len = k.seq_len;
      in.parallel.recompute = r;
      in.compute_dtype = ops->compute_dtype();
      for (Fp8Recipe fp8 : {Fp8Recipe::kOff, Fp8Recipe::kTensorwise}) {
        in.parallel.fp8 = fp8;
        const int64_t before = ops->runtime().memory_stats().allocated;
        {
          const Transformer model(k.config, table, *ops, k.micro_batch, k.seq_len, {.recompute = r, .fp8 = fp8});
          EXPECT_EQ(ops->runtime().memory_stats().allocated - before, plan_memory(in.run()).activations)
              << k.config.architecture << " " << k.micro_batch << "x" << k.seq_len << " " << recompute_name(r)
              << " fp8 " << fp8_recipe_name(fp8);
        }
        EXPECT_EQ(ops->runtime().memory_stats().allocated, before) << recompute_name(r);
      }
    }
  }
  const ParamTable tiny(cases[0].config, 1);
  EXPECT_THROW(Transformer(cases[0].config, tiny, *ops, 2, 24, {.recompute = Recompute::kAuto}), Error);
  EXPECT_THROW(activation_buffers(cases[0].config, 2, 24, Recompute::kAuto, DType::kF32), Error);
  EXPECT_EQ(parse_recompute("selective"), Recompute::kSelective);
  EXPECT_THROW(parse_recompute("some"), Error);
}

// A whole training step on the CPU: the most the backend held at once (parameter states,
// activations, the workspace table's entries, the trainer's ids and scalars) is the plan's
// total, byte for byte. Memory any backend, store or trainer allocates outside the table
// makes the peak larger.
TEST(Plan, TrainingStepAllocatesWhatThePlanCounts) {
  for (const char* fixture : {"tiny-qwen3", "tiny-qwen3-untied"}) {
    const std::string dir = testing::fixture_dir(fixture);
    const ModelConfig cfg = load_config(dir);
    const ParamTable table(cfg, 1);
    HostUnits w = make_host_units(table);
    load_hf_weights(dir, table, w);
    TokenBatch batch;
    for (int64_t i = 0; i < 2 * 24; ++i) batch.ids.push_back((i * 7 + 3) % cfg.vocab_size);
    for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull})
      for (Fp8Recipe fp8 : {Fp8Recipe::kOff, Fp8Recipe::kTensorwise}) {
        TrainConfig c;
        c.model.device = "cpu";
        c.data.micro_batch = 2;
        c.data.seq_len = 24;
        c.parallel.recompute = r;
        c.parallel.fp8 = fp8;
        c.steps = 2;
        const std::unique_ptr<Trainer> t = make_trainer(cfg, host_units_reader(w), c, c.data.seq_len, nullptr, 0);
        for (int i = 0; i < 2; ++i) t->step({batch});
        const Runtime::MemoryStats m = t->ops().runtime().memory_stats();
        EXPECT_EQ(m.peak, t->plan().total()) << fixture << " " << recompute_name(r) << " fp8 " << fp8_recipe_name(fp8);
        EXPECT_EQ(m.allocated, m.peak) << "nothing is allocated for one step only";
      }
  }
}

// --objective dpo: the trainer's per-token losses and weights and their weighted sum (train/dpo.h)
// are what a DPO trainer allocates beyond an SFT one, and what the plan counts beyond it.
TEST(Plan, DpoBuffersAreCounted) {
  const std::string dir = testing::fixture_dir("tiny-qwen3");
  const ModelConfig cfg = load_config(dir);
  const ParamTable table(cfg, 1);
  HostUnits w = make_host_units(table);
  load_hf_weights(dir, table, w);
  int64_t allocated[2] = {0, 0}, planned[2] = {0, 0};
  for (Objective o : {Objective::kSft, Objective::kDpo}) {
    TrainConfig c;
    c.model.device = "cpu";
    c.data.micro_batch = 2;
    c.data.seq_len = 24;
    c.data.objective = o;
    const std::unique_ptr<Trainer> t = make_trainer(cfg, host_units_reader(w), c, c.data.seq_len, nullptr, 0);
    const int k = o == Objective::kDpo;
    allocated[k] = t->ops().runtime().memory_stats().allocated;
    planned[k] = t->plan().total();
  }
  EXPECT_EQ(allocated[1] - allocated[0], 2 * 4 * 2 * 24 + 4);
  EXPECT_EQ(planned[1] - planned[0], allocated[1] - allocated[0]);
}

// The pool's rule (parallel/store_pool.h): the smallest free buffer that holds a request, and
// a buffer keeps its size when it comes back, so a smaller request does not shrink it for the
// larger ones after it.
TEST(Plan, PoolTakesTheSmallestFreeBufferAndKeepsItsSize) {
  PoolSizes pool;
  EXPECT_TRUE(pool.take(100).added);
  const PoolSizes::Taken small = pool.take(40);
  EXPECT_TRUE(small.added);
  pool.give(0);
  pool.give(small.buffer);
  EXPECT_EQ(pool.take(30).buffer, small.buffer) << "the smallest that holds it";
  const PoolSizes::Taken sixty = pool.take(60);
  EXPECT_EQ(sixty.buffer, 0);
  EXPECT_FALSE(sixty.added);
  pool.give(sixty.buffer);
  const PoolSizes::Taken again = pool.take(100);
  EXPECT_EQ(again.buffer, 0) << "the buffer of 100 held 60 and is still 100";
  EXPECT_FALSE(again.added);
  EXPECT_EQ(pool.total(), 140);
}

// The same on CPU ranks (threads, each its own backend and counters): the most each rank
// held at once is the plan's total for its rank, byte for byte, in every mode, on either
// wire, with the store's pooled buffers (gathered units, full-unit gradients, wire copies)
// replayed as the store takes them (parallel/store_pool.h); with two micro-batches, and
// with the sync deferred, too. Tied (Qwen3) and untied (Llama 3) fixtures.
struct RanksCase {
  int ranks = 2;
  ParallelMode mode = ParallelMode::kDdp;
  DType wire = DType::kF32;
  int64_t micro_batches = 1;
  bool defer_sync = false;
  Recompute recompute = Recompute::kNone;
  int64_t expert_parallel = 1;  // --expert-parallel
};

// `dir`: a model folder (a fixture's, or one a test wrote).
void expect_ranks_allocate_the_plan(const std::string& dir, const RanksCase& k) {
  const std::string fixture = dir.substr(dir.find_last_of('/') + 1);
  const ModelConfig cfg = load_config(dir);
  const ParamTable table(cfg, 1);
  HostUnits w = make_host_units(table);
  load_hf_weights(dir, table, w);
  std::vector<int64_t> peak(static_cast<size_t>(k.ranks)), planned(static_cast<size_t>(k.ranks));
  // One rank: the single process (no comm); more: CPU ranks.
  auto rank_step = [&](Comm* comm) {
    const size_t rank = comm ? static_cast<size_t>(comm->rank()) : 0;
    TrainConfig c;
    c.model.device = "cpu";
    c.parallel.mode = k.mode;
    c.parallel.reduce_dtype = k.wire;
    c.parallel.fsdp_defer_sync = k.defer_sync;
    c.data.micro_batch = 2;
    c.data.seq_len = 24;
    c.data.grad_accum = k.micro_batches;
    c.parallel.recompute = k.recompute;
    c.parallel.expert_parallel = k.expert_parallel;
    c.steps = 3;
    // Expert parallel: the rank's table reads the whole model's weights by name.
    const ParamTable mine(cfg, k.ranks, ExpertLayout::where_valid(cfg, k.expert_parallel, static_cast<int>(rank), k.ranks));
    const UnitReader reader = k.expert_parallel > 1 ? host_units_reader(w, table, mine) : host_units_reader(w);
    const std::unique_ptr<Trainer> t = make_trainer(cfg, reader, c, c.data.seq_len, comm, 0);
    std::vector<TokenBatch> micro(static_cast<size_t>(k.micro_batches));
    for (size_t m = 0; m < micro.size(); ++m)
      for (int64_t i = 0; i < 2 * 24; ++i)
        micro[m].ids.push_back((i * 7 + 3 + static_cast<int64_t>(rank + 5 * m)) % cfg.vocab_size);
    for (int i = 0; i < 3; ++i) t->step(micro);
    peak[rank] = t->ops().runtime().memory_stats().peak;
    planned[rank] = t->plan().total();
  };
  std::vector<std::string> errors(1);
  if (k.ranks == 1)
    rank_step(nullptr);
  else
    errors = testing::run_comm_ranks(k.ranks, [&](Comm& comm) { rank_step(&comm); });
  for (size_t r = 0; r < peak.size(); ++r) {
    EXPECT_EQ(errors[r], "");
    EXPECT_EQ(peak[r], planned[r]) << fixture << " " << parallel_mode_name(k.mode) << " on " << k.ranks
                                   << " ranks, wire " << dtype_name(k.wire) << ", " << k.micro_batches
                                   << " micro-batches" << (k.defer_sync ? ", sync deferred" : "") << ", recompute "
                                   << recompute_name(k.recompute) << ", expert parallel " << k.expert_parallel
                                   << ", rank " << r;
  }
}

TEST(Plan, TrainingStepOnRanksAllocatesWhatThePlanCounts) {
  for (const char* fixture : {"tiny-qwen3", "tiny-llama3"})
    for (int ranks : {2, 4})
      for (ParallelMode mode : {ParallelMode::kDdp, ParallelMode::kZero2, ParallelMode::kFsdp})
        for (DType wire : {DType::kF32, DType::kBF16}) {
          const std::string dir = testing::fixture_dir(fixture);
          expect_ranks_allocate_the_plan(dir, {ranks, mode, wire, 1, false});
          if (ranks == 2) expect_ranks_allocate_the_plan(dir, {ranks, mode, wire, 2, false});
          if (ranks == 2 && mode != ParallelMode::kDdp)
            expect_ranks_allocate_the_plan(dir, {ranks, mode, wire, 2, true});
        }
}

// The workspace's block linears (the FP8 operands' copies): a dense MLP's only where the model
// has a dense layer; the router's and experts' GEMMs run in bf16 under --fp8.
TEST(Plan, MoeWorkspaceLinearsAreTheFp8Ones) {
  ModelConfig m = preset_config("qwen3-30b-a3b");
  ASSERT_FALSE(m.has_dense_mlp());
  EXPECT_EQ(workspace_shape(m, 1, 2048, 1, Fp8Recipe::kTensorwise).linears.size(), 2u) << "qkv and o";
  m.moe.mlp_only_layers = {0};
  EXPECT_EQ(workspace_shape(m, 1, 2048, 1, Fp8Recipe::kTensorwise).linears.size(), 4u) << "and the dense MLP's";
}

// The same for Qwen3-MoE, whose sparse layers hold the router and experts in their units and
// the routing's, sort's and experts' buffers in the activation table: dense layers among
// sparse ones (mlp_only_layers; decoder_sparse_step 2), every mode and recomputation, one
// process and two ranks. No buffer's size follows the per-expert counts (each token takes
// exactly K rows), so the routing of the data changes no byte.
TEST(Plan, MoeTrainingStepOnRanksAllocatesWhatThePlanCounts) {
  const std::string only = testing::tiny_moe_dir("moe-mlp-only", {{"mlp_only_layers", {1}}});
  const std::string step2 = testing::tiny_moe_dir("moe-step-2", {{"decoder_sparse_step", 2}});
  for (const std::string& dir : {only, step2})
    for (int ranks : {1, 2})
      for (ParallelMode mode : {ParallelMode::kDdp, ParallelMode::kZero2, ParallelMode::kFsdp})
        for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull})
          expect_ranks_allocate_the_plan(dir, {ranks, mode, DType::kF32, 1, false, r});
}

// Expert parallel (--expert-parallel N): each rank's units hold 1/N of the experts (an experts
// unit per sparse layer, held whole in every mode), the rest of the model as the mode lays it
// over all ranks, and the exchange's buffers reserved at the planned rows (model/
// expert_parallel.h). On these models (4 experts, top 2) a rank can receive at most twice the
// balanced rows with N = 2, and with N = 4 (one expert a rank) as well, so the planned rows
// (kExpertRowsMargin 2) hold any routing and the peak is the plan's whatever the data routes.
TEST(Plan, ExpertParallelStepOnRanksAllocatesWhatThePlanCounts) {
  const std::string only = testing::tiny_moe_dir("moe-ep-mlp-only", {{"mlp_only_layers", {1}}});
  const std::string step2 = testing::tiny_moe_dir("moe-ep-step-2", {{"decoder_sparse_step", 2}});
  for (const std::string& dir : {only, step2})
    for (auto [ranks, experts] : {std::pair{2, 2}, {4, 2}, {4, 4}})
      for (ParallelMode mode : {ParallelMode::kDdp, ParallelMode::kZero2, ParallelMode::kFsdp}) {
        RanksCase k{ranks, mode, DType::kF32, 1, false, Recompute::kNone, experts};
        expect_ranks_allocate_the_plan(dir, k);
        if (dir != only) continue;
        k.micro_batches = 2;  // the replicas' all-reduce on the last micro-batch
        k.wire = DType::kBF16;
        k.recompute = Recompute::kFull;  // the exchange run again before the backward
        expect_ranks_allocate_the_plan(dir, k);
      }
}

// The planned rows (model/expert_parallel.h) in closed form: n K at balance on each rank, so
// kExpertRowsMargin n K, at most N n min(K, E / N); the chunk n K / N, at most n min(K, E / N).
TEST(Plan, ExpertRowsAreTheBalancedCountWithTheMargin) {
  const ModelConfig m = preset_config("qwen3-30b-a3b");  // 128 experts, top 8
  const ExpertRows r8 = planned_expert_rows(m, 2048, 8);
  EXPECT_EQ(r8.local, 2 * 2048 * 8);
  EXPECT_EQ(r8.chunk, 2 * 2048 * 8 / 8);
  ModelConfig tiny = m;
  tiny.moe.num_experts = 4;
  tiny.moe.top_k = 2;
  const ExpertRows r4 = planned_expert_rows(tiny, 100, 4);  // one expert a rank: a token sends it 1 row
  EXPECT_EQ(r4.local, 4 * 100);
  EXPECT_EQ(r4.chunk, 100);
  const int64_t C = m.hidden_size, Im = m.moe.intermediate, R = r8.local;
  // Bytes (bf16): per layer the 17 offsets (a buffer of at least 256 bytes), x and gate/up; send
  // and receive; act and d_act, y and d_rows, d_gate_up.
  ASSERT_EQ(m.sparse_layers(), 48);
  EXPECT_EQ(expert_parallel_bytes(m, 8, r8, DType::kBF16),
            48 * (256 + 2 * R * C + 2 * R * 2 * Im) + 2 * 2 * 8 * r8.chunk * C + 2 * 2 * R * Im + 2 * 2 * R * C +
                2 * R * 2 * Im);
}

// anvil plan of Qwen3-30B-A3B on 8 GPUs: a row for each expert-parallel degree that divides the
// 128 experts and the GPUs (1, 2, 4, 8) in each mode, in that order; N < 8 with N > 1 marked
// refused (NCCL has no groups yet). A row's parameters per GPU in closed form: the experts of a
// sparse layer are 128 x 3 x 768 x 2,048 elements (X a expert, 4,718,592: no padding at any
// degree), of which a GPU holds E/N whole, 4 bytes each in every mode, and the rest of the model
// as the mode holds it over the 8 GPUs, the same at every degree N > 1. --num-layers 8 plans the
// shallower copy (5,607,297,024 parameters).
TEST(Plan, PlanOfQwen3MoeGivesEveryExpertParallelChoice) {
  const auto r = testing::run_anvil({"plan", "--preset", "qwen3-30b-a3b", "--nproc", "8", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const Json j = json_parse(r.out, "plan --json");
  const ModelConfig m = preset_config("qwen3-30b-a3b");
  const int64_t E = 128, X = 3 * 768 * 2048, Ls = 48, P = m.num_parameters(), rest = P - Ls * E * X;
  const Json& rows = j.at("choices");
  ASSERT_EQ(rows.size(), 12u);
  std::map<std::pair<int64_t, std::string>, const Json*> at;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Json& row = rows[i];
    const int64_t N = int64_t{1} << (i / 3);
    const std::string mode = parallel_mode_name(kRunModes[i % 3]);
    EXPECT_EQ(row.at("expert_parallel").get<int64_t>(), N) << i;
    EXPECT_EQ(row.at("mode").get<std::string>(), mode) << i;
    EXPECT_EQ(row.at("refused").get<std::string>().empty(), N == 1 || N == 8) << i;
    EXPECT_GT(row.at("tokens_per_s").get<double>(), 0) << i;
    EXPECT_EQ(row.at("exchange").get<int64_t>(),
              N == 1 ? 0 : expert_parallel_bytes(m, static_cast<int>(N), planned_expert_rows(m, 2048, static_cast<int>(N)),
                                                 DType::kBF16)) << i;
    int64_t sum = 0;
    for (const char* part : {"params", "grads", "optimizer", "weights", "activations", "workspace", "exchange"})
      sum += row.at(part).get<int64_t>();
    EXPECT_EQ(row.at("total").get<int64_t>(), sum) << i;
    at[{N, mode}] = &row;
  }
  auto params = [&](int64_t N, const char* mode) { return at.at({N, mode})->at("params").get<int64_t>(); };
  for (const char* mode : {"ddp", "zero2", "fsdp"})
    for (int64_t N : {2, 4})  // halving the experts a GPU holds: 4 bytes each
      EXPECT_EQ(params(N, mode) - params(2 * N, mode), 4 * Ls * (E / N - E / (2 * N)) * X) << mode << " " << N;
  const int64_t units_padding = 4 * 512 * (m.num_layers + 3);  // each unit padded to 8 x 64 elements at most
  for (int64_t N : {2, 4, 8}) {
    const int64_t experts = 4 * Ls * (E / N) * X;  // 1/N of the experts' masters
    EXPECT_GE(params(N, "ddp"), 4 * rest + experts) << N;
    EXPECT_LT(params(N, "ddp"), 4 * rest + experts + units_padding) << N;
    EXPECT_GE(params(N, "fsdp"), 4 * rest / 8 + experts) << N;
    EXPECT_LT(params(N, "fsdp"), (4 * rest + units_padding) / 8 + experts) << N;
  }
  const auto text = testing::run_anvil({"plan", "--preset", "qwen3-30b-a3b", "--nproc", "8"});
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("   N mode   parameters  gradients"), std::string::npos) << text.out;
  for (int64_t N : {1, 2, 4, 8})
    for (const char* mode : {"ddp", "zero2", "fsdp"}) {
      char row[32];
      std::snprintf(row, sizeof row, "\n%4lld %-6s ", static_cast<long long>(N), mode);
      EXPECT_NE(text.out.find(row), std::string::npos) << row << " in\n" << text.out;
    }
  EXPECT_NE(text.out.find("fastest that fits and runs: --expert-parallel 8 --mode "), std::string::npos) << text.out;
  const auto short8 = testing::run_anvil({"plan", "--preset", "qwen3-30b-a3b", "--nproc", "8", "--num-layers", "8"});
  ASSERT_EQ(short8.exit_code, 0) << short8.out;
  EXPECT_NE(short8.out.find("5607297024 parameters"), std::string::npos) << short8.out;
  auto refused = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"plan", "--preset", "qwen3-30b-a3b", "--nproc", "8"};
    args.insert(args.end(), extra.begin(), extra.end());
    return testing::run_anvil(args);
  };
  for (auto [flags, says] : {std::pair<std::vector<std::string>, std::string>{{"--expert-parallel", "3"},
                                                                              "must divide the model's 128 experts"},
                             {{"--expert-parallel", "16"}, "must divide the GPUs (--nproc 8)"}}) {
    const auto bad = refused(flags);
    EXPECT_EQ(bad.exit_code, 2) << bad.out;
    EXPECT_NE(bad.out.find(says), std::string::npos) << bad.out;
  }
  const auto dense = testing::run_anvil({"plan", "--preset", "qwen3-1.7b", "--nproc", "2", "--expert-parallel", "2"});
  EXPECT_EQ(dense.exit_code, 2) << dense.out;
  EXPECT_NE(dense.out.find("has no mixture-of-experts layers"), std::string::npos) << dense.out;
}

TEST(Plan, AdviceFollowsTheRule) {
  testing::PlanCase in(preset_config("qwen3-1.7b"));
  PlanAdvice a = advise(in.run(), kH200Bytes);  // no recomputation
  EXPECT_EQ(a.mode, ParallelMode::kDdp);
  // Qwen3-8B on one H200: both modes hold the same (split masters, no copies) and fit.
  in.model = preset_config("qwen3-8b");
  in.parallel.recompute = Recompute::kAuto;
  a = advise(in.run(), kH200Bytes);
  EXPECT_EQ(a.mode, ParallelMode::kDdp);
  EXPECT_EQ(a.ddp.total(), a.fsdp.total());
  // On two it still fits ddp (split masters and bf16 gradients on every rank; the wire
  // copies add little). Qwen3-14B on two: ddp (a whole replica) does not fit; zero2 (whole
  // weights, the rest sharded) does with full recomputation, and without a prediction it
  // comes before fsdp (shards, gathered per unit), which fits even without; with a tighter
  // GPU only fsdp fits, and auto recomputes.
  in.world = 2;
  in.parallel.grad_dtype = GradDType::kBF16;
  a = advise(in.run(), kH200Bytes);
  EXPECT_EQ(a.mode, ParallelMode::kDdp) << plan_table(a, in.run(), kH200Bytes);
  in.model = preset_config("qwen3-14b");
  a = advise(in.run(), kH200Bytes);
  EXPECT_FALSE(plan_fits(a.ddp, kH200Bytes));
  EXPECT_EQ(a.mode, ParallelMode::kZero2) << plan_table(a, in.run(), kH200Bytes);
  EXPECT_EQ(a.zero2.recompute, Recompute::kFull);
  EXPECT_EQ(a.fsdp.recompute, Recompute::kNone);
  // Auto takes the fastest that fits: none, then selective, then full.
  a = advise(in.run(), a.fsdp.total());
  EXPECT_EQ(a.mode, ParallelMode::kFsdp);
  EXPECT_EQ(a.fsdp.recompute, Recompute::kSelective);
  testing::PlanCase full = in;
  full.parallel.mode = ParallelMode::kFsdp;
  full.parallel.recompute = Recompute::kFull;
  const int64_t tight = plan_memory(full.run()).total() + kPlanReserve;
  a = advise(in.run(), tight);
  EXPECT_TRUE(a.fits);
  EXPECT_EQ(a.mode, ParallelMode::kFsdp);
  EXPECT_EQ(a.fsdp.recompute, Recompute::kFull);
  EXPECT_FALSE(advise(in.run(), tight - 1).fits) << "nothing fits a byte less";
  // Qwen3-32B on one GPU: nothing fits, and the advice says how many GPUs would.
  in.model = preset_config("qwen3-32b");
  in.world = 1;
  a = advise(in.run(), kH200Bytes);
  EXPECT_FALSE(a.fits);
  EXPECT_NE(a.message.find("GPUs"), std::string::npos) << a.message;
  in.world = 8;
  EXPECT_EQ(advise(in.run(), kH200Bytes).mode, ParallelMode::kZero2);
}

// The context-parallel rule, one for anvil train and anvil plan: P ranks, every rank of the
// run, dividing the key/value heads and the sequence; the refusal names the fix.
TEST(Plan, ContextParallelRule) {
  const ModelConfig m = preset_config("qwen3-1.7b");  // 8 key/value heads
  EXPECT_NO_THROW(check_context_parallel(1, 3, m, 2047, "--nproc"));
  EXPECT_NO_THROW(check_context_parallel(2, 2, m, 2048, "--nproc"));
  auto refusal = [&](int64_t P, int world, int64_t seq_len) {
    try {
      check_context_parallel(P, world, m, seq_len, "--nproc");
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal(3, 3, 2048).find("the model's 8 key/value heads do not split evenly over 3 ranks"),
            std::string::npos) << refusal(3, 3, 2048);
  EXPECT_NE(refusal(2, 2, 2047).find("sequence length 2047 does not split into 2 equal slices"), std::string::npos)
      << refusal(2, 2, 2047);
  EXPECT_NE(refusal(4, 2, 2048).find("--context-parallel 4 on 2 ranks"), std::string::npos) << refusal(4, 2, 2048);
  EXPECT_NE(refusal(4, 2, 2048).find("or --nproc 4"), std::string::npos) << refusal(4, 2, 2048);
  EXPECT_NE(refusal(0, 1, 2048).find("must be at least 1"), std::string::npos) << refusal(0, 1, 2048);
}

TEST(Plan, Command) {
  auto r = testing::run_anvil({"plan", "--preset", "qwen3-14b", "--nproc", "2", "--seq-len", "2048", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  Json j = json_parse(r.out, "plan");
  EXPECT_EQ(j["advice"], "fsdp");
  EXPECT_GT(j["ddp"]["total"].get<int64_t>(), j["fsdp"]["total"].get<int64_t>());
  // One micro-batch: bf16 gradients by default, on any number of GPUs; accumulation keeps fp32.
  auto total = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"plan", "--preset", "qwen3-1.7b", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = testing::run_anvil(args);
    EXPECT_EQ(p.exit_code, 0) << p.out;
    return p.exit_code == 0 ? json_parse(p.out, "plan")["ddp"]["grads"].get<int64_t>() : 0;
  };
  const int64_t g_auto = total({}), g32 = total({"--grad-dtype", "fp32"});
  EXPECT_LT(g_auto, g32 * 6 / 10);
  EXPECT_EQ(total({"--grad-dtype", "bf16"}), g_auto);
  EXPECT_EQ(total({"--grad-accum", "2"}), g32);
  EXPECT_EQ(total({"--nproc", "2", "--grad-dtype", "bf16"}), total({"--nproc", "2"}));
  auto bad = testing::run_anvil({"plan", "--preset", "qwen3-1.7b", "--grad-accum", "2", "--grad-dtype", "bf16"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("--grad-dtype bf16 needs --grad-accum 1"), std::string::npos) << bad.out;
  auto t = testing::run_anvil({"plan", "--preset", "qwen3-1.7b"});
  ASSERT_EQ(t.exit_code, 0) << t.out;
  EXPECT_NE(t.out.find("activations"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("advice: --mode ddp --recompute none ("), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("sequence 2048 x micro-batch 1,"), std::string::npos) << "no data: 2048 tokens\n" << t.out;
  auto sel = testing::run_anvil({"plan", "--preset", "qwen3-1.7b", "--recompute", "selective", "--json"});
  ASSERT_EQ(sel.exit_code, 0) << sel.out;
  EXPECT_EQ(json_parse(sel.out, "plan")["ddp"]["recompute"], "selective");
  EXPECT_EQ(testing::run_anvil({"plan"}).exit_code, 2);
  EXPECT_EQ(testing::run_anvil({"plan", "--preset", "qwen3-1.7b", "--recompute", "some"}).exit_code, 2);
}

}  // namespace
}  // namespace anvil
