// The step model (plan/step_model.h, step_ops.h, op_costs.h): the op list against the ops a
// real step issues on the CPU backend, the collectives' bytes against closed forms, the
// overlap rule's limits, the op-cost table's fit and scaling, and `anvil plan`'s lines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "io/hub.h"
#include "model/params.h"
#include "plan/step_model.h"
#include "plan_case.h"
#include "bench_step_calls.h"
#include "testing.h"
#include "tiny_moe.h"

namespace anvil {
namespace {

const GpuSpec& h200() { return *find_gpu_spec("NVIDIA H200"); }

std::map<std::string, double> program_ops(const std::vector<StepItem>& program) {
  std::map<std::string, double> calls;
  for (const StepItem& it : program)
    if (it.kind == StepItem::Kind::kOp) calls[it.op.label()] += 1;
  return calls;
}

// One case of the op list's test: anvil bench step on the CPU with these flags.
struct RecordedCase {
  std::string model;  // "tiny" (the preset), a fixture's name, or a model folder's path
  ParallelMode mode;
  int world;
  int64_t micro_batch, grad_accum;
  Recompute recompute;
  DType reduce_dtype;
  int64_t mlp_tile = kMlpTileAuto;  // untiled at 32 tokens
  Fp8Recipe fp8 = Fp8Recipe::kOff;
};

// The model folder of a case that is not the preset.
std::string model_dir(const std::string& model) {
  return model.find('/') != std::string::npos ? model : testing::fixture_dir(model);
}

testing::PlanCase input_of(const RecordedCase& k) {
  testing::PlanCase in(k.model == "tiny" ? preset_config("tiny") : load_config(model_dir(k.model)));
  in.parallel.mode = k.mode;
  in.world = k.world;
  in.data.seq_len = 32;
  in.data.micro_batch = k.micro_batch;
  in.data.grad_accum = k.grad_accum;
  in.parallel.recompute = k.recompute;
  in.compute_dtype = DType::kF32;  // the CPU backend
  in.parallel.reduce_dtype = k.reduce_dtype;
  in.parallel.mlp_tile = k.mlp_tile;
  in.parallel.fp8 = k.fp8;
  return in;
}

// The ops one step issued, by label, from anvil bench step --op-times on the CPU (rank 0's line).
std::map<std::string, double> recorded_ops(const RecordedCase& k) {
  std::vector<std::string> args = {"bench", "step", "--device", "cpu", "--seq-len", "32", "--steps", "2", "--warmup",
                                   "1", "--op-times", "--no-overlap-optimizer", "--micro-batch",
                                   std::to_string(k.micro_batch), "--grad-accum", std::to_string(k.grad_accum),
                                   "--mode", parallel_mode_name(k.mode), "--recompute", recompute_name(k.recompute),
                                   "--reduce-dtype", k.reduce_dtype == DType::kBF16 ? "bf16" : "fp32"};
  if (k.model == "tiny") args.insert(args.end(), {"--preset", "tiny"});
  else args.insert(args.end(), {"--model", model_dir(k.model)});
  if (k.world > 1) args.insert(args.end(), {"--nproc-per-node", std::to_string(k.world)});
  if (k.mlp_tile != kMlpTileAuto) args.insert(args.end(), {"--mlp-tile", std::to_string(k.mlp_tile)});
  if (k.fp8 != Fp8Recipe::kOff) args.insert(args.end(), {"--fp8", fp8_recipe_name(k.fp8)});
  return testing::bench_step_op_calls(testing::run_anvil(args));
}

// `t` with FP8 linear rates (twice the bf16 op's best, the combined backward at dw's; of any
// size, since the bf16 linears are keyed by MFLOP and the FP8 ones by rows) and a cast rate
// (3 TB/s), where it has none.
OpCostTable with_fp8_rates(OpCostTable t) {
  if (t.why_not_fp8(h200()).empty()) return t;
  if (std::none_of(t.rates.begin(), t.rates.end(), [](const OpRate& r) { return r.op == kFp8CastOp; }))
    t.rates.push_back({kFp8CastOp, 0, 3.0, false});
  std::map<std::string, double> best;
  for (const OpRate& r : t.rates)
    if (r.op.rfind("linear_", 0) == 0) best[r.op] = std::max(best[r.op], r.rate);
  for (const auto& [op, rate] : best) {
    const std::string kind = op.substr(std::strlen("linear_"));
    t.rates.push_back({"linear_fp8_" + kind, 0, 2 * rate, false});
    if (kind == "backward_weight") t.rates.push_back({"linear_fp8_backward", 0, 2 * rate, false});
  }
  return t;
}

// The step program of case k against the ops anvil bench step recorded, label for label, and
// its compute priced as the recorded calls.
void expect_op_list_of_the_cpu_step(const RecordedCase& k, const OpCostTable& table) {
  SCOPED_TRACE(k.model + " " + parallel_mode_name(k.mode) + " x" + std::to_string(k.world) + " accum " +
               std::to_string(k.grad_accum) + " " + recompute_name(k.recompute) + " tile " +
               std::to_string(k.mlp_tile) + " fp8 " + fp8_recipe_name(k.fp8));
  const std::vector<StepItem> program = step_program(input_of(k).run());
  const std::map<std::string, double> recorded = recorded_ops(k);
  EXPECT_EQ(program_ops(program), recorded);
  // The step's compute is the table's price of the ops the model issued, the recorded calls
  // of each label at the mean price of the model's (an FP8 linear's casts differ between
  // MLP tiles of one shape).
  std::map<std::string, std::pair<double, double>> by_label;  // seconds, calls
  for (const StepItem& it : program)
    if (it.kind == StepItem::Kind::kOp) {
      by_label[it.op.label()].first += table.seconds(it.op, h200());
      by_label[it.op.label()].second += 1;
    }
  double priced = 0;
  for (const auto& [label, calls] : recorded) {
    ASSERT_TRUE(by_label.count(label)) << label << " ran but the step model does not issue it";
    priced += calls * by_label.at(label).first / by_label.at(label).second;
  }
  EXPECT_NEAR(compute_seconds(program, table, h200()), priced, 1e-12 * priced);
}

TEST(StepModel, OpListIsWhatTheCpuStepIssues) {
  const RecordedCase cases[] = {
      {"tiny", ParallelMode::kDdp, 1, 1, 1, Recompute::kNone, DType::kF32},
      {"tiny", ParallelMode::kDdp, 1, 2, 2, Recompute::kSelective, DType::kF32},
      {"tiny", ParallelMode::kDdp, 1, 1, 1, Recompute::kFull, DType::kF32},
      {"tiny-qwen3-untied", ParallelMode::kDdp, 1, 1, 1, Recompute::kNone, DType::kF32},
      {"tiny-qwen2", ParallelMode::kDdp, 1, 1, 1, Recompute::kNone, DType::kF32},
      {"tiny", ParallelMode::kDdp, 2, 1, 2, Recompute::kNone, DType::kF32},
      {"tiny", ParallelMode::kDdp, 2, 1, 1, Recompute::kNone, DType::kBF16},
      {"tiny", ParallelMode::kFsdp, 2, 1, 2, Recompute::kSelective, DType::kF32},
      {"tiny-qwen3-untied", ParallelMode::kFsdp, 2, 1, 1, Recompute::kNone, DType::kBF16},
      {"tiny", ParallelMode::kZero2, 2, 1, 2, Recompute::kSelective, DType::kF32},
      {"tiny-qwen3-untied", ParallelMode::kZero2, 2, 1, 1, Recompute::kNone, DType::kBF16},
      {"tiny", ParallelMode::kDdp, 1, 1, 1, Recompute::kNone, DType::kF32, 12},  // MLP tiles of 12, 12, 8
      {"tiny", ParallelMode::kFsdp, 2, 1, 1, Recompute::kFull, DType::kF32, 12},
      // FP8 block linears: dw and dx of one layer in one op (BlockLinears::backward)
      {"tiny", ParallelMode::kDdp, 1, 1, 1, Recompute::kNone, DType::kF32, kMlpTileAuto, Fp8Recipe::kTensorwise},
      {"tiny", ParallelMode::kFsdp, 2, 1, 1, Recompute::kFull, DType::kF32, 12, Fp8Recipe::kTensorwise},
  };
  const OpCostTable table = with_fp8_rates(OpCostTable::builtin());
  for (const RecordedCase& k : cases) expect_op_list_of_the_cpu_step(k, table);
}

// Qwen3-MoE: a sparse layer's router, routing, sort, gather, experts and combine and their
// backward, beside dense layers (mlp_only_layers, decoder_sparse_step 2; the tiled MLP of a
// dense layer), the auxiliary loss after the forward, in every mode and recomputation.
TEST(StepModel, MoeOpListIsWhatTheCpuStepIssues) {
  const std::string only = testing::tiny_moe_dir("step-mlp-only", {{"mlp_only_layers", {1}}});
  const std::string step2 = testing::tiny_moe_dir("step-2", {{"decoder_sparse_step", 2}});
  const RecordedCase cases[] = {
      {only, ParallelMode::kDdp, 1, 1, 1, Recompute::kNone, DType::kF32},
      {only, ParallelMode::kDdp, 1, 2, 2, Recompute::kSelective, DType::kF32},
      {only, ParallelMode::kDdp, 1, 1, 1, Recompute::kFull, DType::kF32},
      {step2, ParallelMode::kDdp, 2, 1, 2, Recompute::kNone, DType::kF32},
      {step2, ParallelMode::kFsdp, 2, 1, 1, Recompute::kFull, DType::kBF16, 12},
      {only, ParallelMode::kZero2, 2, 1, 2, Recompute::kSelective, DType::kF32},
      {only, ParallelMode::kDdp, 1, 1, 1, Recompute::kNone, DType::kF32, kMlpTileAuto, Fp8Recipe::kTensorwise},
  };
  const OpCostTable table = with_fp8_rates(OpCostTable::builtin());
  for (const RecordedCase& k : cases) expect_op_list_of_the_cpu_step(k, table);
}

testing::PlanCase big_input(const std::string& preset, ParallelMode mode, int world) {
  testing::PlanCase in(preset_config(preset));
  in.parallel.mode = mode;
  in.world = world;
  in.parallel.grad_dtype = GradDType::kBF16;
  return in;
}

// With --fp8 the block linears are the FP8 ops, the same products (FLOPs), priced by the
// table's FP8 rates; a table without them, or a GPU without FP8 tensor cores, says so.
// Four sequences (8,192 rows): at one sequence of 2,048 the casts cost about what the FP8
// GEMMs save (the 1.7B's measured steps: 54.94 ms FP8, 55.00 ms bf16; bench/NOTES.md).
TEST(StepModel, Fp8LinearsArePricedByTheirOwnRates) {
  testing::PlanCase in = big_input("qwen3-1.7b", ParallelMode::kDdp, 1);
  in.data.micro_batch = 4;
  const std::vector<StepItem> bf16 = step_program(in.run());
  in.parallel.fp8 = Fp8Recipe::kTensorwise;
  const std::vector<StepItem> fp8 = step_program(in.run());
  auto flops = [](const std::vector<StepItem>& p, const std::string& prefix) {
    double f = 0;
    for (const StepItem& it : p)
      if (it.kind == StepItem::Kind::kOp && it.op.op.rfind(prefix, 0) == 0) f += it.op.flops;
    return f;
  };
  EXPECT_GT(flops(bf16, "linear_"), 0);
  EXPECT_EQ(flops(fp8, "linear_fp8_"), flops(bf16, "linear_"));
  EXPECT_EQ(flops(fp8, "linear_") , flops(fp8, "linear_fp8_")) << "every block linear is an FP8 op";
  OpCostTable t = OpCostTable::builtin();
  t.rates.erase(std::remove_if(t.rates.begin(), t.rates.end(),
                               [](const OpRate& r) { return r.op.rfind("linear_fp8_", 0) == 0; }),
                t.rates.end());
  EXPECT_NE(t.why_not_fp8(h200()).find("has no FP8 linear rates"), std::string::npos) << t.why_not_fp8(h200());
  t = with_fp8_rates(t);
  EXPECT_EQ(t.why_not_fp8(h200()), "");
  EXPECT_EQ(t.why_not_fp8(*find_gpu_spec("NVIDIA A100-SXM4-80GB")), "the A100 has no FP8 tensor cores");
  EXPECT_LT(compute_seconds(fp8, t, h200()), compute_seconds(bf16, t, h200()));
}

// `t` without the rates of the ops named `op` (or starting with it, where prefix), with these in their place.
OpCostTable replaced(OpCostTable t, const std::string& op, std::vector<OpRate> rates, bool prefix = false) {
  t.rates.erase(std::remove_if(t.rates.begin(), t.rates.end(),
                               [&](const OpRate& r) { return prefix ? r.op.rfind(op, 0) == 0 : r.op == op; }),
                t.rates.end());
  t.rates.insert(t.rates.end(), rates.begin(), rates.end());
  t.per_op_us = 0;
  return t;
}

const OpCall& first_op(const std::vector<StepItem>& program, const std::string& label) {
  for (const StepItem& it : program)
    if (it.kind == StepItem::Kind::kOp && it.op.label() == label) return it.op;
  ADD_FAILURE() << "no " << label << " in the step";
  return program.front().op;
}

// A rate between two measured sizes is interpolated in log size (past the ends, the end's):
// a GEMM of 2,048 MFLOP between rates measured at 1,024 and 4,096 runs at their mean.
TEST(StepModel, RatesAreInterpolatedBetweenMeasuredSizes) {
  const OpCostTable t = replaced(OpCostTable::builtin(), "linear_forward",
                                 {{"linear_forward", 1024, 500, true}, {"linear_forward", 4096, 700, true}});
  for (const auto& [size, rate] : {std::pair{512, 500.0}, {1024, 500.0}, {2048, 600.0}, {4096, 700.0}, {8192, 700.0}}) {
    const OpCall gemm{"linear_forward", "x", size, 1e12, 0};
    EXPECT_NEAR(t.seconds(gemm, h200()), 1e12 / (rate * 1e12), 1e-12) << size << " MFLOP";
  }
}

// A bf16 GEMM is keyed by its MFLOP per call, whatever its rows (the 1.7B's GEMMs at 1,024
// rows ran at 504 TFLOP/s at 8.6 GFLOP and 703 at 51.5 on one H200, bench/NOTES.md): the 0.6B's
// 1,024-row o_proj (4,295 MFLOP) is not priced at the rate of the 1.7B's 1,024-row qkv (17,180);
// the fused cross-entropy likewise; an FP8 linear keeps its rows.
TEST(StepModel, GemmsAreKeyedByTheirFlops) {
  for (const auto& [preset, o_mflop, ce_mflop] :
       {std::tuple{"qwen3-0.6b", 4295, 955899}, std::tuple{"qwen3-1.7b", 8590, 1911797}}) {
    testing::PlanCase in = big_input(preset, ParallelMode::kDdp, 1);
    in.data.seq_len = 1024;
    const ModelConfig& c = in.model;
    const std::vector<StepItem> program = step_program(in.run());
    EXPECT_EQ(first_op(program, cat("linear_forward 1024x", c.hidden_size, "x", c.q_dim())).size, o_mflop) << preset;
    EXPECT_EQ(first_op(program, cat("cross_entropy_forward_backward 1024x", c.vocab_size, "x", c.hidden_size)).size,
              ce_mflop) << preset;
    in.parallel.fp8 = Fp8Recipe::kTensorwise;
    EXPECT_EQ(first_op(step_program(in.run()), cat("linear_fp8_forward 1024x", c.hidden_size, "x", c.q_dim())).size,
              1024) << preset;
  }
}

// Attention is priced by its causal FLOPs (Q K^T and P V over the causal triangle: 2 B H T^2
// head_dim forward, 2.5 times that backward) at the rate measured at its sequence length T,
// whatever the batch: 16 sequences of 2,048 at the rate of 2,048 (not of their 32,768
// tokens), one of 32,768 at that length's, 8,192 between the two.
TEST(StepModel, AttentionIsPricedByItsCausalFlopsAtItsLength) {
  OpCostTable t = replaced(OpCostTable::builtin(), "attention_forward",
                           {{"attention_forward", 2048, 400, true}, {"attention_forward", 32768, 600, true}});
  t = replaced(t, "attention_backward",
               {{"attention_backward", 2048, 280, true}, {"attention_backward", 32768, 480, true}});
  const ModelConfig c = preset_config("qwen3-1.7b");
  for (const auto& [B, T] : {std::pair<int64_t, int64_t>{4, 2048}, {16, 2048}, {1, 8192}, {1, 32768}}) {
    SCOPED_TRACE(std::to_string(B) + " x " + std::to_string(T));
    testing::PlanCase in = big_input("qwen3-1.7b", ParallelMode::kDdp, 1);
    in.data.micro_batch = B;
    in.data.seq_len = T;
    const std::vector<StepItem> program = step_program(in.run());
    const std::string shape = cat(B, "x", T, "x", c.num_heads, "/", c.num_kv_heads, "x", c.head_dim);
    const double causal = 2.0 * static_cast<double>(B * c.num_heads * T * T * c.head_dim);
    const double f = std::log(static_cast<double>(T) / 2048) / std::log(16.0);  // 0 at 2,048, 1 at 32,768
    const OpCall& fwd = first_op(program, "attention_forward " + shape);
    const OpCall& bwd = first_op(program, "attention_backward " + shape);
    EXPECT_EQ(fwd.size, T);
    EXPECT_DOUBLE_EQ(fwd.flops, causal);
    EXPECT_DOUBLE_EQ(bwd.flops, 2.5 * causal);
    EXPECT_NEAR(t.seconds(fwd, h200()), causal / ((400 + 200 * f) * 1e12), 1e-9 * t.seconds(fwd, h200()));
    EXPECT_NEAR(t.seconds(bwd, h200()), 2.5 * causal / ((280 + 200 * f) * 1e12), 1e-9 * t.seconds(bwd, h200()));
  }
}

// An FP8 linear is its GEMM's FLOPs at the op's rate plus its operands' casts' bytes at the
// cast rate of its rows: each bf16 operand read for its amax (unless the slot holds it) and
// again for its cast, written as FP8 (2 + 2 + 1 bytes an element, 3 with the amax known); the
// combined backward casts dy once into both layouts (2 + 2 + 2), x^T and w^T with their amax
// kept from the forward. The casts cost the same per token at any width, so a wider model's
// linears spend a smaller share of their time casting.
TEST(StepModel, Fp8CastsArePricedByTheirBytes) {
  OpCostTable t = replaced(OpCostTable::builtin(), "linear_fp8_",
                           {{"linear_fp8_forward", 0, 1200, true}, {"linear_fp8_backward", 0, 1000, true},
                            {"linear_fp8_backward_input", 0, 1100, true}, {"linear_fp8_backward_weight", 0, 900, true}},
                           true);
  t = replaced(t, kFp8CastOp, {{kFp8CastOp, 1024, 2.0, true}, {kFp8CastOp, 8192, 3.5, true}});
  double share[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    const std::string preset = k == 0 ? "qwen3-1.7b" : "qwen3-8b";
    SCOPED_TRACE(preset);
    testing::PlanCase in = big_input(preset, ParallelMode::kDdp, 1);
    in.parallel.fp8 = Fp8Recipe::kTensorwise;
    in.data.micro_batch = 2;  // 4,096 rows: the cast rate halfway between 1,024's and 8,192's in log rows
    const ModelConfig& c = in.model;
    const double M = 4096, C = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size),
                 Q = static_cast<double>(c.qkv_dim()), O = static_cast<double>(c.q_dim());
    const std::vector<StepItem> program = step_program(in.run());
    auto label = [&](const char* op, double n, double width) { return cat(op, " 4096x", n, "x", width); };
    const OpCall& qkv = first_op(program, label("linear_fp8_forward", Q, C));
    const OpCall& o = first_op(program, label("linear_fp8_forward", C, O));
    const OpCall& down_dx = first_op(program, label("linear_fp8_backward_input", C, I));
    const OpCall& down_dw = first_op(program, label("linear_fp8_backward_weight", C, I));
    const OpCall& gate_up = first_op(program, label("linear_fp8_backward", 2 * I, C));
    EXPECT_DOUBLE_EQ(qkv.cast_bytes, 3 * M * C + 5 * Q * C) << "x's amax from the norm";
    EXPECT_DOUBLE_EQ(o.cast_bytes, 5 * M * O + 5 * C * O) << "attention's output: no amax kept";
    EXPECT_DOUBLE_EQ(down_dx.cast_bytes, 5 * M * C + 3 * C * I);
    EXPECT_DOUBLE_EQ(down_dw.cast_bytes, 5 * M * C + 3 * M * I);
    EXPECT_DOUBLE_EQ(gate_up.cast_bytes, 6 * M * 2 * I + 3 * M * C + 3 * 2 * I * C);
    const double cast_rate = 3.0e12;  // 2.0 and 3.5 TB/s at 1,024 and 8,192 rows, 4,096 two thirds of the way
    const std::map<std::string, double> gemm_rate = {{"linear_fp8_forward", 1200},
                                                     {"linear_fp8_backward", 1000},
                                                     {"linear_fp8_backward_input", 1100},
                                                     {"linear_fp8_backward_weight", 900}};
    for (const OpCall* op : {&qkv, &o, &down_dx, &down_dw, &gate_up}) {
      const double gemm = op->flops / (gemm_rate.at(op->op) * 1e12);
      EXPECT_NEAR(t.seconds(*op, h200()), gemm + op->cast_bytes / cast_rate, 1e-9 * gemm) << op->label();
    }
    double cast_s = 0, all_s = 0;
    for (const StepItem& it : program)
      if (it.kind == StepItem::Kind::kOp && it.op.cast_bytes > 0) {
        cast_s += it.op.cast_bytes / cast_rate;
        all_s += t.seconds(it.op, h200());
      }
    share[k] = cast_s / all_s;
  }
  EXPECT_LT(share[1], 0.75 * share[0]) << "the 8B's linears cast for a smaller share of their time";
}

// ddp: every unit all-reduced once a step on the wire; fsdp: bf16 weights gathered for the
// forward (the tied embedding again as the head) and the blocks but the last for the
// backward, every unit reduce-scattered each micro-batch; zero2: fsdp's reduce-scatters, and
// every unit's bf16 weights gathered once a step.
TEST(StepModel, CommBytesAreTheClosedForms) {
  for (const char* preset : {"qwen3-1.7b", "qwen3-8b"}) {
    const ModelConfig c = preset_config(preset);
    for (int n : {1, 2, 8}) {
      SCOPED_TRACE(std::string(preset) + " x" + std::to_string(n));
      const ParamTable t(c, n);
      const int64_t P = t.total_padded(), E = t.units()[0].padded, B = t.units()[1].padded, L = c.num_layers;
      testing::PlanCase ddp = big_input(preset, ParallelMode::kDdp, n);
      const CommBytes d = comm_bytes(step_program(ddp.run()));
      EXPECT_EQ(d.all_reduce, n == 1 ? 0 : 4 * P);
      EXPECT_EQ(d.all_gather + d.reduce_scatter, 0);
      ddp.parallel.reduce_dtype = DType::kBF16;
      EXPECT_EQ(comm_bytes(step_program(ddp.run())).all_reduce, n == 1 ? 0 : 2 * P);
      testing::PlanCase fsdp = big_input(preset, ParallelMode::kFsdp, n);
      fsdp.data.grad_accum = 3;
      const CommBytes f = comm_bytes(step_program(fsdp.run()));
      const int64_t gathered = 2 * (P + (c.tie_word_embeddings ? E : 0) + (L - 1) * B);
      EXPECT_EQ(f.all_gather, n == 1 ? 0 : 3 * gathered) << "gathered again in each micro-batch";
      EXPECT_EQ(f.reduce_scatter, n == 1 ? 0 : 3 * 4 * P);
      EXPECT_EQ(f.all_reduce, 0);
      fsdp.parallel.fsdp_defer_sync = true;
      EXPECT_EQ(comm_bytes(step_program(fsdp.run())).reduce_scatter, n == 1 ? 0 : 4 * P);
      testing::PlanCase zero2 = big_input(preset, ParallelMode::kZero2, n);
      zero2.data.grad_accum = 3;
      const CommBytes z = comm_bytes(step_program(zero2.run()));
      EXPECT_EQ(z.all_gather, n == 1 ? 0 : 2 * P) << "gathered once a step, at the first forward";
      EXPECT_EQ(z.reduce_scatter, n == 1 ? 0 : 3 * 4 * P);
      EXPECT_EQ(z.all_reduce, 0);
      const double k = (n - 1.0) / n;
      EXPECT_DOUBLE_EQ(bus_bytes(d, n), 2 * k * static_cast<double>(d.all_reduce));
      EXPECT_DOUBLE_EQ(bus_bytes(f, n), k * static_cast<double>(f.all_gather + f.reduce_scatter));
    }
  }
}

TEST(StepModel, OneGpuIsItsCompute) {
  const OpCostTable table = OpCostTable::builtin();
  const testing::PlanCase in = big_input("qwen3-1.7b", ParallelMode::kDdp, 1);
  const StepPrediction p = predict_step(in.run(), table, h200(), 0);
  EXPECT_DOUBLE_EQ(p.step_s, compute_seconds(step_program(in.run()), table, h200()));
  EXPECT_EQ(p.comm_s, 0);
  EXPECT_EQ(p.exposed_s, 0);
  EXPECT_NEAR(p.forward_s + p.backward_s + p.optimizer_s, p.step_s, 1e-12);
  EXPECT_DOUBLE_EQ(p.tokens_per_s, 2048 / p.step_s);
}

// More GPUs at a fixed batch per GPU never predict fewer tokens/s with an unbounded bus;
// with almost no bandwidth the step is its communication.
TEST(StepModel, ScalingAndCommBound) {
  const OpCostTable table = OpCostTable::builtin();
  for (ParallelMode mode : {ParallelMode::kDdp, ParallelMode::kFsdp}) {
    double last = 0;
    for (int n : {1, 2, 4, 8, 16}) {
      const StepPrediction p = predict_step(big_input("qwen3-1.7b", mode, n).run(), table, h200(), 1e12);
      EXPECT_GE(p.tokens_per_s, last) << parallel_mode_name(mode) << " x" << n;
      last = p.tokens_per_s;
    }
    const StepPrediction slow = predict_step(big_input("qwen3-1.7b", mode, 8).run(), table, h200(), 1e-3);
    EXPECT_GE(slow.step_s, slow.comm_s);
    EXPECT_GT(slow.exposed_s, 0.999 * slow.comm_s) << "at 1 MB/s nothing hides the collectives";
    EXPECT_THROW(predict_step(big_input("qwen3-1.7b", mode, 8).run(), table, h200(), 0), Error);
  }
}

// The overlap rule: ddp's reductions hide behind the backward of the units after them; the
// last one (the embedding's, issued after the last op of the backward) never does, and only
// what is still on the link when it is issued (at most the first block's) adds to it. Beside
// the collectives the compute loses comm_overlap_cost of their time.
TEST(StepModel, OverlapHidesAllButTheLastReductions) {
  OpCostTable table = OpCostTable::builtin();
  table.comm_overlap_cost = 0;
  testing::PlanCase in = big_input("qwen3-1.7b", ParallelMode::kDdp, 8);
  in.parallel.grad_dtype = GradDType::kF32;  // in place on the fp32 wire: several in flight
  const double bus = 1000;
  const StepPrediction p = predict_step(in.run(), table, h200(), bus);
  const ParamTable t(in.model, 8);
  auto seconds = [&](int unit) { return 4.0 * static_cast<double>(t.units()[unit].padded) * 1.75 / (bus * 1e9); };
  EXPECT_LT(p.exposed_s, 0.5 * p.comm_s);
  EXPECT_GE(p.exposed_s, seconds(t.embed_unit()) - 1e-12);
  EXPECT_LE(p.exposed_s, seconds(t.embed_unit()) + seconds(t.block_unit(0)));
  EXPECT_NEAR(p.slowed_s, 0, 1e-12);
  EXPECT_NEAR(p.step_s, p.forward_s + p.backward_s + p.optimizer_s + p.exposed_s, 1e-12);

  // At half speed beside the link (cost 1) the compute loses half of the link time it hides.
  table.comm_overlap_cost = 1;
  const StepPrediction q = predict_step(in.run(), table, h200(), bus);
  EXPECT_GT(q.exposed_s, 0);
  EXPECT_NEAR(q.slowed_s, 0.5 * (q.comm_s - q.exposed_s), 1e-12);
  EXPECT_NEAR(q.step_s, q.forward_s + q.backward_s + q.optimizer_s + q.exposed_s + q.slowed_s, 1e-12);
}

// Another GPU's rates: FLOP-priced ops scale with the peak, the rest with the bandwidth.
TEST(StepModel, OtherGpusScaleByPeakAndBandwidth) {
  OpCostTable table = OpCostTable::builtin();
  table.per_op_us = 0;  // the same on every GPU
  const GpuSpec& a100 = *find_gpu_spec("NVIDIA A100-SXM4-80GB");
  OpCall gemm{"linear_forward", "2048x2048x2048", 2048, 1.7e10, 2.5e7};
  OpCall norm{"rmsnorm_forward", "2048x2048", 2048, 0, 1.6e7};
  EXPECT_NEAR(table.seconds(gemm, a100), table.seconds(gemm, h200()) * 989.4 / 312.0, 1e-15);
  EXPECT_NEAR(table.seconds(norm, a100), table.seconds(norm, h200()) * 4.8 / 2.039, 1e-15);
  EXPECT_EQ(find_gpu_spec("NVIDIA L40S")->peak_tflops, 362.1) << "L40S before L40";
  EXPECT_EQ(find_gpu_spec("Tesla V100"), nullptr);
}

// Op times of `program` as if every op but zero (not timed here) ran at 1 / slower of the
// table's rate; `calls` gets their count.
std::vector<Runtime::OpTime> times_at(const std::vector<StepItem>& program, const OpCostTable& table, double slower,
                                  double* ms, double* calls) {
  std::vector<Runtime::OpTime> measured;
  std::map<std::string, size_t> row;
  *ms = *calls = 0;
  for (const StepItem& it : program) {
    if (it.kind != StepItem::Kind::kOp || it.op.op == "zero") continue;
    auto [r, fresh] = row.emplace(it.op.label(), measured.size());
    if (fresh) measured.push_back({it.op.label(), 0, 0, 0});
    const double t = 1e3 * slower * table.seconds(it.op, h200());
    measured[r->second].calls += 1;
    measured[r->second].device_ms += t;
    *ms += t;
    *calls += 1;
  }
  return measured;
}

// A table fitted from a step's op times gives the rates those times imply and the fixed cost
// per call the untimed step leaves; merged with the built-in table, the op it did not time
// keeps the built-in rate; a second fit at other sizes joins the first.
TEST(StepModel, FitRecoversTheRatesOfTheTimes) {
  OpCostTable base = OpCostTable::builtin();  // the rates of a table not fitted (whether the built-in one is or not)
  base.measured = false;
  base.per_op_us = base.per_op_calls = 0;
  const std::vector<StepItem> program = step_program(big_input("qwen3-0.6b", ParallelMode::kDdp, 1).run());
  double ms = 0, calls = 0;
  const std::vector<Runtime::OpTime> measured = times_at(program, base, 2, &ms, &calls);
  const OpCostTable fit = merge_op_tables(fit_op_table(program, measured, ms + 3e-3 * calls, h200(), "test"), base);
  EXPECT_TRUE(fit.measured);
  EXPECT_NEAR(fit.per_op_us, 3.0, 1e-9);
  for (const StepItem& it : program) {
    if (it.kind != StepItem::Kind::kOp) continue;
    const double want = 3e-6 + (it.op.op == "zero" ? 1 : 2) * base.seconds(it.op, h200());
    EXPECT_NEAR(fit.seconds(it.op, h200()), want, 1e-9 * want) << it.op.label();
  }
  const OpCostTable back = OpCostTable::from_json(fit.to_json(), "round trip");
  EXPECT_EQ(back.to_json(), fit.to_json());

  testing::PlanCase short_seq = big_input("qwen3-0.6b", ParallelMode::kDdp, 1);
  short_seq.data.seq_len = 1024;
  const std::vector<StepItem> program2 = step_program(short_seq.run());
  double ms2 = 0, calls2 = 0;
  const std::vector<Runtime::OpTime> measured2 = times_at(program2, base, 3, &ms2, &calls2);
  const OpCostTable both =
      merge_op_tables(fit_op_table(program2, measured2, ms2 + 1e-3 * calls2, h200(), "test 2"), fit);
  EXPECT_NEAR(both.per_op_us, (3 * calls + calls2) / (calls + calls2), 1e-9);
  EXPECT_EQ(both.source, "test; test 2");
  // An op of the first step at a size the second also has takes the second's rate: the
  // optimizer's (the same elements in both) and GEMMs of equal MFLOP (the 2,048-row o_proj
  // and the 1,024-row qkv, 8,590 each); zero is not timed.
  std::set<std::pair<std::string, int64_t>> second;
  for (const StepItem& it : program2)
    if (it.kind == StepItem::Kind::kOp) second.insert({it.op.op, it.op.size});
  for (const auto& [prog, slower] : {std::pair{&program, 2.0}, std::pair{&program2, 3.0}})
    for (const StepItem& it : *prog) {
      if (it.kind != StepItem::Kind::kOp || it.phase == StepPhase::kOptimizer || it.op.op == "zero") continue;
      const double factor = second.count({it.op.op, it.op.size}) ? 3.0 : slower;
      const double want = both.per_op_us * 1e-6 + factor * base.seconds(it.op, h200());
      EXPECT_NEAR(both.seconds(it.op, h200()), want, 1e-9 * want) << it.op.label();
    }
}

// The FP8 linears' times separate into GEMM and cast time: from a step's op times made with
// known GEMM rates and a known cast rate, the fit finds each again (the shapes of one row
// count differ in cast bytes per FLOP), and so prices every FP8 call as those times did.
TEST(StepModel, FitSeparatesFp8GemmsFromTheirCasts) {
  OpCostTable truth = replaced(OpCostTable::builtin(), "linear_fp8_",
                               {{"linear_fp8_forward", 2048, 1300, true}, {"linear_fp8_backward", 2048, 1100, true},
                                {"linear_fp8_backward_input", 2048, 1250, true},
                                {"linear_fp8_backward_weight", 2048, 1000, true}},
                               true);
  truth = replaced(truth, kFp8CastOp, {{kFp8CastOp, 2048, 3.2, true}});
  testing::PlanCase in = big_input("qwen3-1.7b", ParallelMode::kDdp, 1);
  in.parallel.fp8 = Fp8Recipe::kTensorwise;
  const std::vector<StepItem> program = step_program(in.run());
  double ms = 0, calls = 0;
  const std::vector<Runtime::OpTime> measured = times_at(program, truth, 1, &ms, &calls);
  const OpCostTable fit = fit_op_table(program, measured, ms, h200(), "test");
  for (const OpRate& want : truth.rates) {
    if (want.op.rfind("linear_fp8_", 0) != 0 && want.op != kFp8CastOp) continue;
    const auto got = std::find_if(fit.rates.begin(), fit.rates.end(),
                                  [&](const OpRate& r) { return r.op == want.op && r.size == want.size; });
    ASSERT_NE(got, fit.rates.end()) << want.op;
    EXPECT_NEAR(got->rate, want.rate, 1e-6 * want.rate) << want.op;
  }
  for (const StepItem& it : program) {
    if (it.kind == StepItem::Kind::kOp && it.op.cast_bytes > 0) {
      EXPECT_NEAR(fit.seconds(it.op, h200()), truth.seconds(it.op, h200()), 1e-9 * truth.seconds(it.op, h200()))
          << it.op.label();
    }
  }
}

// A call too small to be timed by its work (the loss sum's 4-byte zeroing, measured at a
// launch's cost) gives no rate: an FSDP shard's zeroing of a gigabyte keeps the rate of the
// table it was merged with, not one that prices it at hours.
TEST(StepModel, FitTakesNoRateFromLaunchBoundCalls) {
  OpCostTable base = OpCostTable::builtin();
  base.measured = false;
  base.per_op_us = base.per_op_calls = 0;
  const std::vector<StepItem> program = step_program(big_input("qwen3-0.6b", ParallelMode::kDdp, 1).run());
  double ms = 0, calls = 0;
  std::vector<Runtime::OpTime> measured = times_at(program, base, 2, &ms, &calls);
  const auto loss_zero = std::find_if(program.begin(), program.end(), [](const StepItem& it) {
    return it.kind == StepItem::Kind::kOp && it.op.op == "zero" && it.op.bytes == 4;
  });
  ASSERT_NE(loss_zero, program.end());
  measured.push_back({loss_zero->op.label(), 1, 0.05, 0});
  const OpCostTable fit = merge_op_tables(fit_op_table(program, measured, ms + 0.05, h200(), "test"), base);
  const OpCall shard_zero{"zero", "1073741824 bytes", 1 << 30, 0, double{1 << 30}};
  const double want = base.seconds(shard_zero, h200()) + fit.per_op_us * 1e-6;
  EXPECT_NEAR(fit.seconds(shard_zero, h200()), want, 1e-9 * want);
}

TEST(StepModel, PlanPrintsEachModesPrediction) {
  const auto r = testing::run_anvil({"plan", "--preset", "qwen3-1.7b", "--nproc", "8", "--gpu", "H200", "--bus-gbps",
                                     "400", "--recompute", "none"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string measured = OpCostTable::builtin().measured ? "measured" : "NOT measured";
  EXPECT_NE(r.out.find("step, predicted for 8 x H200 (op costs: H200 table, " + measured), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("bus 400 GB/s: --bus-gbps"), std::string::npos) << r.out;
  testing::PlanCase in = big_input("qwen3-1.7b", ParallelMode::kDdp, 8);
  const OpCostTable table = OpCostTable::builtin();
  const std::string ddp = prediction_line("ddp", predict_step(in.run(), table, h200(), 400));
  in.parallel.mode = ParallelMode::kFsdp;
  const std::string fsdp = prediction_line("fsdp", predict_step(in.run(), table, h200(), 400));
  EXPECT_NE(r.out.find(ddp), std::string::npos) << "want " << ddp << " in " << r.out;
  EXPECT_NE(r.out.find(fsdp), std::string::npos) << "want " << fsdp << " in " << r.out;

  const auto topo = testing::run_anvil({"plan", "--preset", "qwen3-1.7b", "--nproc", "8", "--topo-answers",
                                        testing::testdata_dir() + "/topo/nvlink_8gpu_nvswitch.json", "--json"});
  ASSERT_EQ(topo.exit_code, 0) << topo.out;
  const Json j = json_parse(topo.out, "plan --json");
  EXPECT_EQ(j.at("predicted").at("bus_gbps").get<double>(), 360.0) << topo.out;
  EXPECT_NE(j.at("predicted").at("bus_source").get<std::string>().find("NVLink 4.0 via NVSwitch"), std::string::npos);
  EXPECT_GT(j.at("predicted").at("fsdp").at("tokens_per_s").get<double>(), 0);

  // This machine's GPU (recorded answers here) names the GPU; one the model does not know
  // leaves the step unpredicted and the memory plan as it was.
  Json v100 = json_read_file(testing::testdata_dir() + "/topo/one_gpu.json");
  v100["gpus"][0]["name"] = "Tesla V100-SXM2-16GB";
  const std::string answers = testing::temp_dir("topo") + "/v100.json";
  json_write_file(answers, v100);
  const auto unknown = testing::run_anvil({"plan", "--preset", "qwen3-1.7b", "--topo-answers", answers});
  EXPECT_EQ(unknown.exit_code, 0) << unknown.out;
  EXPECT_NE(unknown.out.find("step: not predicted: this machine's GPU, Tesla V100-SXM2-16GB, is not one"),
            std::string::npos) << unknown.out;
  const auto h100 = testing::run_anvil({"plan", "--preset", "qwen3-1.7b", "--nproc", "8", "--topo-answers",
                                        testing::testdata_dir() + "/topo/nvlink_8gpu_nvswitch.json"});
  EXPECT_NE(h100.out.find("step, predicted for 8 x H100 "), std::string::npos) << h100.out;

  const auto bad = testing::run_anvil({"plan", "--preset", "qwen3-1.7b", "--gpu", "V100"});
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("unknown GPU 'V100' (--gpu takes one of"), std::string::npos) << bad.out;
}

// Qwen3-30B-A3B on 8 ranks: `anvil plan` gives every mode its memory and a positive
// prediction; a whole replica (ddp: the 30.5B parameters' masters, AdamW state and gradients,
// 14-16 bytes each) is more than an H200 holds, fsdp's shards fit. The step's experts' GEMMs
// are the sparse layers' FLOPs at the balanced count: 6 x (N K assignments) x 3 Im C per
// layer (forward, dx, dw), each expert's GEMM of N K / E rows.
TEST(StepModel, PlanOfQwen3MoeOn8RanksGivesEveryMode) {
  const auto r = testing::run_anvil({"plan", "--preset", "qwen3-30b-a3b", "--nproc", "8", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const Json j = json_parse(r.out, "plan --json");
  const ModelConfig m = preset_config("qwen3-30b-a3b");
  ASSERT_EQ(m.num_parameters(), 30532122624);
  for (const char* mode : {"ddp", "zero2", "fsdp"}) {
    EXPECT_GT(j.at(mode).at("total").get<int64_t>(), 0) << mode;
    EXPECT_GT(j.at(mode).at("activations").get<int64_t>(), 0) << mode;
    EXPECT_GT(j.at("predicted").at(mode).at("tokens_per_s").get<double>(), 0) << mode;
  }
  const int64_t ddp = j.at("ddp").at("total").get<int64_t>(), fsdp = j.at("fsdp").at("total").get<int64_t>();
  EXPECT_GT(j.at("ddp").at("params").get<int64_t>() + j.at("ddp").at("optimizer").get<int64_t>(),
            12 * m.num_parameters()) << "the masters and AdamW state of every expert";
  EXPECT_GT(ddp + kPlanReserve, kH200Bytes) << "a replica of 30.5B parameters does not fit an H200";
  EXPECT_LE(fsdp + kPlanReserve, kH200Bytes) << "fsdp's shards do";
  EXPECT_EQ(j.at("fsdp").at("params").get<int64_t>(), 4 * ParamTable(m, 8).total_padded() / 8);
  const auto text = testing::run_anvil({"plan", "--preset", "qwen3-30b-a3b", "--nproc", "8"});
  for (const char* mode : {"ddp", "zero2", "fsdp"})
    EXPECT_NE(text.out.find(cat("predicted ", mode, ": ")), std::string::npos) << text.out;

  testing::PlanCase in = big_input("qwen3-30b-a3b", ParallelMode::kFsdp, 8);
  const int64_t N = 2048, K = m.moe.top_k, E = m.moe.num_experts, Ls = m.sparse_layers();
  ASSERT_EQ(Ls, 48);
  double experts_flops = 0;
  for (const StepItem& it : step_program(in.run()))
    if (it.kind == StepItem::Kind::kOp && it.op.op.rfind("moe_linear_", 0) == 0) {
      experts_flops += it.op.flops;
      // One expert's GEMM at the balanced count (N K / E rows), in MFLOP as a bf16 linear's.
      const double out_in = it.op.flops / (2.0 * N * K);
      EXPECT_EQ(it.op.size, std::llround(2.0 * static_cast<double>(N * K / E) * out_in / 1e6)) << it.op.label();
      EXPECT_GT(OpCostTable::builtin().seconds(it.op, h200()), 0) << it.op.label();
    }
  EXPECT_EQ(experts_flops, 6.0 * N * K * 3 * m.moe.intermediate * m.hidden_size * Ls);
}

// --write-op-table prices ops that ran alone on one GPU: refused otherwise, before a step runs
// where it can be, and on a device the step model does not know.
TEST(StepModel, BenchStepWritesATableOnlyFromALoneStep) {
  const std::string table = testing::temp_dir("op-table") + "/table.json";
  const std::vector<std::string> base = {"bench", "step", "--device", "cpu", "--preset", "tiny", "--seq-len", "32",
                                         "--steps", "2", "--warmup", "1", "--write-op-table", table};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return testing::run_anvil(args);
  };
  const auto overlapped = with({"--op-times"});
  EXPECT_EQ(overlapped.exit_code, 2) << overlapped.out;
  EXPECT_NE(overlapped.out.find("add --op-times --no-overlap-optimizer"), std::string::npos) << overlapped.out;
  const auto ranks = with({"--op-times", "--no-overlap-optimizer", "--nproc-per-node", "2"});
  EXPECT_NE(ranks.exit_code, 0) << ranks.out;
  EXPECT_NE(ranks.out.find("--write-op-table measures one GPU's ops"), std::string::npos) << ranks.out;
  const auto cpu = with({"--op-times", "--no-overlap-optimizer"});
  EXPECT_EQ(cpu.exit_code, 2) << cpu.out;
  EXPECT_NE(cpu.out.find("needs a GPU the step model knows"), std::string::npos) << cpu.out;
  EXPECT_FALSE(path_exists(table));
}

}  // namespace
}  // namespace anvil
