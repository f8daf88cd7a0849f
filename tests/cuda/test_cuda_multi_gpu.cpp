// Two ranks on GPUs: `anvil train` with 2 ranks in ddp and fsdp, fp32 and bf16 gradient
// reduction, reaches the losses of one GPU with the same global batch on the tiny fixtures,
// on the fast path of one GPU (split masters, bf16 gradients of the blocks); the optimizer
// overlapped with the next forward gives the losses of the optimizer run alone, bit for
// bit; a checkpoint written on 2 ranks resumes on 1, and on 2 bit for bit; context parallel
// over the 2 ranks gives one GPU's losses; zero2 equals fsdp bit for bit and ddp within
// the reduction order; expert parallel over the 2 ranks gives the losses without it. Two transports:
// NCCL on two GPUs (skips with fewer), and the CPU comm staging GPU tensors through the
// host (ANVIL_GPU_COMM_HOST=1, comm/comm.h), where both ranks share one GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <tuple>

#include "comm/device.h"
#include "core/json.h"
#include "io/checkpoint_files.h"
#include "io/safetensors.h"
#include "../testing.h"

namespace anvil {
namespace {

// (fixture, transport): "nccl" or "host" (ranks sharing one GPU).
class MultiGpu : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    const int n = gpu_count();
    host_ = std::get<1>(GetParam()) == "host";
    if (!host_ && n < 2) GTEST_SKIP() << "needs 2 GPUs, " << n << " visible: 2-rank ddp/fsdp over NCCL cannot run here";
    if (host_ && n < 1) GTEST_SKIP() << "needs a GPU";
    if (host_)
      setenv("ANVIL_GPU_COMM_HOST", "1", 1);
    else
      unsetenv("ANVIL_GPU_COMM_HOST");
    dir_ = testing::temp_dir("multi_gpu");
    std::mt19937 rng(11);
    std::vector<int64_t> ids(32 * 64);
    for (auto& x : ids) x = static_cast<int64_t>(rng() % 1000);
    SafetensorsWriter w;
    w.add("input_ids", DType::kI64, {32, 64}, ids.data());
    w.write(dir_ + "/blocks.safetensors");
  }

  void TearDown() override { unsetenv("ANVIL_GPU_COMM_HOST"); }

  std::vector<double> train(const std::string& tag, const std::string& mode, int nproc, int micro,
                            const std::vector<std::string>& extra = {}) {
    const std::string metrics = dir_ + "/" + tag + ".jsonl";
    std::vector<std::string> args = {"train", "--device", "cuda", "--model",
                                     model_.empty() ? testing::fixture_dir(fixture()) : model_,
                                     "--data", dir_ + "/blocks.safetensors", "--mode", mode, "--steps", std::to_string(steps_),
                                     "--micro-batch", std::to_string(micro), "--lr", "1e-3", "--log-every", "1",
                                     "--metrics", metrics};
    if (nproc > 1) args.insert(args.end(), {"--nproc-per-node", std::to_string(nproc)});
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = testing::run_anvil(args);
    EXPECT_EQ(r.exit_code, 0) << tag << ": " << r.out;
    last_out_ = r.out;
    std::vector<double> losses;
    std::ifstream m(metrics);
    std::string line;
    while (std::getline(m, line))
      if (const Json j = json_parse(line, tag); j.contains("step")) losses.push_back(j["loss"].get<double>());
    return losses;
  }

  // bf16 compute on both sides; different per-rank shapes change the rounding, not the math.
  static void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                           const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], tol * want[i]) << what << " step " << i + 1;
  }

  std::string fixture() const { return std::get<0>(GetParam()); }

  std::string dir_, last_out_;
  std::string model_;  // a model folder in place of the fixture's (ExpertParallel's)
  bool host_ = false;
  int steps_ = 8;
};

// One sequence per rank and step: the blocks' gradients in bf16 on both ranks (the fast
// path of one GPU), reduced on an fp32 or a bf16 wire.
TEST_P(MultiGpu, TwoRanksMatchOneGpu) {
  const std::vector<double> one = train("one", "ddp", 1, 4);
  ASSERT_EQ(one.size(), 8u);
  for (const char* mode : {"ddp", "fsdp"})
    for (const char* reduce : {"fp32", "bf16"}) {
      const std::string tag = std::string(mode) + "_" + reduce;
      expect_close(train(tag, mode, 2, 2, {"--reduce-dtype", reduce}), one, 5e-3, tag);
      EXPECT_NE(last_out_.find("resolved grad dtype bf16"), std::string::npos) << tag << ": " << last_out_;
    }
}

// Context parallel over both ranks (Ulysses: all-to-alls of bf16 activations, through NCCL
// or the host) against one GPU with the same micro-batch of 4 sequences: bf16 rounding apart,
// the same losses, in ddp and fsdp.
TEST_P(MultiGpu, ContextParallelMatchesOneGpu) {
  const std::vector<double> one = train("one", "ddp", 1, 4);
  ASSERT_EQ(one.size(), 8u);
  for (const char* mode : {"ddp", "fsdp"})
    expect_close(train(std::string("cp_") + mode, mode, 2, 4, {"--context-parallel", "2"}), one, 5e-3,
                 std::string("context parallel, ") + mode);
}

// The optimizer overlapped with the next forward (per unit, on the side queue) against run
// alone: the same ops on the same data, so the same losses bit for bit, with the bf16
// reduction and FSDP's last block kept gathered between its forward and backward.
// One micro-batch per step (bf16 gradients) and two (fp32 gradients, accumulated).
TEST_P(MultiGpu, OverlappedOptimizerGivesTheSameLossesOnTwoRanks) {
  for (const char* mode : {"ddp", "fsdp"})
    for (const char* reduce : {"fp32", "bf16"})
      for (const char* accum : {"1", "2"}) {
        const std::string tag = std::string("overlap_") + mode + "_" + reduce + "_" + accum;
        const std::vector<std::string> flags = {"--reduce-dtype", reduce, "--grad-accum", accum};
        const std::vector<double> overlapped = train(tag, mode, 2, 1, flags);
        std::vector<std::string> serial = flags;
        serial.push_back("--no-overlap-optimizer");
        const std::vector<double> alone = train(tag + "_alone", mode, 2, 1, serial);
        ASSERT_EQ(overlapped.size(), 8u) << tag;
        EXPECT_EQ(overlapped, alone) << tag;
      }
}

// zero2 (whole bf16 weights on each rank, sharded masters, AdamW state and gradients) against
// fsdp and ddp on two ranks over 20 steps. Both sharded modes run the same kernels on the same
// bf16 weights (zero2 keeps them whole, fsdp gathers the same high halves per use) and
// reduce-scatter the same gradients into the same fp32 shards, so zero2 equals fsdp bit for
// bit; ddp all-reduces whole gradients and, with one micro-batch per step, rounds the sum back
// to its bf16 gradients, which the sharded modes add into fp32 shards unrounded: the losses
// differ by that rounding, within the tolerance this file holds two ranks to against one GPU.
// On the Qwen3- and Llama-shaped fixtures (its own suite, instantiated below).
class Zero2 : public MultiGpu {};

TEST_P(Zero2, IsFsdpsBitsAndDdpsWithinTheReductionOrder) {
  steps_ = 20;
  double worst = 0;
  for (const char* reduce : {"fp32", "bf16"})
    for (const char* accum : {"1", "2"}) {
      const std::string tag = std::string("zero2_") + reduce + "_" + accum;
      const std::vector<std::string> flags = {"--reduce-dtype", reduce, "--grad-accum", accum};
      const std::vector<double> zero2 = train(tag, "zero2", 2, 1, flags);
      const std::vector<double> fsdp = train(tag + "_fsdp", "fsdp", 2, 1, flags);
      const std::vector<double> ddp = train(tag + "_ddp", "ddp", 2, 1, flags);
      ASSERT_EQ(zero2.size(), 20u) << tag;
      EXPECT_EQ(zero2, fsdp) << tag << ": zero2 against fsdp, bit for bit";
      expect_close(zero2, ddp, 5e-3, tag + " against ddp");
      for (size_t i = 0; i < ddp.size(); ++i) worst = std::max(worst, std::abs(zero2[i] - ddp[i]) / ddp[i]);
    }
  std::printf("zero2 against ddp on two ranks, 20 steps: largest relative loss difference %.3g\n", worst);
}

// The split masters and AdamW state of each rank's shard go to the checkpoint and come
// back exactly: a resume on the same two ranks continues the uninterrupted losses bit for
// bit, in both modes, with the bf16 gradients of one micro-batch per step.
TEST_P(MultiGpu, ResumeOnTwoRanksIsBitExact) {
  for (const char* mode : {"ddp", "fsdp"}) {
    const std::string ckpt = dir_ + "/bitexact_" + mode;
    const std::vector<double> whole = train(std::string("whole_") + mode, mode, 2, 2,
                                            {"--save-every", "4", "--ckpt-dir", ckpt});
    ASSERT_EQ(whole.size(), 8u) << mode;
    const std::vector<double> resumed =
        train(std::string("resumed_") + mode, mode, 2, 2, {"--resume", ckpt + "/step-4"});
    EXPECT_EQ(resumed, std::vector<double>(whole.begin() + 4, whole.end())) << mode;
  }
}

TEST_P(MultiGpu, CheckpointMovesBetweenTwoAndOneGpu) {
  const std::vector<double> one = train("ck_one", "ddp", 1, 4);
  const std::string ckpt = dir_ + "/ckpt";
  train("ck_two", "fsdp", 2, 2, {"--save-every", "4", "--ckpt-dir", ckpt});
  const std::vector<double> resumed = train("ck_resume", "ddp", 1, 4, {"--resume", ckpt + "/step-4"});
  ASSERT_EQ(resumed.size(), 4u);
  expect_close(resumed, std::vector<double>(one.begin() + 4, one.end()), 5e-3, "2 GPUs -> 1");
}

// Expert parallel over the two ranks (model/expert_parallel.h): a Qwen3-MoE of 4 experts that
// routes every token to all 4 (top-k of all, so that bf16 cannot flip a token's experts), each
// rank holding 2 and exchanging the rows by all-to-all; ddp and fsdp for the rest. Its losses
// are the same run's without expert parallelism within the reduction order (5e-3, as above),
// and a checkpoint saved with it resumes on one GPU (the experts in the global layout).
class ExpertParallel : public MultiGpu {};

TEST_P(ExpertParallel, MatchesEveryExpertOnEveryRank) {
  const Json cfg = {{"architectures", {"Qwen3MoeForCausalLM"}}, {"vocab_size", 1000}, {"hidden_size", 64},
                    {"intermediate_size", 128}, {"num_hidden_layers", 3}, {"num_attention_heads", 4},
                    {"num_key_value_heads", 2}, {"head_dim", 16}, {"num_experts", 4}, {"num_experts_per_tok", 4},
                    {"moe_intermediate_size", 32}, {"norm_topk_prob", true}, {"mlp_only_layers", {1}},
                    {"initializer_range", 0.05}};
  json_write_file(dir_ + "/moe.json", cfg);
  model_ = dir_ + "/moe";
  const auto init = testing::run_anvil({"init", "--config", dir_ + "/moe.json", "--out", model_, "--seed", "5"});
  ASSERT_EQ(init.exit_code, 0) << init.out;
  const std::vector<double> one = train("ep_one", "ddp", 1, 4);
  ASSERT_EQ(one.size(), 8u);
  double worst = 0;
  for (const char* mode : {"ddp", "fsdp"}) {
    const std::vector<double> plain = train(std::string("plain_") + mode, mode, 2, 2);
    const std::string ckpt = dir_ + "/ep_ckpt_" + mode;
    const std::vector<double> ep = train(std::string("ep_") + mode, mode, 2, 2,
                                         {"--expert-parallel", "2", "--save-every", "4", "--ckpt-dir", ckpt});
    EXPECT_NE(last_out_.find("expert parallel 2: each rank holds 2 of every sparse layer's 4 experts"),
              std::string::npos) << last_out_;
    expect_close(ep, plain, 5e-3, std::string("expert parallel against none, ") + mode);
    expect_close(ep, one, 5e-3, std::string("expert parallel against one GPU, ") + mode);
    for (size_t i = 0; i < ep.size() && i < plain.size(); ++i)
      worst = std::max(worst, std::abs(ep[i] - plain[i]) / plain[i]);
    const std::vector<double> resumed =
        train(std::string("ep_resumed_") + mode, "ddp", 1, 4, {"--resume", ckpt + "/step-4"});
    ASSERT_EQ(resumed.size(), 4u) << mode;
    expect_close(resumed, std::vector<double>(ep.begin() + 4, ep.end()), 5e-3,
                 std::string("resumed on one GPU, ") + mode);
  }
  std::printf("expert parallel 2 on two ranks against none, 8 steps: largest relative loss difference %.3g\n", worst);
}

// A rank whose GPU stops inside a step (ANVIL_FAULT=gpu_hang_at_step, comm/nccl): its
// first collective of that step hangs inside NCCL on both ranks. The NCCL watchdog names it
// within the comm timeout plus 10 s (which rank, which collective, which step), the run
// exits non-zero with nothing left running, and its last checkpoint is intact.
TEST(MultiGpuNccl, GpuHangIsNamedWithinTheTimeout) {
  const int n = gpu_count();
  if (n < 2) GTEST_SKIP() << "needs 2 GPUs, " << n << " visible: a hang inside NCCL needs two NCCL ranks";
  unsetenv("ANVIL_GPU_COMM_HOST");
  const std::string dir = testing::temp_dir("gpu_hang"), ckpt = dir + "/ckpt";
  std::vector<int64_t> ids(16 * 64, 7);
  SafetensorsWriter w;
  w.add("input_ids", DType::kI64, {16, 64}, ids.data());
  w.write(dir + "/blocks.safetensors");
  std::string cmd = "exec env ANVIL_FAULT=gpu_hang_at_step:5 ANVIL_COMM_TIMEOUT_S=5 " +
                    testing::shell_quote(testing::anvil_binary());
  for (const std::string a : {"train", "--device", "cuda", "--model", testing::fixture_dir("tiny-qwen3").c_str(),
                              "--data", (dir + "/blocks.safetensors").c_str(), "--mode", "fsdp", "--steps", "8",
                              "--micro-batch", "1", "--nproc-per-node", "2", "--save-every", "2", "--ckpt-dir",
                              ckpt.c_str()})
    cmd += " " + testing::shell_quote(a);
  testing::Background bg(cmd + " </dev/null");
  ASSERT_TRUE(bg.wait_for_line("fault gpu_hang_at_step (ANVIL_FAULT): the GPU of rank 1 stops")) << bg.out();
  const auto hung_at = std::chrono::steady_clock::now();
  const testing::RunResult r = bg.finish();
  const double named_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - hung_at).count();
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_LT(named_after, 5 + 10) << r.out;
  EXPECT_NE(r.out.find("on rank 1 of 2 (step 5, tag '"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("this rank's GPU did not reach it within 5 s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("error: rank 1 (pid "), std::string::npos) << "the launcher names rank 1\n" << r.out;
  EXPECT_TRUE(validate_checkpoint(ckpt + "/step-4").ok()) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MultiGpu,
                         ::testing::Combine(::testing::Values("tiny-qwen3", "tiny-qwen3-untied"),
                                            ::testing::Values("nccl", "host")),
                         [](const auto& info) {
                           return testing::test_suffix(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });
INSTANTIATE_TEST_SUITE_P(Fixtures, ExpertParallel,
                         ::testing::Combine(::testing::Values("moe"), ::testing::Values("nccl", "host")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });
INSTANTIATE_TEST_SUITE_P(Fixtures, Zero2,
                         ::testing::Combine(::testing::Values("tiny-qwen3", "tiny-llama3"),
                                            ::testing::Values("nccl", "host")),
                         [](const auto& info) {
                           return testing::test_suffix(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace anvil
