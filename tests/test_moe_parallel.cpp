// Qwen3-MoE on CPU ranks: with the same global batch, ddp, zero2 and fsdp on 1, 2 and 4 ranks,
// with and without accumulation, reach one process's losses and parameters (within 1e-5
// relative: the reductions' order), as the dense model does (tests/test_parallel.cpp); the
// experts live in their layers' units, so every mode shards and reduces them unit by unit.
// The load-balancing loss is off here: it is a mean over each micro-batch's tokens (as
// transformers computes it per forward), so a different split of the batch is a different
// loss by definition.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "core/fs.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "testing.h"
#include "tiny_moe.h"

namespace anvil {
namespace {

struct TrainRun {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> params;
};

TrainRun train(const std::string& dir, const std::string& tag, const std::string& mode, int nproc, int micro,
               int accum) {
  const std::string out = dir + "/" + tag;
  std::vector<std::string> args = {"train", "--device", "cpu", "--model", dir + "/model", "--data",
                                   dir + "/blocks.safetensors", "--mode", mode, "--steps", "5", "--micro-batch",
                                   std::to_string(micro), "--grad-accum", std::to_string(accum), "--lr", "1e-3",
                                   "--log-every", "1", "--metrics", out + ".jsonl", "--export", out,
                                   "--export-dtype", "fp32"};
  if (nproc > 1) args.insert(args.end(), {"--nproc-per-node", std::to_string(nproc)});
  const auto r = testing::run_anvil(args);
  EXPECT_EQ(r.exit_code, 0) << tag << ": " << r.out;
  TrainRun run;
  std::ifstream m(out + ".jsonl");
  std::string line;
  while (std::getline(m, line))
    if (const Json j = json_parse(line, tag); j.contains("step")) run.losses.push_back(j["loss"].get<double>());
  if (path_exists(out + "/model.safetensors")) {
    SafetensorsFile f(out + "/model.safetensors");
    for (auto& t : f.tensors()) run.params[t.name] = read_as_f64(t);
  }
  return run;
}

TEST(MoeParallel, SameGlobalBatchSameResultInEveryLayout) {
  const std::string dir = testing::parallel_moe_dir("moe-parallel");

  const TrainRun base = train(dir, "base", "ddp", 1, 4, 1);
  ASSERT_EQ(base.losses.size(), 5u);
  struct Layout {
    const char* mode;
    int nproc, micro, accum;
  };
  for (Layout l : {Layout{"ddp", 1, 1, 4}, Layout{"ddp", 2, 2, 1}, Layout{"fsdp", 2, 1, 2}, Layout{"fsdp", 4, 1, 1},
                   Layout{"zero2", 2, 2, 1}}) {
    const std::string tag = std::string(l.mode) + "_n" + std::to_string(l.nproc) + "_b" + std::to_string(l.micro) +
                            "_k" + std::to_string(l.accum);
    const TrainRun got = train(dir, tag, l.mode, l.nproc, l.micro, l.accum);
    ASSERT_EQ(got.losses.size(), 5u) << tag;
    for (size_t i = 0; i < 5; ++i)
      EXPECT_NEAR(got.losses[i], base.losses[i], 1e-5 * base.losses[i]) << tag << " step " << i + 1;
    ASSERT_EQ(got.params.size(), base.params.size()) << tag;
    for (auto& [name, want] : base.params)
      EXPECT_TRUE(testing::close_rel_l2(got.params.at(name), want, 1e-5)) << tag << " " << name;
  }
  std::printf("MoE: 5 layouts of ddp, zero2 and fsdp on 1-4 ranks match one process; losses %.6f .. %.6f\n",
              base.losses.front(), base.losses.back());
}

}  // namespace
}  // namespace anvil
