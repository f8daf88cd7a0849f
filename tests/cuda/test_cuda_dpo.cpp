// DPO on the GPU (train/dpo.h):
//  - its op: the fused output projection + cross-entropy with per-row weights and per-row
//    losses (ops.h), against the fp32 CPU reference on the same bf16 inputs: the rows' own
//    losses, the weighted loss sum, dh and dw; weights of both signs and zeros, a shape with two
//    blocks of rows at Qwen3's vocabulary;
//  - `anvil train --objective dpo` on two ranks sharing the GPU through the host-staged comm
//    (ANVIL_GPU_COMM_HOST=1) equals one rank with the same global batch, in ddp, zero2 and fsdp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "cuda_test_util.h"
#include "../dpo_rows.h"

namespace anvil {
namespace {


TEST(CudaDpo, CrossEntropyRowWeightsAndRowLosses) {
  REQUIRE_GPU();
  struct Case { int64_t n, vocab, cols; };
  for (const Case& cs : {Case{33, 1000, 64}, Case{70, 5003, 128}, Case{1200, 151936, 64}}) {
    const std::string tag = dims({cs.n, cs.vocab, cs.cols});
    std::mt19937 gen(static_cast<uint32_t>(cs.n * 7 + cs.vocab));
    std::vector<int32_t> tg(static_cast<size_t>(cs.n));
    std::vector<float> weights(static_cast<size_t>(cs.n));
    for (size_t i = 0; i < tg.size(); ++i) {
      tg[i] = gen() % 5 == 0 ? -100 : static_cast<int32_t>(gen() % static_cast<uint32_t>(cs.vocab));
      weights[i] = gen() % 7 == 0 ? 0.0f : (static_cast<float>(gen() % 2001) / 1000.0f - 1.0f) * 0.3f;
    }
    Ids targets(tg);
    Buf h({cs.n, cs.cols}, DType::kBF16, randn(cs.n * cs.cols, 71));
    Buf w({cs.vocab, cs.cols}, DType::kBF16,
          randn(cs.vocab * cs.cols, 72, 2.0f / std::sqrt(static_cast<float>(cs.cols))));
    Buf rw({cs.n}, DType::kF32, weights);
    Buf loss({1}, DType::kF32, {0.5f});
    Buf row_losses({cs.n}, DType::kF32, nans(cs.n));
    Buf dh({cs.n, cs.cols}, DType::kBF16, nans(cs.n * cs.cols));
    Buf dw({cs.vocab, cs.cols}, DType::kF32, randn(cs.vocab * cs.cols, 73, 1e-3f));
    Tensor none;
    cpu().cross_entropy_forward_backward(loss.c(), dh.c(), dw.c(), h.c(), w.c(), targets.c(), 0.5f, none, true,
                                         rw.c(), row_losses.c());
    gpu().cross_entropy_forward_backward(loss.g(), dh.g(), dw.g(), h.g(), w.g(), targets.g(), 0.5f, none, true,
                                         rw.g(), row_losses.g());
    check("weighted cross_entropy " + tag + " row_losses", row_losses, kF32);
    check("weighted cross_entropy " + tag + " loss_sum", loss, kF32);
    check("weighted cross_entropy " + tag + " dh", dh, kChain);
    check("weighted cross_entropy " + tag + " dw", dw, kChain);
    // The forward alone writes the same row losses.
    Buf loss_only({1}, DType::kF32, {0.0f});
    Buf row_only({cs.n}, DType::kF32, nans(cs.n));
    gpu().cross_entropy_forward_backward(loss_only.g(), none, none, h.g(), w.g(), targets.g(), 1.0f, none, true, none,
                                         row_only.g());
    EXPECT_EQ(row_only.got(), row_losses.got()) << tag << ": the forward's row losses differ";
  }
}

// Two ranks of 2 pairs against one of 4, each computing its own reference log-probs (the pass
// split over the ranks and gathered: every cached one is removed first), 4 steps of the tiny
// preset: every step's loss, rewards and log-probs within 5e-3 relative (absolute below 1: the
// rewards start at 0), the bar test_cuda_multi_gpu.cpp holds two ranks to against one GPU, bf16
// rounding apart (other shapes per rank). rewards/accuracies is left out: a step's fraction of
// pairs whose margin is positive, one near-tie pair rounded the other way moves it by 1/4.
TEST(CudaDpo, TwoHostStagedRanksTrainAsOneGpu) {
  REQUIRE_GPU();
  setenv("ANVIL_GPU_COMM_HOST", "1", 1);
  const std::string dir = testing::temp_dir("cuda_dpo_ranks");
  testing::write_pairs(dir);
  const auto drop_reference = [&] {
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir + "/cache"))
      if (e.path().filename().string().rfind("ref-", 0) == 0) std::filesystem::remove(e.path());
  };
  const std::string one = dir + "/one";
  const auto r1 = testing::run_anvil(testing::dpo_train_args("cuda", dir, one, 4));
  ASSERT_EQ(r1.exit_code, 0) << r1.out;
  const std::vector<Json> want = testing::step_records(one + ".jsonl");
  ASSERT_EQ(want.size(), 4u);
  for (const char* mode : {"ddp", "zero2", "fsdp"}) {
    drop_reference();
    const std::string two = dir + "/two_" + mode;
    std::vector<std::string> args = testing::dpo_train_args("cuda", dir, two, 2);
    args.insert(args.end(), {"--nproc-per-node", "2", "--mode", mode});
    const auto r2 = testing::run_anvil(args);
    ASSERT_EQ(r2.exit_code, 0) << r2.out;
    EXPECT_NE(r2.out.find("reference log-probs: one forward pass"), std::string::npos) << r2.out;
    const std::vector<Json> got = testing::step_records(two + ".jsonl");
    ASSERT_EQ(got.size(), want.size()) << mode;
    double worst = 0;
    for (size_t s = 0; s < got.size(); ++s)
      for (const std::string& key : testing::dpo_metric_names()) {
        if (key == "rewards/accuracies") continue;
        const double a = got[s][key].get<double>(), b = want[s][key].get<double>();
        const double e = std::abs(a - b) / std::max(std::abs(b), 1.0);
        EXPECT_LE(e, 5e-3) << mode << " step " << s + 1 << " " << key << ": " << a << " against " << b;
        worst = std::max(worst, e);
      }
    std::printf("2 host-staged ranks (%s) against 1 GPU: worst metric difference %.2e\n", mode, worst);
  }
  unsetenv("ANVIL_GPU_COMM_HOST");
}

}  // namespace
}  // namespace anvil
