// Evaluation on the GPU through the binary (tiny fixture): the training losses and the
// final weights are the same bits with and without --eval-data (ddp, and fsdp on 2 GPUs
// where present), and the final eval loss is the loss `anvil grad --device cuda` computes on
// the exported fp32 weights with the eval blocks as one batch.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>

#include "comm/device.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "ops/ops.h"
#include "../testing.h"
#include "../metrics_losses.h"
#include "require_gpu.h"

namespace anvil {
namespace {

struct GpuRun {
  int exit_code = -1;
  std::string out;
  std::map<int64_t, double> losses, eval_losses;
  std::map<std::string, std::vector<double>> params;
};

void write_blocks(const std::string& file, int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> ids(static_cast<size_t>(n * 37));
  for (auto& x : ids) x = static_cast<int64_t>(rng() % 1000);
  SafetensorsWriter w;
  w.add("input_ids", DType::kI64, {n, 37}, ids.data());
  w.write(file);
}

GpuRun train(const std::string& dir, const std::string& tag, int nproc, const std::vector<std::string>& extra) {
  const std::string out = dir + "/" + tag;
  std::vector<std::string> args = {"train", "--device", "cuda", "--model",
                                   testing::shared_dir() + "/fixtures/tiny-qwen3", "--data",
                                   dir + "/train.safetensors", "--steps", "6", "--micro-batch",
                                   std::to_string(2 / nproc), "--lr", "1e-3", "--log-every", "1", "--metrics",
                                   out + ".jsonl", "--export", out, "--export-dtype", "fp32"};
  if (nproc > 1) args.insert(args.end(), {"--nproc-per-node", std::to_string(nproc), "--mode", "fsdp"});
  args.insert(args.end(), extra.begin(), extra.end());
  const testing::RunResult r = testing::run_anvil(args);
  GpuRun run;
  run.exit_code = r.exit_code;
  run.out = r.out;
  const testing::MetricsLosses m = testing::read_metrics_losses(out + ".jsonl");
  run.losses = m.loss;
  run.eval_losses = m.eval_loss;
  if (r.exit_code == 0) {
    SafetensorsFile f(out + "/model.safetensors");
    for (auto& t : f.tensors()) run.params[t.name] = read_as_f64(t);
  }
  return run;
}

// The training losses and weights are the same bits with and without --eval-data on
// `nproc` GPUs, and the final eval loss is anvil grad's loss on the exported weights.
void expect_eval_changes_nothing(int nproc) {
  const std::string dir = testing::temp_dir("gpu-eval");
  write_blocks(dir + "/train.safetensors", 16, 1);
  write_blocks(dir + "/eval2.safetensors", 2, 2);
  const std::string n = std::to_string(nproc);
  const GpuRun plain = train(dir, "plain" + n, nproc, {});
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  const GpuRun eval = train(dir, "eval" + n, nproc, {"--eval-data", dir + "/eval2.safetensors", "--eval-every", "2"});
  ASSERT_EQ(eval.exit_code, 0) << eval.out;
  EXPECT_EQ(eval.losses, plain.losses) << nproc << " GPUs";
  EXPECT_EQ(eval.params, plain.params) << nproc << " GPUs";
  ASSERT_EQ(eval.eval_losses.size(), 3u) << eval.out;
  const auto g = testing::run_anvil({"grad", "--device", "cuda", "--model", dir + "/eval" + n, "--tokens",
                                     dir + "/eval2.safetensors", "--out", dir + "/grad" + n + ".safetensors"});
  ASSERT_EQ(g.exit_code, 0) << g.out;
  SafetensorsFile f(dir + "/grad" + n + ".safetensors");
  const double want = read_as_f64(*f.find("loss"))[0];
  // One GPU: one micro-batch of the same shape, the same kernels and sums. Two: each rank
  // runs one block (other GEMM shapes in bf16), and the ranks' sums are added.
  if (nproc == 1) EXPECT_EQ(static_cast<float>(eval.eval_losses.at(6)), static_cast<float>(want));
  else EXPECT_NEAR(eval.eval_losses.at(6), want, 2e-3 * want);
  std::printf("%d GPU(s): eval loss %.7f, anvil grad %.7f\n", nproc, eval.eval_losses.at(6), want);
}

TEST(GpuEval, ChangesNothingAndIsTheLossOfTheWholeSet) {
  REQUIRE_GPU();
  expect_eval_changes_nothing(1);
}

TEST(GpuEval, FsdpOnTwoGpusChangesNothingAndIsTheLossOfTheWholeSet) {
  REQUIRE_GPU();
  if (gpu_count() < 2)
    GTEST_SKIP() << "needs 2 GPUs, " << gpu_count() << " visible: fsdp eval on 2 GPUs cannot run here";
  expect_eval_changes_nothing(2);
}

}  // namespace
}  // namespace anvil
