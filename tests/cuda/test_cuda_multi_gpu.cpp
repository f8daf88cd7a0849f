// Two GPUs when present: `anvil train` with 2 ranks (NCCL) in ddp and fsdp, fp32 and bf16
// gradient reduction, reaches the losses of one GPU with the same global batch on the
// tiny fixtures; the optimizer overlapped with the next forward gives the losses of the
// optimizer run alone, bit for bit; a checkpoint written on 2 GPUs resumes on 1. With
// fewer than two GPUs each test skips and says why.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "comm/device.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "../testing.h"

namespace anvil {
namespace {

class MultiGpu : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const int n = gpu_count();
    if (n < 2) GTEST_SKIP() << "needs 2 GPUs, " << n << " visible: 2-rank ddp/fsdp on GPUs cannot run here";
    dir_ = testing::temp_dir("multi_gpu");
    std::mt19937 rng(11);
    std::vector<int64_t> ids(32 * 64);
    for (auto& x : ids) x = static_cast<int64_t>(rng() % 1000);
    SafetensorsWriter w;
    w.add("input_ids", DType::kI64, {32, 64}, ids.data());
    w.write(dir_ + "/blocks.safetensors");
  }

  std::vector<double> train(const std::string& tag, const std::string& mode, int nproc, int micro,
                            const std::vector<std::string>& extra = {}) {
    const std::string metrics = dir_ + "/" + tag + ".jsonl";
    std::vector<std::string> args = {"train", "--device", "cuda", "--model", testing::fixture_dir(GetParam()),
                                     "--data", dir_ + "/blocks.safetensors", "--mode", mode, "--steps", "8",
                                     "--micro-batch", std::to_string(micro), "--lr", "1e-3", "--log-every", "1",
                                     "--metrics", metrics};
    if (nproc > 1) args.insert(args.end(), {"--nproc-per-node", std::to_string(nproc)});
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = testing::run_anvil(args);
    EXPECT_EQ(r.exit_code, 0) << tag << ": " << r.out;
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

  std::string dir_;
};

TEST_P(MultiGpu, TwoRanksMatchOneGpu) {
  const std::vector<double> one = train("one", "ddp", 1, 4);
  ASSERT_EQ(one.size(), 8u);
  for (const char* mode : {"ddp", "fsdp"})
    for (const char* reduce : {"fp32", "bf16"}) {
      const std::string tag = std::string(mode) + "_" + reduce;
      expect_close(train(tag, mode, 2, 2, {"--reduce-dtype", reduce}), one, 5e-3, tag);
    }
}

// The optimizer overlapped with the next forward (per unit, on the side queue) against run
// alone: the same ops on the same data, so the same losses bit for bit, with the bf16
// reduction and FSDP's last block kept gathered between its forward and backward.
TEST_P(MultiGpu, OverlappedOptimizerGivesTheSameLossesOnTwoRanks) {
  for (const char* mode : {"ddp", "fsdp"})
    for (const char* reduce : {"fp32", "bf16"}) {
      const std::string tag = std::string("overlap_") + mode + "_" + reduce;
      const std::vector<double> overlapped = train(tag, mode, 2, 1, {"--reduce-dtype", reduce, "--grad-accum", "2"});
      const std::vector<double> alone =
          train(tag + "_alone", mode, 2, 1, {"--reduce-dtype", reduce, "--grad-accum", "2", "--no-overlap-optimizer"});
      ASSERT_EQ(overlapped.size(), 8u) << tag;
      EXPECT_EQ(overlapped, alone) << tag;
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

INSTANTIATE_TEST_SUITE_P(Fixtures, MultiGpu, ::testing::Values("tiny-qwen3", "tiny-qwen3-untied"),
                         [](const auto& info) { return testing::test_suffix(info.param); });

}  // namespace
}  // namespace anvil
