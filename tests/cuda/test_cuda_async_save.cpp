// Asynchronous saves on the GPU through the binary (tiny fixture): the snapshot is copied from
// the device into page-locked host memory (one GPU: the split masters as their two halves,
// joined by the writer), so every checkpoint file is a synchronous save's byte for byte, the
// losses are the same bits, and a resume from the asynchronous checkpoint continues bit for
// bit; on one GPU, and fsdp on two where present.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "comm/device.h"
#include "core/fs.h"
#include "core/json.h"
#include "io/checkpoint_files.h"
#include "io/safetensors.h"
#include "../testing.h"
#include "../metrics_losses.h"
#include "require_gpu.h"

namespace anvil {
namespace {

struct GpuRun {
  int exit_code = -1;
  std::string out;
  std::map<int64_t, double> losses;
  std::string params;  // the exported model.safetensors' bytes
};

GpuRun train(const std::string& dir, const std::string& tag, int nproc, const std::vector<std::string>& extra) {
  const std::string out = dir + "/" + tag;
  std::vector<std::string> args = {"train", "--device", "cuda", "--model", testing::shared_dir() + "/fixtures/tiny-qwen3",
                                   "--data", dir + "/train.safetensors", "--steps", "6", "--micro-batch",
                                   std::to_string(2 / nproc), "--lr", "1e-3", "--log-every", "1", "--metrics",
                                   out + ".jsonl", "--export", out, "--export-dtype", "fp32"};
  if (nproc > 1) args.insert(args.end(), {"--nproc-per-node", std::to_string(nproc), "--mode", "fsdp"});
  args.insert(args.end(), extra.begin(), extra.end());
  const testing::RunResult r = testing::run_anvil(args);
  GpuRun run{r.exit_code, r.out, {}, ""};
  run.losses = testing::read_metrics_losses(out + ".jsonl").loss;
  if (r.exit_code == 0) run.params = read_file(out + "/model.safetensors");
  return run;
}

void expect_async_equals_sync(int nproc) {
  const std::string dir = testing::temp_dir("gpu-async-save");
  testing::write_random_blocks(dir + "/train.safetensors", 16, 37, 3);
  const std::string n = std::to_string(nproc);
  const GpuRun sync = train(dir, "sync" + n, nproc, {"--ckpt-dir", dir + "/s", "--save-every", "3", "--sync-save"});
  ASSERT_EQ(sync.exit_code, 0) << sync.out;
  const GpuRun async = train(dir, "async" + n, nproc, {"--ckpt-dir", dir + "/a", "--save-every", "3"});
  ASSERT_EQ(async.exit_code, 0) << async.out;
  EXPECT_TRUE(async.out.find("written in the background") != std::string::npos) << async.out;
  EXPECT_EQ(async.losses, sync.losses);
  EXPECT_TRUE(async.params == sync.params);
  for (const char* step : {"step-3", "step-6"}) {
    ASSERT_TRUE(validate_checkpoint(dir + "/a/" + step).ok()) << step;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/s/" + step)) {
      const std::string file = e.path().filename().string();
      if (file == "anvil_config.toml") continue;  // the flags as given (--sync-save)
      if (file == "meta.json") {  // equal but for the run's id: each run has its own
        Json got = read_checkpoint_meta(dir + "/a/" + step), want = read_checkpoint_meta(dir + "/s/" + step);
        got["train"].erase("run_id");
        want["train"].erase("run_id");
        EXPECT_EQ(got, want) << step << "/meta.json";
        continue;
      }
      EXPECT_TRUE(read_file(dir + "/a/" + step + "/" + file) == read_file(e.path().string())) << step << "/" << file;
    }
  }
  const GpuRun resumed = train(dir, "resumed" + n, nproc, {"--resume", dir + "/a/step-3"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  for (int64_t s = 4; s <= 6; ++s) EXPECT_EQ(resumed.losses.at(s), sync.losses.at(s)) << "step " << s;
  EXPECT_TRUE(resumed.params == sync.params);
}

TEST(GpuAsyncSave, OneGpuWritesASynchronousSavesBytes) {
  REQUIRE_GPU();
  expect_async_equals_sync(1);
}

TEST(GpuAsyncSave, FsdpOnTwoGpusWritesASynchronousSavesBytes) {
  REQUIRE_GPU();
  if (gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpu_count() << " visible";
  expect_async_equals_sync(2);
}

}  // namespace
}  // namespace anvil
