// --expert-parallel N on CPU ranks (docs/ARCHITECTURE.md, Expert parallelism): each rank holds
// E/N of every sparse layer's experts and exchanges the routed rows by all-to-all, the rest of
// the model in ddp, zero2 or fsdp over all ranks. With the same global batch, N = 2 on 2 ranks
// and N = 2 and 4 on 4 ranks reach one process's losses within the reductions' order (fp32
// sums in another order: 1e-6 relative, a few ulps; measured below 4e-8) and its exported
// parameters (1e-5 relative L2, as tests/test_moe_parallel.cpp). A checkpoint saved with one
// degree resumes with another (the experts are saved in the global layout and read by name):
// the losses after the resume are the uninterrupted run's within the same bound. Degrees that
// do not divide the experts or the ranks are refused (exit 2). Accumulation and recomputation
// change nothing of it. The load-balancing loss is off,
// as in test_moe_parallel (it is a mean over each micro-batch's tokens).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <vector>

#include "core/fs.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "plan/step_model.h"
#include "plan_case.h"
#include "bench_step_calls.h"
#include "testing.h"
#include "tiny_moe.h"

namespace anvil {
namespace {

struct Layout {
  const char* mode;
  int nproc, experts, micro;
  int accum = 1;
  const char* recompute = "none";
};

std::string tag_of(const Layout& l) {
  return cat(l.mode, "_n", l.nproc, "_ep", l.experts, "_b", l.micro, "_k", l.accum, "_", l.recompute);
}

struct TrainRun {
  std::map<int64_t, double> losses;  // by step
  std::map<std::string, std::vector<double>> params;
  std::string out;
};

// `steps` steps of the same global batch (4 sequences) in layout l; extra: more flags.
TrainRun train(const std::string& dir, const std::string& tag, const Layout& l, int steps,
               const std::vector<std::string>& extra = {}, const std::string& model = "model") {
  const std::string out = dir + "/" + tag;
  std::vector<std::string> args = {"train", "--device", "cpu", "--model", dir + "/" + model, "--data",
                                   dir + "/blocks.safetensors", "--mode", l.mode, "--steps", std::to_string(steps),
                                   "--micro-batch", std::to_string(l.micro), "--grad-accum", std::to_string(l.accum),
                                   "--recompute", l.recompute, "--lr", "1e-3", "--log-every", "1",
                                   "--metrics", out + ".jsonl", "--export", out, "--export-dtype", "fp32",
                                   "--expert-parallel", std::to_string(l.experts)};
  if (l.nproc > 1) args.insert(args.end(), {"--nproc-per-node", std::to_string(l.nproc)});
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = testing::run_anvil(args);
  EXPECT_EQ(r.exit_code, 0) << tag << ": " << r.out;
  TrainRun run;
  run.out = r.out;
  std::ifstream m(out + ".jsonl");
  std::string line;
  while (std::getline(m, line))
    if (const Json j = json_parse(line, tag); j.contains("step") && j.contains("loss"))
      run.losses[j["step"].get<int64_t>()] = j["loss"].get<double>();
  if (path_exists(out + "/model.safetensors")) {
    SafetensorsFile f(out + "/model.safetensors");
    for (auto& t : f.tensors()) run.params[t.name] = read_as_f64(t);
  }
  return run;
}

constexpr double kLossRel = 1e-6;   // the reductions' order in fp32 (a few ulps)
constexpr double kParamRel = 1e-5;  // after 5 AdamW steps (test_moe_parallel's bound)

// The largest relative difference of got's losses from want's, over want's steps from `from`.
double loss_diff(const TrainRun& got, const TrainRun& want, int64_t from, const std::string& tag) {
  double worst = 0;
  for (const auto& [step, loss] : want.losses) {
    if (step < from) continue;
    EXPECT_TRUE(got.losses.count(step)) << tag << " has no loss at step " << step;
    if (!got.losses.count(step)) continue;
    const double d = std::abs(got.losses.at(step) - loss) / std::abs(loss);
    EXPECT_LE(d, kLossRel) << tag << " step " << step << ": " << got.losses.at(step) << " vs " << loss;
    worst = std::max(worst, d);
  }
  return worst;
}

TEST(MoeExpertParallel, LossesAndWeightsAreOneProcesssInEveryLayout) {
  const std::string dir = testing::parallel_moe_dir("moe-expert-parallel");
  const TrainRun base = train(dir, "base", {"ddp", 1, 1, 4}, 5);
  ASSERT_EQ(base.losses.size(), 5u);
  double worst = 0;
  // Accumulation (the experts' replicas reduce on the last micro-batch) and recomputation (the
  // exchange runs again before each sparse layer's backward) too.
  for (Layout l : {Layout{"ddp", 2, 2, 2}, Layout{"fsdp", 2, 2, 2}, Layout{"zero2", 2, 2, 2}, Layout{"ddp", 4, 2, 1},
                   Layout{"fsdp", 4, 2, 1}, Layout{"ddp", 4, 4, 1}, Layout{"fsdp", 4, 4, 1},
                   Layout{"ddp", 2, 2, 1, 2, "full"}, Layout{"fsdp", 2, 2, 1, 2, "selective"}}) {
    const std::string tag = tag_of(l);
    const TrainRun got = train(dir, tag, l, 5);
    EXPECT_NE(got.out.find(cat("expert parallel ", l.experts, ": each rank holds ", 4 / l.experts)), std::string::npos)
        << tag << ": " << got.out;
    ASSERT_EQ(got.losses.size(), 5u) << tag;
    const double d = loss_diff(got, base, 1, tag);
    worst = std::max(worst, d);
    ASSERT_EQ(got.params.size(), base.params.size()) << tag;
    for (auto& [name, want] : base.params)
      EXPECT_TRUE(testing::close_rel_l2(got.params.at(name), want, kParamRel)) << tag << " " << name;
    std::printf("%s: losses within %.2e relative of one process\n", tag.c_str(), d);
  }
  // Two micro-batches per step on 4 ranks (8 sequences): the experts' replicas reduce once, on the last.
  const TrainRun base8 = train(dir, "base8", {"ddp", 1, 1, 4, 2}, 5);
  for (Layout l : {Layout{"ddp", 4, 2, 1, 2}, Layout{"fsdp", 4, 2, 1, 2, "full"}}) {
    const std::string tag = tag_of(l);
    const TrainRun got = train(dir, tag, l, 5);
    ASSERT_EQ(got.losses.size(), 5u) << tag;
    const double d = loss_diff(got, base8, 1, tag);
    worst = std::max(worst, d);
    for (auto& [name, want] : base8.params)
      EXPECT_TRUE(testing::close_rel_l2(got.params.at(name), want, kParamRel)) << tag << " " << name;
    std::printf("%s: losses within %.2e relative of one process\n", tag.c_str(), d);
  }
  std::printf("expert parallel: 11 layouts (N = 2 on 2 ranks, 2 and 4 on 4; ddp, zero2, fsdp; accumulation, "
              "recomputation) match one process; largest loss difference %.2e relative\n", worst);
}

TEST(MoeExpertParallel, ResumesAcrossDegrees) {
  const std::string dir = testing::parallel_moe_dir("moe-expert-parallel-resume");
  // Saved at step 3 of 6 with N = 2 on 2 ranks (one replica per shard), and on 4 ranks (two).
  for (Layout saved : {Layout{"ddp", 2, 2, 2}, Layout{"fsdp", 4, 2, 1}}) {
    const std::string ckpt = dir + "/ckpt_" + tag_of(saved);
    const TrainRun whole =
        train(dir, "whole_" + tag_of(saved), saved, 6, {"--save-every", "3", "--ckpt-dir", ckpt});
    ASSERT_EQ(whole.losses.size(), 6u);
    for (Layout l : {Layout{"ddp", 1, 1, 4}, Layout{"ddp", 2, 2, 2}, Layout{"fsdp", 4, 4, 1}, Layout{"ddp", 4, 2, 1}}) {
      const std::string tag = "resume_" + tag_of(saved) + "_as_" + tag_of(l);
      const TrainRun got =
          train(dir, tag, l, 6, {"--resume", ckpt + "/step-3", "--ckpt-dir", dir + "/ckpt_" + tag});
      EXPECT_NE(got.out.find("resumed from"), std::string::npos) << tag << ": " << got.out;
      ASSERT_EQ(got.losses.size(), 3u) << tag;
      const double d = loss_diff(got, whole, 4, tag);
      std::printf("%s: steps 4-6 within %.2e relative of the uninterrupted run\n", tag.c_str(), d);
      if (l.nproc == saved.nproc && l.experts == saved.experts && std::string(l.mode) == saved.mode) {
        for (const auto& [step, loss] : got.losses) EXPECT_EQ(loss, whole.losses.at(step)) << tag << " step " << step;
      }
    }
  }
}

// transformers 5's fused experts (save_pretrained with save_original_format false): each rank
// reads its rows of mlp.experts.gate_up_proj and down_proj, the weights of the per-expert
// tensors, so the run's losses are the same bits.
TEST(MoeExpertParallel, ReadsItsShareOfFusedExperts) {
  const std::string dir = testing::parallel_moe_dir("moe-expert-parallel-fused");
  make_directories(dir + "/fused");
  write_file_atomic(dir + "/fused/config.json", read_file(dir + "/model/config.json"));
  SafetensorsFile f(dir + "/model/model.safetensors");
  std::map<std::string, const SafeTensorInfo*> by_name;
  SafetensorsWriter w;
  for (const SafeTensorInfo& t : f.tensors()) {
    by_name[t.name] = &t;
    if (t.name.find(".mlp.experts.") == std::string::npos) w.add(t.name, t.dtype, t.shape, t.data);
  }
  std::vector<std::vector<uint8_t>> fused;  // held until written
  for (int layer : {0, 2}) {
    const std::string x = cat("model.layers.", layer, ".mlp.experts.");
    std::vector<uint8_t> gate_up, down;
    for (int e = 0; e < 4; ++e) {
      for (const char* part : {".gate_proj.weight", ".up_proj.weight"}) {
        const SafeTensorInfo& t = *by_name.at(x + std::to_string(e) + part);
        gate_up.insert(gate_up.end(), t.data, t.data + t.bytes);
      }
      const SafeTensorInfo& t = *by_name.at(x + std::to_string(e) + ".down_proj.weight");
      down.insert(down.end(), t.data, t.data + t.bytes);
    }
    const DType dtype = by_name.at(x + "0.down_proj.weight")->dtype;
    fused.push_back(std::move(gate_up));
    w.add(x + "gate_up_proj", dtype, {4, 48, 48}, fused.back().data());
    fused.push_back(std::move(down));
    w.add(x + "down_proj", dtype, {4, 48, 24}, fused.back().data());
  }
  w.write(dir + "/fused/model.safetensors");
  for (Layout l : {Layout{"ddp", 2, 2, 2}, Layout{"fsdp", 4, 4, 1}}) {
    const TrainRun per_expert = train(dir, "per_expert_" + tag_of(l), l, 3);
    const TrainRun from_fused = train(dir, "fused_" + tag_of(l), l, 3, {}, "fused");
    ASSERT_EQ(per_expert.losses.size(), 3u);
    EXPECT_EQ(from_fused.losses, per_expert.losses) << tag_of(l);
  }
}

// The step model under expert parallelism (plan/step_ops.cpp) against what rank 0 of a CPU step
// issued (anvil bench step --op-times): every op label, but for the ops whose rows follow the
// routing (the local experts' GEMMs and SwiGLU, the exchange's copy_rows), which are counted per
// op (the model prices them at the balanced routing, where every (expert, member) pair has rows;
// ExpertParallel skips a copy of none, so a rank issues at most the model's copies). Dense
// layers among sparse ones, the aux loss, ddp (the experts' squares under their own scalar),
// zero2 and fsdp, replicas (N < ranks), accumulation and recomputation.
std::map<std::string, double> recorded_ep_ops(const std::string& model, const char* mode, int nproc, int experts,
                                              int accum, const char* recompute) {
  return testing::bench_step_op_calls(testing::run_anvil(
      {"bench", "step", "--device", "cpu", "--model", model, "--seq-len", "32", "--steps", "2", "--warmup", "1",
       "--op-times", "--no-overlap-optimizer", "--micro-batch", "1", "--grad-accum", std::to_string(accum), "--mode",
       mode, "--recompute", recompute, "--nproc-per-node", std::to_string(nproc), "--expert-parallel",
       std::to_string(experts)}));
}

// Labels, except the routed ops' (by op name alone).
std::map<std::string, double> by_routing(const std::map<std::string, double>& calls) {
  std::map<std::string, double> out;
  for (const auto& [label, n] : calls) {
    const std::string op = label.substr(0, label.find(' '));
    const bool routed = op == "copy_rows" || op.rfind("moe_linear_", 0) == 0 ||
                        ((op == "swiglu_forward" || op == "swiglu_backward") && label.find("x24") != std::string::npos);
    out[routed ? op : label] += n;
  }
  return out;
}

TEST(MoeExpertParallel, StepModelIssuesWhatTheRanksRecord) {
  const std::string model = testing::tiny_moe_dir("ep-step-model", {{"mlp_only_layers", {1}}});
  struct Case {
    const char* mode;
    int nproc, experts, accum;
    const char* recompute;
    ParallelMode parsed;
  };
  for (Case k : {Case{"ddp", 2, 2, 1, "none", ParallelMode::kDdp}, Case{"zero2", 4, 2, 1, "none", ParallelMode::kZero2},
                 Case{"fsdp", 4, 4, 1, "full", ParallelMode::kFsdp},
                 Case{"ddp", 4, 2, 2, "selective", ParallelMode::kDdp}}) {
    SCOPED_TRACE(cat(k.mode, " on ", k.nproc, " ranks, expert parallel ", k.experts, ", ", k.accum,
                     " micro-batches, recompute ", k.recompute));
    testing::PlanCase in(load_config(model));
    in.parallel.mode = k.parsed;
    in.parallel.expert_parallel = k.experts;
    in.parallel.recompute = parse_recompute(k.recompute);
    in.world = k.nproc;
    in.data.seq_len = 32;
    in.data.grad_accum = k.accum;
    in.compute_dtype = DType::kF32;
    std::map<std::string, double> program;
    for (const StepItem& it : step_program(in.run()))
      if (it.kind == StepItem::Kind::kOp) program[it.op.label()] += 1;
    std::map<std::string, double> want = by_routing(program),
                                   got = by_routing(recorded_ep_ops(model, k.mode, k.nproc, k.experts, k.accum,
                                                                    k.recompute));
    EXPECT_LE(got["copy_rows"], want["copy_rows"]);
    EXPECT_GT(got["copy_rows"], 0);
    std::printf("%s on %d ranks, expert parallel %d: %g copies of rows issued, %g modelled\n", k.mode, k.nproc,
                k.experts, got["copy_rows"], want["copy_rows"]);
    got.erase("copy_rows");
    want.erase("copy_rows");
    EXPECT_EQ(want, got);
  }
}

// The exchange in closed form on Qwen3-30B-A3B (48 sparse layers, 128 experts, top 8, hidden
// 2,048; 2,048 tokens a GPU): each sparse layer's four all_to_alls (dispatch and combine, forward
// and backward; six under full recomputation) of N chunks of n K / N rows of C bf16, priced at
// (N-1)/N of their bytes; the experts' GEMMs the same FLOPs a rank as without expert parallelism
// (E/N experts, N times the rows each); the experts units' all-reduce over D = 8 / N replicas
// in their bf16 gradients, and none where N = 8.
TEST(MoeExpertParallel, StepModelPricesTheExchangeInClosedForm) {
  const ModelConfig m = preset_config("qwen3-30b-a3b");
  const int64_t n = 2048, K = 8, C = 2048, Im = 768, E = 128, Ls = 48;
  auto input = [&](int64_t N, ParallelMode mode, Recompute r) {
    testing::PlanCase in(m);
    in.world = 8;
    in.parallel.mode = mode;
    in.parallel.expert_parallel = N;
    in.parallel.recompute = r;
    in.parallel.grad_dtype = GradDType::kBF16;
    return in;
  };
  auto experts_flops = [](const std::vector<StepItem>& p) {
    double f = 0;
    for (const StepItem& it : p)
      if (it.kind == StepItem::Kind::kOp && it.op.op.rfind("moe_linear_", 0) == 0) f += it.op.flops;
    return f;
  };
  const double flops = 6.0 * n * K * 3 * Im * C * Ls;
  EXPECT_EQ(experts_flops(step_program(input(1, ParallelMode::kFsdp, Recompute::kNone).run())), flops);
  for (int64_t N : {2, 4, 8}) {
    SCOPED_TRACE(cat("expert parallel ", N));
    const std::vector<StepItem> p = step_program(input(N, ParallelMode::kFsdp, Recompute::kNone).run());
    EXPECT_EQ(experts_flops(p), flops);
    const int64_t one = N * (n * K / N) * C * 2;  // an all_to_all's bytes
    EXPECT_EQ(comm_bytes(p).all_to_all, Ls * 4 * one);
    int64_t replicas = 0, count = 0;
    for (const StepItem& it : p) {
      if (it.kind != StepItem::Kind::kCollective) continue;
      if (it.all_to_all) {
        EXPECT_EQ(it.ranks, N);
        EXPECT_DOUBLE_EQ(bus_factor(it, 8), static_cast<double>(N - 1) / N);
      } else if (it.ranks != 0) {
        EXPECT_EQ(it.ranks, 8 / N);
        EXPECT_EQ(it.collective, BenchCollective::kAllReduce);
        replicas += it.bytes;
        ++count;
      }
    }
    EXPECT_EQ(count, N == 8 ? 0 : Ls);
    EXPECT_EQ(replicas, N == 8 ? 0 : Ls * (E / N) * 3 * Im * C * 2);
    EXPECT_EQ(comm_bytes(step_program(input(N, ParallelMode::kFsdp, Recompute::kFull).run())).all_to_all,
              Ls * 6 * one);
  }
}

// The exchange's rows against the plan: the done line says the most rank 0 received and the
// planned rows (bench step's JSON too), and a routing past the plan is warned of. Skewed: 8
// experts, top 2, the router's weights zero, so every token's probabilities tie and it goes to
// experts 0 and 1 (ties to the lower expert), both on shard 0 of 4: rank 0 receives 4 n 2 rows,
// twice the planned 2 n 2 (n tokens a rank).
TEST(MoeExpertParallel, ReportsTheRowsItReceivedAndWarnsPastThePlan) {
  const std::string dir = testing::parallel_moe_dir("moe-expert-parallel-rows");
  const std::regex said(R"(expert exchange on rank 0: at most (\d+) rows received \(planned (\d+)\))");
  const std::string past = "x the balanced count, so the exchange's buffers grow past the memory plan";
  std::smatch m;
  const TrainRun even = train(dir, "even", Layout{"ddp", 2, 2, 2}, 2);
  ASSERT_TRUE(std::regex_search(even.out, m, said)) << even.out;
  EXPECT_GT(std::stoll(m[1]), 0);
  EXPECT_LE(std::stoll(m[1]), std::stoll(m[2]));
  EXPECT_EQ(even.out.find(past), std::string::npos) << even.out;
  const auto bench = testing::run_anvil({"bench", "step", "--device", "cpu", "--model", dir + "/model", "--seq-len",
                                         "32", "--steps", "2", "--warmup", "1", "--nproc-per-node", "2",
                                         "--expert-parallel", "2"});
  const std::regex rows(R"re("expert_rows_max":(\d+),"expert_rows_planned":(\d+))re");
  ASSERT_TRUE(std::regex_search(bench.out, m, rows)) << bench.out;
  EXPECT_GT(std::stoll(m[1]), 0);
  EXPECT_LE(std::stoll(m[1]), std::stoll(m[2]));

  Json cfg = json_parse(read_file(dir + "/model/config.json"), "config.json");
  cfg["num_experts"] = 8;
  json_write_file(dir + "/skewed.json", cfg);
  const auto init = testing::run_anvil({"init", "--config", dir + "/skewed.json", "--out", dir + "/init8"});
  ASSERT_EQ(init.exit_code, 0) << init.out;
  std::filesystem::create_directory(dir + "/skewed_model");
  std::filesystem::copy_file(dir + "/init8/config.json", dir + "/skewed_model/config.json");
  {
    SafetensorsFile f(dir + "/init8/model.safetensors");
    SafetensorsWriter w;
    std::vector<uint8_t> zeros;
    for (const SafeTensorInfo& t : f.tensors()) {
      const bool router = t.name.ends_with(".mlp.gate.weight");
      zeros.resize(std::max(zeros.size(), t.bytes), 0);
      w.add(t.name, t.dtype, t.shape, router ? zeros.data() : t.data);
    }
    w.write(dir + "/skewed_model/model.safetensors");
  }
  const TrainRun skewed = train(dir, "skewed", Layout{"ddp", 4, 4, 1}, 1, {}, "skewed_model");
  ASSERT_TRUE(std::regex_search(skewed.out, m, said)) << skewed.out;
  EXPECT_EQ(std::stoll(m[1]), 2 * std::stoll(m[2])) << skewed.out;
  EXPECT_NE(skewed.out.find(past), std::string::npos) << skewed.out;
}

TEST(MoeExpertParallel, RefusesDegreesThatDoNotDivide) {
  const std::string dir = testing::parallel_moe_dir("moe-expert-parallel-refused");
  struct Case {
    int nproc, experts;
    const char* says;
  };
  for (Case c : {Case{2, 4, "--expert-parallel 4 must divide the ranks (2"},
                 Case{3, 3, "--expert-parallel 3 must divide the model's 4 experts"},
                 Case{1, 0, "--expert-parallel must be at least 1, got 0"}}) {
    std::vector<std::string> args = {"train", "--device", "cpu", "--model", dir + "/model", "--data",
                                     dir + "/blocks.safetensors", "--steps", "1", "--micro-batch", "1",
                                     "--expert-parallel", std::to_string(c.experts)};
    if (c.nproc > 1) args.insert(args.end(), {"--nproc-per-node", std::to_string(c.nproc)});
    const auto r = testing::run_anvil(args);
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace anvil
