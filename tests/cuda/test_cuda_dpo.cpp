// DPO's op on the GPU (train/dpo.h): the fused output projection + cross-entropy with per-row
// weights and per-row losses (ops.h), against the fp32 CPU reference on the same bf16 inputs:
// the rows' own losses, the weighted loss sum, dh and dw; weights of both signs and zeros, a
// shape with two blocks of rows at Qwen3's vocabulary.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "cuda_test_util.h"

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

}  // namespace
}  // namespace anvil
